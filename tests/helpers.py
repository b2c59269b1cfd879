"""What several test files share: the hostile string and the one check that it stays text, copies of a result
with some of its tables replaced, a printed missing number, the digest of the committed book, and the runs,
notebooks and process checks of the abuse and reliability tests."""
from __future__ import annotations

import hashlib
import json
import os
import re
import signal
from pathlib import Path

import nbformat
import pandas as pd
import psutil

from datajourney.core import results
from datajourney.core.paths import REPO_ROOT

#: A string a result file could hold: it closes a code span and opens an HTML tag if worded carelessly.
HOSTILE = "x` <img src=x onerror=alert(1)> `y"


def markup(md: str) -> list[str]:
    """What the Markdown ``md`` passes to a page as markup, read as the book's Markdown parser reads it
    (CommonMark with tables, MyST's base): HTML blocks, inline HTML, and MyST directive fences (```{raw} html),
    whose bodies MyST renders; what code spans and code blocks hold is text."""
    from markdown_it import MarkdownIt

    found = []
    for t in MarkdownIt("commonmark").enable("table").parse(md):
        if t.type == "html_block" or (t.type == "fence" and t.info.strip().startswith("{")):
            found.append(t.content)
        found += [c.content for c in t.children or [] if c.type == "html_inline"]
    return found


def assert_stays_text(*texts: str, tag: str = "<img") -> None:
    """No text of ``texts`` puts ``tag`` on the page as HTML: a hostile string is shown (in a code span, or
    escaped), never rendered."""
    for text in texts:
        bad = [m for m in markup(text) if tag in m.lower()]
        assert not bad, f"{bad} renders as HTML in:\n{text}"


def with_tables(res: results.Result, **tables) -> results.Result:
    """A copy of ``res`` whose tables ``tables`` are replaced (metadata copied, the rest shared)."""
    return results.Result(res.chapter, res.run_id, res.parameters, res.fingerprint, {**res.tables, **tables},
                          dict(res.metadata))


def threads_at_half_the_dataloader(loaders: pd.DataFrame, threaded) -> tuple[pd.DataFrame, pd.Series]:
    """Chapter 8's loaders table with every thread loader scaled so the best one runs at half the best DataLoader,
    whatever the reference measured (a case a test then reverses), and the mask of the thread loaders' rows."""
    lo = loaders.copy()
    threads = lo["loader"].isin(threaded)
    means = lo.groupby(["loader", "decoder", "concurrency"])["images_per_s"].mean()
    kinds = means.index.get_level_values("loader")
    lo.loc[threads, "images_per_s"] *= 0.5 * means[kinds == "dataloader"].max() / means[kinds.isin(threaded)].max()
    return lo, threads


def findings_by_key(page, res) -> dict:
    """``page.findings(res)`` by key."""
    return {f.key: f for f in page.findings(res)}


def paren_depth(text: str) -> int:
    """How deep parentheses nest in ``text``: 1 for "a (b)", 2 for "a (b (c))"."""
    depth = most = 0
    for ch in text:
        depth += (ch == "(") - (ch == ")")
        most = max(most, depth)
    return most


def has_nan(text: str) -> bool:
    """A computed text that printed a missing number ('nan' as a word, not 'NAND')."""
    return re.search(r"\bnan\b", text, re.I) is not None


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def tracked_digest() -> str:
    """A digest of the committed book: notebooks, reference results, book configuration."""
    h = hashlib.sha256()
    for p in sorted([*REPO_ROOT.glob("notebooks/*.ipynb"), *REPO_ROOT.glob("data/reference/**/*.json"),
                     REPO_ROOT / "_config.yml", REPO_ROOT / "_toc.yml"]):
        h.update(p.name.encode() + p.read_bytes())
    return h.hexdigest()


# --------------------------------------------------------------------------- runs, notebooks and processes

CH7 = "07_full_picture"
KERNELSPEC = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}}


def one_line(err: str, *needles) -> str:
    lines = [ln for ln in err.strip().splitlines() if not ln.startswith("note: ")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def file_tree(d: Path) -> dict:
    """Every file under ``d`` (relative path -> bytes)."""
    return {str(p.relative_to(d)): p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()} if d.exists() else {}


def small_result(run_id: str, chapter: str = CH7, value: float = 1.0) -> results.Result:
    res = results.Result(chapter=chapter, run_id=run_id, parameters={"steps": 5}, fingerprint={})
    res.add("t", pd.DataFrame({"a": [value]}))
    return res


def finished_run(tmp_path: Path, run_id: str, names=(CH7,), value: float = 1.0, parameters=None) -> Path:
    """A finished run of ``names`` with result files, executed notebooks (with an injected cell) and run.json."""
    run = tmp_path / run_id
    (run / "notebooks").mkdir(parents=True)
    entries = []
    for name in names:
        small_result(run_id, name, value).save(run)
        params = parameters if parameters is not None else {"run_dir": str(run), "reference_host": "h200"}
        nb = nbformat.v4.new_notebook(cells=[
            nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]}),
            nbformat.v4.new_code_cell("\n".join(f"{k} = {v!r}" for k, v in params.items()),
                                      metadata={"tags": ["injected-parameters", "remove-cell"]}),
            nbformat.v4.new_code_cell("print(run_id)", outputs=[  # the same code in every run, its own output
                nbformat.v4.new_output("stream", name="stdout", text=f"print({run_id!r})\n")])],
            metadata=dict(KERNELSPEC))
        nb.metadata["papermill"] = {"parameters": params}
        nbformat.write(nb, run / "notebooks" / f"{name}.ipynb")
        entries.append({"chapter": name, "status": "ok", "parameters": params})
    (run / "run.json").write_text(json.dumps({"run_id": run_id, "status": "ok", "chapters": entries}))
    return run


