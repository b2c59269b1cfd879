"""Filter pip's output during ./journey's installs: the complaints of pip's resolver about the declared
requirements of a package installed on purpose with ``--no-deps`` (constraints/no-deps.txt) become one line
saying what was skipped and why; every other line passes unchanged.

    pip install ... 2>&1 | python scripts/pip_filter.py [--no-deps FILE] [--noted FILE] >&2

After a ``--no-deps`` install, each later ``pip install`` prints ``ERROR: pip's dependency resolver does not
currently take into account ...`` and one line per requirement of that package (``X 1.0 requires Y, which is
not installed.`` / ``..., but you have Y 2.0 which is incompatible.``). Those lines are dropped; a conflict
of any other package is kept, under pip's header. The one line is said once per package: ``--noted FILE``
remembers the packages already announced across the several pip runs of one install."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HEADER = "ERROR: pip's dependency resolver does not currently take into account"
#: ``NAME VERSION requires REQ, which is not installed.`` or ``..., but you have NAME2 VERSION2 which is
#: incompatible.`` (older pip: ``NAME VERSION has requirement REQ, but you'll have NAME2 VERSION2 ...``).
CONFLICT = re.compile(r"(?P<pkg>\S+) (?P<version>\S+) (?:requires|has requirement) (?P<req>.+?), "
                      r"(?:(?P<missing>which is not installed)|but you(?: have|'ll have) (?P<have>\S+) \S+ "
                      r"which is incompatible)\.")


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def req_name(req: str) -> str:
    return canonical(re.split(r"[=<>!~;\[ ]", req.strip(), maxsplit=1)[0])


def no_deps_reasons(path: Path) -> dict[str, str]:
    """{canonical name: why} of the packages ``path`` (constraints/no-deps.txt) lists: a requirement
    line's own comment says why it goes in without its dependencies."""
    out = {}
    for line in path.read_text().splitlines():
        req, _, why = line.partition("#")
        if req.strip():
            out[req_name(req)] = re.sub(r"^\[[\w-]+\]\s*", "", why.strip())  # without the extra it belongs to
    return out


def note(pkg: str, why: str, missing: list[str], other: list[str]) -> str:
    """The one line that replaces pip's complaints about ``pkg``'s skipped requirements."""
    parts = [f"{len(missing)} not installed ({', '.join(missing)})"] if missing else []
    parts += [f"{len(other)} left at the installed version ({', '.join(other)})"] if other else []
    return (f"note: {pkg} is installed without its declared dependencies on purpose (constraints/no-deps.txt"
            f"{': ' + why if why else ''}); pip's complaints about them are not shown: {' and '.join(parts)}")


def filter_lines(lines, skip: dict[str, str], noted: set[str]) -> tuple[list[str], list[str]]:
    """(the lines to show, the packages of ``skip`` newly announced): pip's resolver complaints about
    the requirements of the packages in ``skip`` ({name: why}) dropped, one note per package not in
    ``noted``."""
    out, dropped, block = [], {}, None  # block: the kept lines of one resolver report (None: outside one)
    for raw in lines:
        line = raw.rstrip("\n")
        if line.startswith(HEADER):
            block = [line]
            out.append(block)
            continue
        m = CONFLICT.fullmatch(line.strip()) if block is not None else None
        if m and canonical(m["pkg"]) in skip:
            missing, other = dropped.setdefault(m["pkg"], ({}, {}))
            (missing if m["missing"] else other)[req_name(m["req"])] = None  # a dict: in order, once
            continue
        if m:
            block.append(line)
            continue
        block = None
        out.append(line)
    shown = [x for item in out for x in (item if isinstance(item, list) and len(item) > 1 else
                                         [] if isinstance(item, list) else [item])]
    new = [p for p in dropped if canonical(p) not in noted]
    shown += [note(p, skip[canonical(p)], *map(list, dropped[p])) for p in new]
    return shown, new


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-deps", type=Path, default=ROOT / "constraints" / "no-deps.txt",
                    help="the packages installed with --no-deps (default constraints/no-deps.txt)")
    ap.add_argument("--noted", type=Path, help="a file of the packages already announced (read and appended)")
    a = ap.parse_args(argv)
    noted = set(a.noted.read_text().split()) if a.noted and a.noted.is_file() else set()
    shown, new = filter_lines(sys.stdin, no_deps_reasons(a.no_deps), noted)
    for line in shown:
        print(line, flush=True)
    if a.noted and new:
        with a.noted.open("a") as f:
            f.write("".join(canonical(p) + "\n" for p in new))
    return 0


if __name__ == "__main__":
    sys.exit(main())
