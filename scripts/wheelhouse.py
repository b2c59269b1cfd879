"""Download every wheel a GPU host without network needs to install the book, beyond what the host's
own stack provides (torch, torchvision, numpy, transformers, CUDA libraries: constraints/host-cuda13.txt).

    python scripts/wheelhouse.py DIR [--python 3.12] [--cuda 13] [--part all|core|book|optional]
                                     [--host-provides FILE] [--extras book,gpu] [--glibc 2.28]
    python scripts/wheelhouse.py --plan [...]       each part's wheels as resolved, nothing downloaded

Run it on a machine that reaches a package index; copy DIR to the host and install from it with
``./journey book --wheelhouse DIR`` (pip's ``--no-index --find-links DIR``).

How: pip resolves the whole set for the target (``--dry-run --report`` with ``--platform``,
``--python-version``, ``--only-binary :all:``) with the host's packages held at the versions its file
names, drops what the host provides, then downloads each remaining wheel at the resolved version with
``--no-deps``. ``--part core`` is what every chapter run needs (./journey's required extras), ``book`` the
HTML book and JupyterLab, ``optional`` the libraries ./journey installs one by one where it can (the hub's
datasets, chapters 8, 9 and 10's, DFTracer's dftracer-utils among them). No file is larger than 60 MiB: a
larger wheel (dftracer-utils, 70 MiB) is cut into pieces ``NAME.whl.001``, ... that ``--wheelhouse`` joins,
so the set can be carried in transfers of at most 64 MiB. Packages that ./journey installs with
``--no-deps`` (constraints/no-deps.txt: mosaicml-streaming, whose declared requirements would replace the
host's numpy and transformers) are downloaded without their dependencies; the ones local reading uses are
in the ``mds`` extra. Prints each part's size."""
from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints"
#: The extras of a GPU host's install, in three parts: core (what every chapter run needs, and chapter 7's MDS
#: half, NVML and torchvision's models), book (the HTML book, JupyterLab) and optional (the libraries of single
#: sections, which ./journey installs one by one where it can: a missing one is reported and its section skipped).
CORE_EXTRAS = ("gpu",)
BOOK_EXTRAS = ("book",)
OPTIONAL_EXTRAS = ("hub", "ch8", "ch10", "formats")  # and ch9 (or ch9-cu12) by the CUDA major
#: What building the editable install needs (pyproject's build-system; pip builds it in isolation).
BUILD = ("setuptools>=68",)
#: The largest file a wheelhouse holds: a larger wheel (dftracer-utils is 70 MiB) is cut into pieces that
#: ./journey joins, so that every file can be carried in a transfer of at most 64 MiB.
PIECE_BYTES = 60 * 2**20


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def read_list(path: Path) -> list[str]:
    """The requirement lines of a constraints-style file (comments and blank lines dropped)."""
    return [s for line in path.read_text().splitlines() if (s := line.split("#", 1)[0].strip())]


def host_provides(path: Path) -> tuple[list[str], list[str]]:
    """(name patterns the host provides, pins ``name==version`` among them) from ``path``."""
    patterns, pins = [], []
    for line in read_list(path):
        name = re.split(r"[=<>!~;\[ ]", line, maxsplit=1)[0]
        patterns.append(canonical(name))
        if "==" in line and "*" not in name:
            pins.append(line)
    return patterns, pins


def provided(name: str, patterns, declared=()) -> bool:
    """Whether the host provides ``name``: a pattern with ``*`` (torch's CUDA libraries, nvidia-*) never
    covers a package the project itself declares (``declared``: nvidia-ml-py), only its exact name does."""
    name = canonical(name)
    return any(name == p or ("*" in p and name not in declared and fnmatch.fnmatchcase(name, p)) for p in patterns)