def run_processes(token: str) -> list[int]:
    """Processes whose environment holds ``token`` (every process a run started inherits it)."""
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if p.pid != os.getpid() and token in p.environ().get("DJ_TEST_RUN", "") and p.status() != "zombie":
                out.append(p.pid)
        except (psutil.Error, OSError):
            pass
    return out


def cmdline(pid: int) -> str:
    try:
        return " ".join(psutil.Process(pid).cmdline())[:160]
    except psutil.Error:
        return "(gone)"


def notebook_dir(d: Path, *cells: str, name: str = "01_introduction") -> Path:
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_code_cell("run_dir = None", metadata={"tags": ["parameters"]}),
        *(nbformat.v4.new_code_cell(c) for c in cells)], metadata=KERNELSPEC)
    d.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, d / f"{name}.ipynb")
    return d


def process_gone(pid: int) -> bool:
    """The process has exited (a zombie waiting for its parent counts as gone)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state in ("Z", "X")


DRIVER = """
import sys
from pathlib import Path
from datajourney.book import registry as chapters
chapters.NOTEBOOK_DIR = Path(sys.argv[1])
from datajourney.cli import main
sys.exit(main(sys.argv[2:]))
"""


def terminal_signals():
    """The child starts as from a terminal: Ctrl-C and SIGTERM at their defaults, whatever an earlier
    test left ignored in this process (an ignored signal is inherited across exec)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)



def mean_where(df, column: str, **where):
    """The mean of ``column`` over the rows of ``df`` whose columns equal ``where``'s values."""
    import pandas as pd

    m = pd.Series(True, index=df.index)
    for k, v in where.items():
        m &= df[k] == v
    return df.loc[m, column].mean()


def hosts_with(chapter: str) -> list[str]:
    """The reference hosts whose committed reference holds ``chapter``."""
    from datajourney.core import results

    return [h for h in results.reference_hosts() if results.load_reference(chapter, h) is not None]


#: A committed result file -> (the result as loaded, the file its analysis of today writes): what
#: :func:`analysed_references` needs of a result that no edit changed, made once a session.
_ANALYSED: dict = {}


def _unchanged(a, b) -> bool:
    """``a`` holds what ``b`` holds: the same measurements, parameters, metadata and fingerprint."""
    return ((a.chapter, a.run_id, a.parameters, a.metadata, a.fingerprint) ==
            (b.chapter, b.run_id, b.parameters, b.metadata, b.fingerprint)
            and a.tables.keys() == b.tables.keys() and all(a.tables[k].equals(b.tables[k]) for k in a.tables))


def analysed_references(run_dir: Path, reference: Path, chapters, edit=None) -> Path:
    """``run_dir`` holding the committed results of ``chapters`` (their files in ``reference``), each with the facts
    its own analysis finds now, after ``edit(chapter, result)`` changed its measurements. A result the edit
    leaves as it was is the file its analysis wrote the first time (an analysis reads the result alone)."""
    import copy

    from datajourney.book import registry

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    for ch in chapters:
        src = Path(reference) / f"{ch}.json"
        if src not in _ANALYSED:
            r = results.Result.load(src)
            r.facts = registry.lookup(ch).analyse(r)
            _ANALYSED[src] = (results.Result.load(src), r.save(run_dir).read_text())
        loaded, text = _ANALYSED[src]
        if edit:
            r = copy.deepcopy(loaded)
            edit(ch, r)
            if not _unchanged(r, loaded):
                r.facts = registry.lookup(ch).analyse(r)
                r.save(run_dir)
                continue
        (run_dir / f"{ch}.json").write_text(text)
    return run_dir


def with_default_rung(r: results.Result) -> None:
    """A chapter 11 result as a run of today's ladder holds it: the committed one-bucket DDP rung on N GPUs, also
    recorded as the ``default`` rung with DDP's own bucket size (the rung the data-parallel margin reads)."""
    rungs, w = r.tables["rungs"], r.tables["windows"]
    row = rungs[(rungs["rung"] == "ddp") & (rungs["world"] > 1) & (rungs["path"] == "direct")].assign(
        rung="default", bucket_cap_mb=25)
    r.tables["rungs"] = pd.concat([rungs, row], ignore_index=True)
    r.tables["windows"] = pd.concat([w, w[(w["rung"] == "ddp") & (w["world"] > 1) & (w["path"] == "direct")]
                                     .assign(rung="default")], ignore_index=True)
