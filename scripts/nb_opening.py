"""Give a chapter notebook the book's page order: its opening ("On this machine", "What to do") where
the key results were, the key results folded under it, and the run's parameters folded at the end.

    python scripts/nb_opening.py notebooks/02_random_vs_sequential.ipynb

Edits code cells only (their outputs stay until the notebook is executed or rendered again)."""
import re
import sys
from pathlib import Path

import nbformat

KEY = re.compile(r"^report\.key_results\(page\.findings, res, ref, is_reference_run=is_reference_run\);?\s*$", re.M)
OPEN = ("from datajourney.book import opening\n"
        "opening.show(page.opening, res, ref, is_reference_run=is_reference_run)\n"
        "opening.evidence(page.findings, res, ref, is_reference_run=is_reference_run)")
TAIL = "report.parameters(res, folded=True)"


def main(path: str) -> None:
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    done = any("opening.show(" in c.source for c in code)
    for c in code:
        if not done and KEY.search(c.source):
            c.source = KEY.sub(OPEN, c.source)
            done = True
        if re.search(r"^report\.parameters\(res\)\s*$", c.source, re.M):
            c.source = re.sub(r"^report\.parameters\(res\)\s*\n?", "", c.source, flags=re.M).rstrip()
    if not any(TAIL in c.source for c in code):
        cell = nbformat.v4.new_code_cell(TAIL, metadata={"tags": ["hide-input"]})
        nb.cells.append(cell)
    if not done:
        sys.exit(f"{path}: no key-results cell to replace")
    nbformat.write(nb, path)


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
        print("opening:", Path(p).name)
