"""Small display helpers so notebook cells stay one line: tables, generated sentences, references."""
from __future__ import annotations

import pandas as pd
from IPython.display import HTML, Markdown, display

from . import compare, results


def say(text: str) -> None:
    """Show generated Markdown (numbers in prose come from results, never typed in)."""
    display(Markdown(text))


def table(df: pd.DataFrame, caption: str | None = None) -> None:
    """Show a DataFrame as a compact HTML table with a caption."""
    styler = df.style.hide(axis="index").format(precision=2, thousands=",", na_rep="—")
    if caption:
        styler = styler.set_caption(caption)
    display(HTML(styler.to_html()))


def parameters(res: results.Result) -> None:
    """The parameters this result was produced with."""
    rows = [{"parameter": k, "value": str(v)} for k, v in res.parameters.items() if k not in ("run_dir",)]
    table(pd.DataFrame(rows), f"Parameters of run {res.run_id}")


def reference(chapter: str, this: results.Result, host: str | None, is_reference_run: bool):
    """The reference result to compare with: this run itself when it *is* the reference run."""
    if is_reference_run:
        return this
    return results.load_reference(chapter, host)


def three_columns(chapter: str, this: results.Result, ref: results.Result | None, metrics, is_reference_run: bool,
                  host: str | None = None,
                  caption: str = "Published figure · reference run · this run (MB = 10⁶ bytes)") -> None:
    """The published figure, the reference run and this run, side by side."""
    label = f"reference run ({host or results.DEFAULT_REFERENCE_HOST})"
    df = compare.three_columns(chapter, metrics(this), metrics(ref) if ref else None,
                               this_is_reference=is_reference_run, reference_label=label)
    table(df, caption)
    display(Markdown(f"<small>{compare.S1}</small>"))
