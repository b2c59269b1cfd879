"""Byte-compile what ``.venv``'s Python imports, on every core at once, so that no chapter compiles sources.

pip installs into ``.venv`` with ``--no-compile`` (its own compiling runs one file at a time); this compiles
``.venv``'s packages in place instead. A ``.venv`` that reuses a host's CUDA torch (a .pth naming the host's
site-packages) can meet a host whose packages carry no bytecode and whose environment forbids writing it
(``PYTHONDONTWRITEBYTECODE``, as set in some framework containers): every process then compiles torch's
sources again on import (on the H200 host, importing transformers' GPT-2 compiled 996 of torch's modules and
419 of sympy's: 5.6 s, in each kernel and each spawned worker that imports it). There the host's files are left
as they are: everything ``.venv``'s Python imports from is compiled into ``.venv/pycache``, and a .pth file points
``sys.pycache_prefix`` there (a prefix the reader sets, ``PYTHONPYCACHEPREFIX``, wins).

usage: python scripts/bytecode.py VENV   (run with VENV's Python; prints one line when it uses the prefix)
"""
from __future__ import annotations

import compileall
import importlib.util
import os
import re
import sys
import sysconfig
import warnings
from pathlib import Path

#: The .pth file that points ``sys.pycache_prefix`` at ``VENV/pycache``.
PTH = "datajourney-bytecode.pth"
#: Test suites and tools no chapter imports (compiling them costs time and nothing else).
SKIP = re.compile(r"[/\\](test|tests|idlelib|lib2to3|turtledemo|ensurepip)[/\\]")


def host_torch_lacks_bytecode() -> bool:
    """True when torch is imported from outside this environment (a host's, through a .pth file), has no
    up-to-date bytecode beside it, and Python may not write it there (``PYTHONDONTWRITEBYTECODE`` or a folder
    it cannot write): then every process compiles torch's sources again."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin or Path(sys.prefix).resolve() in Path(spec.origin).resolve().parents:
        return False
    saved, sys.pycache_prefix = sys.pycache_prefix, None   # beside the source, whatever prefix is in force
    try:
        cached = importlib.util.cache_from_source(spec.origin)
    finally:
        sys.pycache_prefix = saved
    try:
        stale = os.stat(cached).st_mtime < os.stat(spec.origin).st_mtime
    except FileNotFoundError:
        stale = True
    return stale and (sys.flags.dont_write_bytecode or not os.access(Path(spec.origin).parent, os.W_OK))


def import_dirs() -> list[Path]:
    """The directories ``sys.path`` imports from (the standard library and every site directory)."""
    out: list[Path] = []
    for entry in sys.path:
        p = Path(entry or ".").resolve()
        if p.is_dir() and p != Path.cwd().resolve() and not any(p == d or d in p.parents for d in out):
            out.append(p)
    return out


def compile_dirs(dirs: list[Path]) -> bool:
    """Compile every source file under ``dirs`` on all cores (warnings off: Python 3.12 prints a
    SyntaxWarning for each invalid escape in packages' sources)."""
    warnings.filterwarnings("ignore")
    ok = True
    for d in dirs:
        ok &= bool(compileall.compile_dir(d, quiet=2, workers=0, rx=SKIP))
    return ok


def main(venv: Path) -> int:
    purelib = Path(sysconfig.get_paths()["purelib"])
    pth = purelib / PTH
    reader = os.environ.get("PYTHONPYCACHEPREFIX")
    if not host_torch_lacks_bytecode():
        pth.unlink(missing_ok=True)
        return 0 if compile_dirs([purelib]) else 1
    prefix = reader or str((venv / "pycache").resolve())
    print(f"the host's torch has no bytecode and Python may not write it there: compiling what .venv imports into "
          f"{prefix}" + ("" if reader else " (a .pth file points .venv's Python there)"), flush=True)
    if reader:
        pth.unlink(missing_ok=True)
    else:
        pth.write_text(f"import sys; sys.pycache_prefix = sys.pycache_prefix or {prefix!r}\n")
    sys.pycache_prefix = os.environ["PYTHONPYCACHEPREFIX"] = prefix   # the compiling workers too
    return 0 if compile_dirs(import_dirs()) else 1


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    sys.exit(main(Path(sys.argv[1])))
