"""Render the committed notebooks again from a host's committed reference results, with this checkout's
code and without measuring: assemble a finished run directory from ``data/reference/HOST/``, store each
result's facts as this checkout's analyses find them (measurements untouched), run
``python -m datajourney rerender`` on it, and (with ``--promote``) promote the rendered run, which
makes its notebooks the committed ones (the result files are the same bytes).

    python scripts/render-reference.py h200 [--promote]

Used when only the text, tables or charts of the chapters change."""
import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from datajourney.book import registry, runner  # noqa: E402
from datajourney.book.analyse import analyse_dir  # noqa: E402
from datajourney.core import results  # noqa: E402


def assemble(host: str, dest: Path) -> Path:
    """A run directory holding every chapter's committed reference result and a run record naming them."""
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    chapters = []
    for ch in registry.available():
        res = results.load_reference(ch.name, host)
        if res is None:
            continue
        shutil.copy2(res.path, dest / res.path.name)
        allowed = runner.chapter_parameters(ch)
        params = {k: v for k, v in res.parameters.items() if k in allowed and k not in ("run_dir", "replay")}
        chapters.append({"chapter": ch.name, "parameters": {**params, "reference_host": host,
                                                            "is_reference_run": True}, "status": "ok"})
    (dest / "run.json").write_text(json.dumps({"run_id": dest.name, "profile": "full", "status": "ok",
                                               "chapters": chapters}, indent=1))
    return dest


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("host")
    ap.add_argument("--promote", action="store_true", help="make the rendered notebooks the committed ones")
    a = ap.parse_args()
    src = assemble(a.host, ROOT / "results" / f"reference-{a.host}-committed")
    for f in analyse_dir(src, force=True):  # every file's facts from this checkout's analyses (chapter 12 reads them)
        print(f"facts stored: {f.name}")
    rendered = ROOT / "results" / f"reference-{a.host}-rendered"
    subprocess.run([sys.executable, "-m", "datajourney", "rerender", str(src), "--run-id", rendered.name,
                    "--replace", "--quiet"], check=True, cwd=ROOT)
    print(f"rendered: {rendered}")
    if a.promote:
        subprocess.run([sys.executable, "-m", "datajourney", "promote", str(rendered), "--host", a.host],
                       check=True, cwd=ROOT)


if __name__ == "__main__":
    main()