def extras_requirements(extras, skip=()) -> list[str]:
    """The requirements of the project and ``extras`` (nested ``datajourney[...]`` expanded, but not
    the extras in ``skip``)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = project.get("optional-dependencies", {})
    out, seen = list(project["dependencies"]), set()

    def expand(extra):
        if extra in seen or extra in skip:
            return
        seen.add(extra)
        if extra not in optional:
            sys.exit(f"wheelhouse: pyproject.toml has no extra {extra!r}")
        for req in optional[extra]:
            m = re.fullmatch(r"datajourney\[(.+)\]", req.strip())
            if m:
                for e in m.group(1).split(","):
                    expand(e.strip())
            else:
                out.append(req)

    for e in extras:
        expand(e)
    return list(dict.fromkeys(out))


def target_args(python: str, glibc: str) -> list[str]:
    """pip's options for a manylinux x86_64 CPython ``python`` with glibc ``glibc`` (every older
    manylinux tag named: pip does not widen one --platform to older glibc versions)."""
    major, minor = (int(x) for x in glibc.split("."))
    plats = [f"manylinux_{major}_{m}_x86_64" for m in range(minor, 4, -1)]
    plats += ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64", "linux_x86_64"]
    args = ["--only-binary", ":all:", "--python-version", python, "--implementation", "cp"]
    for p in plats:
        args += ["--platform", p]
    return args


def pip(*args, quiet=True) -> subprocess.CompletedProcess:
    cmd = [os.environ.get("WHEELHOUSE_PYTHON", sys.executable), "-m", "pip", *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PIP_NO_INDEX": "",
                                                                   "PIP_DISABLE_PIP_VERSION_CHECK": "1"})
    if r.returncode != 0:
        lines = [s for s in r.stderr.splitlines() if "is ignored" not in s]
        sys.exit("wheelhouse: pip " + " ".join(args[:2]) + " failed:\n" + "\n".join(lines[-25:]))
    return r


def resolve(reqs, target, pins) -> dict[str, str]:
    """name -> version pip installs for ``reqs`` on the target, with ``pins`` held."""
    with tempfile.TemporaryDirectory() as tmp:
        cons = Path(tmp) / "host.txt"
        cons.write_text("\n".join(pins) + "\n")
        report = Path(tmp) / "report.json"
        pip("install", "--dry-run", "--ignore-installed", "--quiet", "--report", str(report),
            "--target", str(Path(tmp) / "t"), "-c", str(cons), *target, *reqs)
        items = json.loads(report.read_text())["install"]
    return {canonical(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def no_deps_list() -> list[str]:
    """The packages ./journey installs with --no-deps (constraints/no-deps.txt)."""
    return read_list(CONSTRAINTS / "no-deps.txt")


def no_deps_extras() -> dict[str, str]:
    """{package: the extra it belongs to} of constraints/no-deps.txt (a line's comment starts with ``[extra]``;
    ``gpu`` where it names none)."""
    out = {}
    for line in (CONSTRAINTS / "no-deps.txt").read_text().splitlines():
        req, _, why = line.partition("#")
        if req.strip():
            m = re.match(r"\s*\[([\w-]+)\]", why)
            out[req_name(req)] = m.group(1) if m else "gpu"
    return out


def req_name(req: str) -> str:
    return canonical(re.split(r"[=<>!~;\[ ]", req.strip(), maxsplit=1)[0])


def plan(python: str, cuda: str, provides_file: Path, glibc: str, extras=None):
    """{part: {name: version}} of the wheels to download: core (running the chapters), book (building
    the HTML book, JupyterLab) and optional (the libraries of single sections)."""
    patterns, pins = host_provides(provides_file)
    target = target_args(python, glibc)
    ch9 = {"13": "ch9", "12": "ch9-cu12"}.get(cuda)
    lone = {req_name(r): r for r in no_deps_list()}
    core_x = list(CORE_EXTRAS if extras is None else extras)
    book_x = list(BOOK_EXTRAS) if extras is None else []
    opt_x = [*OPTIONAL_EXTRAS, *([ch9] if ch9 else [])] if extras is None else []

    def reqs(xs, skip=()):
        return [r for r in extras_requirements(xs, skip) if req_name(r) not in lone] + list(BUILD)

    full = resolve(reqs(core_x + book_x + opt_x), target, pins)
    core = resolve(reqs(core_x, skip=opt_x), target, pins) if book_x or opt_x else full
    book = resolve(reqs(core_x + book_x, skip=opt_x), target, pins) if book_x else core
    tags = no_deps_extras()
    chosen = set(core_x + book_x + opt_x)
    wanted = {n for n in lone if tags.get(n, "gpu") in chosen}
    alone = resolve([r for n, r in lone.items() if n in wanted], target + ["--no-deps"], pins) if wanted else {}
    in_core = {n: v for n, v in alone.items() if tags.get(n, "gpu") in core_x}

    declared = {req_name(r) for r in reqs(core_x + book_x + opt_x)} | set(wanted)

    def keep(names):
        return {n: full.get(n, v) for n, v in names.items() if not provided(n, patterns, declared)}

    parts = {"core": keep(core)}
    parts["core"].update(keep(in_core))
    parts["book"] = {n: v for n, v in keep(book).items() if n not in parts["core"]}
    parts["optional"] = {n: v for n, v in keep(full).items() if n not in parts["core"] and n not in parts["book"]}
    parts["optional"].update({n: v for n, v in keep(alone).items() if n not in in_core})
    return parts, target


def download(wheels: dict[str, str], dest: Path, target) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    if wheels:
        pip("download", "--no-deps", "--quiet", "-d", str(dest), *target,
            *(f"{n}=={v}" for n, v in sorted(wheels.items())))


def split_large(folder: Path, limit: int = PIECE_BYTES) -> list[str]:
    """Cut each wheel of ``folder`` larger than ``limit`` bytes into pieces ``<wheel>.001``, ``.002``, ...
    of at most ``limit`` bytes each (the wheel itself removed; ./journey joins them): returns their names."""
    cut = []
    for whl in sorted(folder.glob("*.whl")):
        if whl.stat().st_size <= limit:
            continue
        with whl.open("rb") as f:
            for k, chunk in enumerate(iter(lambda: f.read(limit), b""), 1):
                whl.with_name(f"{whl.name}.{k:03d}").write_bytes(chunk)
        whl.unlink()
        cut.append(whl.name)
    return cut


def size(path: Path) -> int:
    """Bytes of the wheels in ``path``, those cut into pieces included."""
    return sum(f.stat().st_size for f in path.glob("*.whl*"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path, nargs="?", help="where the wheels go (not needed with --plan)")
    ap.add_argument("--plan", action="store_true",
                    help="print each part's wheels (name==version) as resolved for the host, download nothing")
    ap.add_argument("--python", default="3.12", help="the host's Python (major.minor; default 3.12)")
    ap.add_argument("--cuda", default="13", help="the CUDA major of the host's torch (13 or 12; default 13)")
    ap.add_argument("--part", choices=("all", "core", "book", "optional"), default="all",
                    help="core: what every chapter run needs; book: the HTML book; optional: chapters 8, 9, 10 "
                         "and the hub's libraries (default all: each in DIR/<part>)")
    ap.add_argument("--host-provides", type=Path,
                    help="what the host's own stack provides (default constraints/host-cuda<CUDA>.txt)")
    ap.add_argument("--extras", help="comma-separated extras instead of the GPU host's set, all in the core "
                    "part ('none': the package's own requirements only)")
    ap.add_argument("--glibc", default="2.28", help="the oldest glibc of the host (manylinux tag; default 2.28)")
    a = ap.parse_args(argv)
    if a.dir is None and not a.plan:
        ap.error("DIR is needed (or --plan, which downloads nothing)")
    provides = a.host_provides or CONSTRAINTS / f"host-cuda{a.cuda}.txt"
    if not provides.is_file():
        sys.exit(f"wheelhouse: {provides} does not exist: list what the host provides there")
    extras = None if a.extras is None else [e for e in a.extras.split(",") if e and e != "none"]
    parts, target = plan(a.python, a.cuda, provides, a.glibc, extras)
    print(f"resolved for CPython {a.python}, CUDA {a.cuda}, manylinux x86_64 (glibc {a.glibc}); the host provides "
          f"what {provides.relative_to(ROOT) if provides.is_relative_to(ROOT) else provides} names", file=sys.stderr)
    for name, wheels in parts.items():
        if a.part not in ("all", name):
            continue
        if a.plan:
            print(f"{name}: {len(wheels)} wheels")
            print("".join(f"  {n}=={v}\n" for n, v in sorted(wheels.items())), end="")
            continue
        download(wheels, a.dir / name, target)
        cut = split_large(a.dir / name)
        print(f"{name}: {len(wheels)} wheels, {size(a.dir / name) / 2**20:.1f} MiB in {a.dir / name}"
              + (f" ({', '.join(cut)} in pieces of at most {PIECE_BYTES >> 20} MiB)" if cut else ""), file=sys.stderr)
    if a.plan:
        return 0
    total = sum(size(a.dir / n) for n in parts if (a.dir / n).is_dir())
    print(f"wheelhouse {a.dir}: {total / 2**20:.1f} MiB", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
