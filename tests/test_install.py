"""Installing and starting the project: a fresh virtual environment runs a chapter, ``./journey lab``'s
command line, FFmpeg from the av wheel, environment.yml, and the message of a non-editable install."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from datajourney import cli
from datajourney.core.paths import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"


def _env(*, isolated: bool = False, **extra) -> dict:
    """This process's environment plus ``extra``; ``isolated``: without the variables that would
    tie another Python to this one's packages."""
    drop = ("VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME") if isolated else ()
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)


@pytest.fixture
def scratch(tmp_path) -> Path:
    """``tmp_path``, emptied when the test ends however it ends: the install tests fill it with virtual
    environments, clones and wheelhouses (a GiB and more), which pytest would otherwise keep for three runs."""
    yield tmp_path
    shutil.rmtree(tmp_path, ignore_errors=True)


@pytest.fixture
def journey_copy(tmp_path) -> Path:
    """The journey script alone in an empty directory (it works in its own directory)."""
    shutil.copy(REPO_ROOT / "journey", tmp_path / "journey")
    return tmp_path


def test_lab_dry_run_prints_the_command_and_passes_arguments(journey_copy):
    r = _run(["bash", journey_copy / "journey", "lab", "--port", "8890", "--no-browser"],
             env=_env(JOURNEY_DRY_RUN="1"), timeout=60)
    assert r.returncode == 0, r.stderr
    root = ["--allow-root"] if os.geteuid() == 0 else []
    assert r.stdout.split() == [".venv/bin/python", "-m", "jupyter", "lab", *root,
                                "--port", "8890", "--no-browser", "notebooks/"]
    assert not (journey_copy / ".venv").exists()  # a dry run installs nothing


def test_unknown_journey_command_is_one_usage_line(journey_copy):
    r = _run(["bash", journey_copy / "journey", "serve"], env=_env(), timeout=60)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "./journey lab" in r.stderr


def _fake_av(site: Path, names=("avcodec", "avutil", "swscale")) -> Path:
    """An installed-looking ``av`` package whose av.libs holds hashed FFmpeg file names."""
    (site / "av").mkdir(parents=True)
    (site / "av" / "__init__.py").write_text("")
    libs = site / "av.libs"
    libs.mkdir()
    for i, n in enumerate(names):
        (libs / f"lib{n}-0a1b2c{i}.so.{60 + i}.3.100").write_bytes(b"")
    (libs / "libdrm-77aa.so.2.4.0").write_bytes(b"")  # a dependency: found through av.libs, never linked
    return libs


def test_ffmpeg_links_point_into_av_libs_and_both_dirs_are_printed(tmp_path):
    libs = _fake_av(tmp_path / "site")
    out = tmp_path / "ffmpeg"
    r = _run([sys.executable, SCRIPTS / "ffmpeg_from_av.py", out], env=_env(PYTHONPATH=str(tmp_path / "site")))
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{out.resolve()}:{libs.resolve()}"
    links = {p.name: p.resolve() for p in out.iterdir()}
    assert links == {"libavcodec.so.60": libs / "libavcodec-0a1b2c0.so.60.3.100",
                     "libavutil.so.61": libs / "libavutil-0a1b2c1.so.61.3.100",
                     "libswscale.so.62": libs / "libswscale-0a1b2c2.so.62.3.100"}
    r = _run([sys.executable, SCRIPTS / "ffmpeg_from_av.py", out], env=_env(PYTHONPATH=str(tmp_path / "site")))
    assert r.returncode == 0  # a second run replaces its links


def test_ffmpeg_without_av_says_why(tmp_path):
    (tmp_path / "site").mkdir()
    r = _run([sys.executable, "-S", SCRIPTS / "ffmpeg_from_av.py", tmp_path / "out"],
             env=_env(PYTHONPATH=str(tmp_path / "site")))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.strip() == "FFmpeg from the av wheel: the 'av' package is not installed (pip install av)"
    _fake_av(tmp_path / "other", names=("avutil",))
    r = _run([sys.executable, SCRIPTS / "ffmpeg_from_av.py", tmp_path / "out"],
             env=_env(PYTHONPATH=str(tmp_path / "other")))
    assert r.returncode == 1 and "no libavcodec" in r.stderr


DECODE = """
import io, spdl.io
from PIL import Image
buf = io.BytesIO(); Image.new("RGB", (64, 48), (200, 30, 30)).save(buf, "JPEG")
frames = spdl.io.decode_packets(spdl.io.demux_image(buf.getvalue()),
    filter_desc=spdl.io.get_video_filter_desc(scale_width=32, scale_height=24, pix_fmt="rgb24"))
arr = spdl.io.to_numpy(spdl.io.convert_frames(frames))
maps = [line.split()[-1] for line in open("/proc/self/maps") if "libavcodec" in line]
print(arr.shape, arr[0, 0].tolist(), sorted(set(maps)))
"""


def test_spdl_decodes_a_jpeg_with_the_av_wheels_ffmpeg(tmp_path):
    """The real thing: spdl.io loads FFmpeg from av.libs through the links and decodes a JPEG."""
    pytest.importorskip("spdl.io", reason="spdl is not installed (the ch8 extra)")
    pytest.importorskip("av", reason="the av wheel is not installed (the ch8 extra)")
    r = _run([sys.executable, SCRIPTS / "ffmpeg_from_av.py", tmp_path / "ffmpeg"], env=_env())
    assert r.returncode == 0, r.stderr
    dirs = r.stdout.strip()
    r = _run([sys.executable, "-c", DECODE], env=_env(LD_LIBRARY_PATH=dirs), timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "(24, 32, 3)" in r.stdout
    assert dirs.split(":")[1] in r.stdout  # libavcodec was loaded from the wheel's av.libs


def test_environment_yml_is_the_generated_one():
    r = _run([sys.executable, SCRIPTS / "environment.py", "--check"], timeout=60)
    assert r.returncode == 0, r.stderr
    text = (REPO_ROOT / "environment.yml").read_text()
    assert "- python=3.12" in text and "- -e .[book,ch8,ch10]" in text


def test_environment_script_refuses_a_pyproject_without_the_extras(tmp_path):
    sys.path.insert(0, str(SCRIPTS))
    try:
        import environment
    finally:
        sys.path.remove(str(SCRIPTS))
    bad = tmp_path / "pyproject.toml"
    bad.write_text('[project]\nname = "datajourney"\n[project.optional-dependencies]\nbook = []\n')
    with pytest.raises(SystemExit, match="has no ch8, ch10"):
        environment.render(bad)


def test_commands_outside_a_checkout_stop_with_one_line(monkeypatch, tmp_path, capsys):
    """A non-editable install puts the package in site-packages, away from notebooks/: say so."""
    monkeypatch.setattr(cli, "CHECKOUT_NOTEBOOKS", tmp_path / "site-packages" / "notebooks")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["run", "2", "--profile", "ci", "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs a checkout" in err and "pip install -e ." in err
    assert not (tmp_path / "results").exists()
    assert cli.main(["fingerprint"]) == 0  # describing the machine needs no checkout


@pytest.mark.parametrize("argv", [["book"], ["run", "2", "--profile", "ci", "--book"]])
def test_building_the_book_without_jupyter_book_says_what_to_install(argv, monkeypatch, tmp_path, capsys):
    """``./journey setup`` installs no book extra: ``book`` (and ``run --book``) stop in one line naming what
    to run, exit 2, before any chapter runs or anything is built."""
    import importlib.util

    from datajourney.book import runner, sphinx_ext

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jupyter_book"
                        else real(name, *a))
    monkeypatch.setattr(runner, "run", lambda *a, **k: pytest.fail("a chapter ran"))
    monkeypatch.setattr(sphinx_ext, "build", lambda *a, **k: pytest.fail("the build started"))
    assert cli.main([*argv, *(["--results", str(tmp_path)] if argv[0] == "run" else [])]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Jupyter Book" in err
    assert "./journey book" in err and "pip install -e '.[book]'" in err


# --------------------------------------------------------------------------- offline install from a wheelhouse
WHEELHOUSE = SCRIPTS / "wheelhouse.py"
#: What the test's stand-in for a GPU host's own stack provides: torch and what torch requires.
TORCH_STACK = ("torch", "numpy", "filelock", "typing-extensions", "sympy", "mpmath", "networkx", "jinja2",
               "markupsafe", "fsspec")


def _link_distributions(names, dest: Path) -> list[str]:
    """Links in ``dest`` to the installed files of the distributions ``names`` (their top-level
    packages and dist-info): a folder that provides them, as a host's own site-packages would."""
    from importlib.metadata import PackageNotFoundError, distribution

    dest.mkdir(parents=True)
    found = []
    for name in names:
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue
        found.append(name)
        site = Path(dist.locate_file(""))
        for top in {Path(str(f)).parts[0] for f in dist.files or []}:
            if top not in ("..", "__pycache__") and (site / top).exists() and not (dest / top).exists():
                (dest / top).symlink_to(site / top)
    return found


@pytest.mark.notebooks
def test_a_fresh_clone_installs_from_a_wheelhouse_with_no_index(scratch):
    """./journey wheelhouse's script for this machine's Python and the package's own requirements, with the
    torch stack provided by the 'host' (a folder the new venv sees, as a GPU host's site-packages): then a
    git clone of this checkout installs from it alone (--no-index, no pip configuration, the package without its
    book or test extras, in a venv without this one's packages) and runs chapter 2 under the ci profile."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    provides = scratch / "host-provides.txt"
    host = scratch / "host-site"
    provided = _link_distributions(TORCH_STACK, host)
    assert "torch" in provided
    # torch's CUDA requirements (pip resolves torch from the index, a CUDA build): never downloaded, as on a GPU
    # host (constraints/host-cuda13.txt); without these lines the wheelhouse held 2.4 GB of them
    provides.write_text("\n".join([*provided, "nvidia-*", "cuda-*", "triton"]) + "\n")
    wh = scratch / "wheelhouse"
    py_version = f"{sys.version_info.major}.{sys.version_info.minor}"
    r = _run([sys.executable, WHEELHOUSE, wh, "--python", py_version, "--extras", "none",
              "--host-provides", provides], timeout=600)
    if r.returncode != 0 and "Could not fetch URL" in r.stderr + r.stdout:
        pytest.skip("no package index reachable: " + r.stderr[-300:])
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    wheels = {p.name.split("-")[0].lower() for p in (wh / "core").glob("*.whl")}
    assert "pandas" in wheels and "papermill" in wheels and "setuptools" in wheels
    assert not wheels & {"torch", "numpy", "sympy"}  # the host's are never downloaded
    assert not [w for w in wheels if w.startswith(("nvidia", "cuda", "triton"))]
    assert "MiB" in r.stderr
    clone = scratch / "clone"
    assert _run(["git", "clone", "-q", REPO_ROOT, clone], timeout=120).returncode == 0
    venv = scratch / "venv"
    py = venv / "bin" / "python"
    assert _run([sys.executable, "-m", "venv", venv], timeout=120).returncode == 0
    purelib = _run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "host.pth").write_text(f"{host}\n")
    env = _env(isolated=True, PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_INDEX="1", PIP_FIND_LINKS=f"{wh} {wh / 'core'}")
    r = _run([py, "-m", "pip", "install", "-q", "--no-index", "--no-compile", "-e", clone], env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    r = _run([py, "-c", "import datajourney, torch; print(datajourney.__file__, torch.__file__)"], env=env, cwd=clone)
    assert r.returncode == 0 and str(clone) in r.stdout and str(host) in r.stdout, r.stderr[-2000:]
    r = _run([py, "-m", "datajourney", "chapters"], env=env, cwd=clone, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    assert "12" in r.stdout and "random" in r.stdout.lower()
    env["DATAJOURNEY_DATA_DIR"] = str(scratch / "data")
    r = _run([py, "-m", "datajourney", "run", "2", "--profile", "ci", "--results", scratch / "results",
              "--run-id", "fresh", "--quiet"], env=env, cwd=clone, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    assert (scratch / "results" / "fresh" / "02_random_vs_sequential.json").is_file()
    assert json.loads((scratch / "results" / "fresh" / "run.json").read_text())["status"] == "ok"


def test_journey_wheelhouse_option_sets_no_index_and_find_links(journey_copy, tmp_path):
    """--wheelhouse DIR: pip gets PIP_NO_INDEX and DIR with its parts as find-links (lab's dry run shows
    the option is taken out of the arguments)."""
    wh = tmp_path / "wh"
    (wh / "core").mkdir(parents=True)
    r = _run(["bash", journey_copy / "journey", "lab", "--wheelhouse", wh, "--port", "8890"],
             env=_env(JOURNEY_DRY_RUN="1"), timeout=60)
    assert r.returncode == 0, r.stderr
    assert "--wheelhouse" not in r.stdout and "--port 8890" in r.stdout
    assert f"wheelhouse {wh}" in r.stderr
    r = _run(["bash", journey_copy / "journey", "lab", "--wheelhouse", tmp_path / "missing"],
             env=_env(JOURNEY_DRY_RUN="1"), timeout=60)
    assert r.returncode == 2 and "no such directory" in r.stderr


# --------------------------------------------------------------------------- mosaicml-streaming and the host's numpy
def _project() -> dict:
    import tomllib

    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def _names(reqs) -> set[str]:
    import re

    return {re.sub(r"[-_.]+", "-", re.split(r"[=<>!~;\[ ]", r.strip(), maxsplit=1)[0]).lower() for r in reqs}


def test_streaming_is_installed_without_its_declared_dependencies():
    """No extra names mosaicml-streaming (pip would resolve its numpy<2.2 / transformers<5 and replace a GPU
    host's); constraints/no-deps.txt does, and the gpu extra holds what local MDS shards use."""
    extras = _project()["optional-dependencies"]
    for name, reqs in extras.items():
        assert "mosaicml-streaming" not in _names(reqs), name
    assert "datajourney[mds]" in extras["gpu"]
    assert _names(extras["mds"]) == {"brotli", "python-snappy", "zstd", "xxhash", "catalogue"}
    lines = [s for s in (REPO_ROOT / "constraints" / "no-deps.txt").read_text().splitlines()
             if s.strip() and not s.startswith("#")]
    assert _names(lines) == {"mosaicml-streaming", "litdata"}
    assert "litdata" not in _names(r for reqs in extras.values() for r in reqs)


#: litdata's requirements that local chunks of bytes never import (object stores, TIFF images, torchvision's
#: image types), and those the base install provides.
LITDATA_UNUSED = {"obstore", "tifffile", "torchvision"}
LITDATA_FROM_BASE = {"torch", "numpy", "filelock", "requests", "urllib3"}



def _declared_requirements(tmp_path, specs: list[str], pattern: str, what: str):
    """Download ``specs`` without their dependencies and read the wheel matching ``pattern``'s declared
    requirements (names, extras left out); skipped where the index cannot be reached."""
    from email.parser import Parser
    from zipfile import ZipFile

    r = _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", tmp_path,
              *specs], timeout=300)
    if r.returncode != 0:
        pytest.skip(f"{what} could not be downloaded: " + r.stderr[-300:])
    wheel = next(tmp_path.glob(pattern))
    with ZipFile(wheel) as z:
        meta = Parser().parsestr(z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode())
    return wheel, _names(q for q in meta.get_all("Requires-Dist") or [] if "extra ==" not in q)

def test_every_litdata_requirement_is_provided_or_unused(tmp_path):
    """litdata goes in with --no-deps (its torch and torchvision would bring a CUDA build onto a CPU machine):
    each requirement of the pinned release is in the formats extra, the base install, or never imported for a
    local folder; a new release adding one fails here."""

    line = next(s.split("#")[0].strip() for s in (REPO_ROOT / "constraints" / "no-deps.txt").read_text().splitlines()
                if s.startswith("litdata"))
    wheel, declared = _declared_requirements(tmp_path, [line], "litdata-*.whl", "litdata")
    covered = _names(_project()["optional-dependencies"]["formats"]) | LITDATA_UNUSED | LITDATA_FROM_BASE
    assert declared - covered == set(), f"{wheel.name} requires more: add what local chunks import to formats"
    assert {"torch", "torchvision"} <= declared  # what --no-deps keeps pip from resolving


#: mosaicml-streaming's requirements that local MDS shards never import: cloud storage and plotting.
STREAMING_UNUSED = {"boto3", "google-cloud-storage", "paramiko", "oci", "azure-storage-blob",
                    "azure-storage-file-datalake", "azure-identity", "matplotlib"}
#: ... and those the host (or the base install) provides.
STREAMING_FROM_HOST = {"torch", "torchvision", "numpy", "transformers", "tqdm"}


def test_every_streaming_requirement_is_provided_or_unused(tmp_path):
    """Each requirement the pinned mosaicml-streaming release declares is in the mds extra, provided by the
    host's stack, or one local shards never import: a new release adding one fails here."""

    lines = [s.split("#")[0].strip() for s in (REPO_ROOT / "constraints" / "no-deps.txt").read_text().splitlines()
             if s.strip() and not s.startswith("#")]
    wheel, declared = _declared_requirements(tmp_path, lines, "mosaicml_streaming-*.whl", "mosaicml-streaming")
    covered = _names(_project()["optional-dependencies"]["mds"]) | STREAMING_UNUSED | STREAMING_FROM_HOST
    assert declared - covered == set(), f"{wheel.name} requires more: add what local reading imports to mds"
    assert {"numpy", "transformers"} <= declared  # what --no-deps keeps pip from resolving


def test_gpu_requirements_resolve_without_replacing_the_hosts_numpy_and_transformers(tmp_path):
    """pip's resolver, asked for the gpu extra's own requirements with the installed numpy, transformers and
    torch held (as a GPU host's), finds a set; with mosaicml-streaming resolved normally it cannot."""
    import re
    from importlib.metadata import version

    pins = tmp_path / "host.txt"
    pins.write_text("".join(f"{n}=={version(n).split('+')[0]}\n" for n in ("numpy", "transformers")))
    gpu = [r for r in _project()["optional-dependencies"]["gpu"] if not r.startswith("datajourney[")
           and not r.startswith("torchvision")]  # torchvision: the host's, matching its torch
    reqs = [*gpu, *_project()["optional-dependencies"]["mds"]]

    def resolve(extra):
        report = tmp_path / "report.json"
        r = _run([sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "-q", "--report",
                  report, "-c", pins, *reqs, *extra], timeout=300)
        return r, (json.loads(report.read_text())["install"] if r.returncode == 0 else [])

    r, items = resolve([])
    if r.returncode != 0 and "Could not fetch URL" in r.stderr:
        pytest.skip("no package index reachable")
    assert r.returncode == 0, r.stderr[-2000:]
    got = {re.sub(r"[-_.]+", "-", i["metadata"]["name"]).lower(): i["metadata"]["version"] for i in items}
    for name in ("numpy", "transformers"):
        assert got.get(name, version(name).split("+")[0]) == version(name).split("+")[0]
    r, _ = resolve(["mosaicml-streaming>=0.11,<0.14"])
    assert r.returncode != 0 and "conflict" in r.stderr.lower()  # what --no-deps avoids


@pytest.mark.notebooks
def test_reference_run_script_runs_detached_reports_resumes_and_packs(scratch):
    """scripts/reference-run.sh: the job runs detached, status names each chapter's machine, resume has
    nothing left to run, pack gives one tar.gz whose run directory passes the runner's checks."""
    from datajourney.book import runner

    script = SCRIPTS / "reference-run.sh"
    out = scratch / "out"
    env = _env(REFERENCE_SETUP="0", DATAJOURNEY_DATA_DIR=str(scratch / "data"))
    r = _run(["bash", script, "start", "testhost", out, "--profile", "ci", "--chapters", "1"], env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    r = _run(["bash", script, "wait", out], env=env, timeout=300)
    assert r.returncode == 0 and "chapter   1: ok" in r.stdout and "1 of 1 chapters ok" in r.stdout, r.stdout
    r = _run(["bash", script, "resume", out], env=env, timeout=120)
    assert r.returncode == 0 and "chapters still to run: \n" in r.stderr, r.stderr
    _run(["bash", script, "wait", out], env=env, timeout=120)
    r = _run(["bash", script, "pack", out], env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    (tgz,) = out.glob("reference-testhost-*.tgz")
    record = runner.check_run(out / tgz.name.removesuffix(".tgz"))
    assert record["status"] == "ok" and record["profile_seconds"] > 0
    (machine,) = record["machines"]
    assert record["machines"][machine] == ["01_introduction"]
    events = [json.loads(line) for line in (out / "journal.jsonl").read_text().splitlines()]
    assert {"begin", "end", "job-start", "job-end"} <= {e["event"] for e in events}
    assert all(e["boot_id"] and e["host"] for e in events)


# --------------------------------------------------------------------------- a reference run for a new host
def test_a_reference_run_for_a_new_host_passes_every_chapters_checks(tmp_path, monkeypatch):
    """``--as-reference NEWHOST`` (scripts/reference-run.sh start NEWHOST): every chapter's checks before the
    run accept a host with no folder under data/reference/ yet (promote makes it); comparing with one
    (``-p reference_host``) still needs a committed reference, and a recorded host is still a plain name."""
    from datajourney.book import runner
    from datajourney.book.registry import available
    from datajourney.core.params import ParameterError
    from datajourney.core.paths import reference_hosts

    monkeypatch.setenv("DATAJOURNEY_DATA_DIR", str(tmp_path / "data"))
    new = "h200x8"
    assert new not in reference_hosts()
    plans = runner.plan(None, "ci", {}, tmp_path / "run", extra={"reference_host": new, "is_reference_run": True})
    assert len(plans) == len(available()) and all(p.parameters["reference_host"] == new for p in plans)
    with pytest.raises(ParameterError, match="a host under data/reference/"):
        runner.plan(["2"], "ci", {"reference_host": new}, tmp_path / "run")
    with pytest.raises(ParameterError, match="a plain host name"):
        runner.plan(["2"], "ci", {}, tmp_path / "run", extra={"reference_host": "../x", "is_reference_run": True})


# --------------------------------------------------------------------------- a clean install's output
def _script(name: str):
    """A module of scripts/ (they are run as files, not installed)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


#: pip's output, recorded, of two installs after mosaicml-streaming went in with --no-deps (pip 23.2 and 26.3).
RESOLVER_OUTPUT = (Path(__file__).parent / "data" / "pip-resolver-after-no-deps.txt").read_text()


def test_pips_complaints_about_a_no_deps_install_become_one_line_said_once(tmp_path):
    """The resolver's report about mosaicml-streaming's skipped requirements (37 lines, two of them ERROR:)
    becomes one line naming what was skipped and why; a second install's report adds nothing; a conflict of
    any other package keeps pip's header and its line."""
    noted = tmp_path / "noted"
    filt = [sys.executable, SCRIPTS / "pip_filter.py", "--noted", noted]
    assert RESOLVER_OUTPUT.count("ERROR:") == 2 and RESOLVER_OUTPUT.count("\n") > 30
    r = _run(filt, input=RESOLVER_OUTPUT, timeout=60)
    assert r.returncode == 0, r.stderr
    (line,) = r.stdout.splitlines()
    assert line.startswith("note: mosaicml-streaming is installed without its declared dependencies")
    assert "constraints/no-deps.txt" in line and "numpy<2.2" in line  # why, from the file's comment
    assert "16 not installed (azure-identity," in line and "2 left at the installed version (xxhash, numpy)" in line
    r = _run(filt, input=RESOLVER_OUTPUT, timeout=60)
    assert r.returncode == 0 and r.stdout == ""  # said once an install
    other = ("Collecting spdl\n" + RESOLVER_OUTPUT.splitlines()[0] + "\n"
             "spdl 0.8.0 requires spdl-io==0.8.0, which is not installed.\n"
             + "\n".join(RESOLVER_OUTPUT.splitlines()[1:4]) + "\nSuccessfully installed spdl\n")
    r = _run(filt, input=other, timeout=60)
    assert r.stdout.splitlines() == ["Collecting spdl", RESOLVER_OUTPUT.splitlines()[0],
                                     "spdl 0.8.0 requires spdl-io==0.8.0, which is not installed.",
                                     "Successfully installed spdl"]


def _fake_resolver(target_deps):
    """A stand-in for pip's resolver in scripts/wheelhouse.py: each requirement and, unless --no-deps, the
    dependencies ``target_deps`` gives it (name -> names), at version 1.0."""
    def resolve(reqs, target, pins):
        names = {_names([r]).pop() for r in reqs}
        if "--no-deps" not in target:
            todo = list(names)
            while todo:
                for d in target_deps.get(todo.pop(), ()):
                    if d not in names:
                        names.add(d)
                        todo.append(d)
        return dict.fromkeys(names, "1.0")
    return resolve


def test_the_wheelhouse_plan_carries_every_declared_extra(monkeypatch, capsys):
    """``./journey wheelhouse --plan --python 3.12 --cuda 13`` (resolver stubbed: no network): the hub extra's
    datasets and DFTracer's dftracer-utils are downloaded, mosaicml-streaming without its dependencies, and
    nothing the host's stack provides."""
    wh = _script("wheelhouse")
    monkeypatch.setattr(wh, "resolve", _fake_resolver({
        "datasets": ["pyarrow", "huggingface-hub"], "dftracer": ["dftracer-utils", "pydftracer"],
        "mosaicml-streaming": ["boto3", "numpy"], "litdata": ["torch", "torchvision"], "torchvision": ["torch"]}))
    assert wh.main(["--plan", "--python", "3.12", "--cuda", "13"]) == 0
    out = capsys.readouterr().out
    parts, part = {}, None
    for line in out.splitlines():
        if not line.startswith(" "):
            part = line.split(":")[0]
        else:
            parts.setdefault(part, set()).add(line.strip().split("==")[0])
    assert {"datasets", "pyarrow", "dftracer", "dftracer-utils", "kvikio-cu13"} <= parts["optional"]
    assert {"mosaicml-streaming", "pandas", "setuptools", "nvidia-ml-py"} <= parts["core"]
    assert "jupyter-book" in parts["book"]
    every = set().union(*parts.values())
    assert not every & {"torch", "torchvision", "numpy", "huggingface-hub"}
    # chapter 7's formats travel with the optional part, litdata without its torch; boto3 only as the formats
    # extra names it (litdata imports it), never as mosaicml-streaming's requirement in the core part
    assert {"webdataset", "litdata", "boto3", "lightning-utilities"} <= parts["optional"]
    assert "boto3" not in parts["core"] and "litdata" not in parts["core"]


def test_a_wheel_over_the_transfer_limit_travels_in_pieces_and_is_joined(journey_copy, tmp_path):
    """scripts/wheelhouse.py cuts a wheel larger than its limit into pieces (each file fits one transfer);
    ``--wheelhouse`` joins them back, once, byte for byte."""
    wh = _script("wheelhouse")
    part = tmp_path / "wh" / "optional"
    part.mkdir(parents=True)
    data = os.urandom(2500)
    (part / "big-1.0-py3-none-any.whl").write_bytes(data)
    (part / "small-1.0-py3-none-any.whl").write_bytes(b"x" * 10)
    assert wh.split_large(part, limit=1000) == ["big-1.0-py3-none-any.whl"]
    assert sorted(p.name for p in part.iterdir()) == [f"big-1.0-py3-none-any.whl.00{k}" for k in (1, 2, 3)] + [
        "small-1.0-py3-none-any.whl"]
    assert wh.size(part) == 2510
    for _ in range(2):
        r = _run(["bash", journey_copy / "journey", "lab", "--wheelhouse", tmp_path / "wh"],
                 env=_env(JOURNEY_DRY_RUN="1"), timeout=60)
        assert r.returncode == 0, r.stderr
        assert (part / "big-1.0-py3-none-any.whl").read_bytes() == data
    assert r.stderr.count("joined") == 0  # the second time there is nothing to join


def _host_site(dest: Path, leave_out: tuple[str, ...]) -> Path:
    """Links in ``dest`` to everything this environment has installed, but this checkout's package and
    the distributions ``leave_out``: a host's own site-packages for a new .venv to see (a .pth file)."""
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    dest.mkdir()
    skip = tuple(n.replace("-", "_") for n in ("datajourney", "__editable__", *leave_out))
    for entry in site.iterdir():
        if entry.suffix != ".pth" and not entry.name.replace("-", "_").startswith(skip):
            (dest / entry.name).symlink_to(entry)
    return dest


@pytest.mark.notebooks
def test_journey_setup_from_a_wheelhouse_prints_steps_and_no_error(scratch):
    """A fresh clone's ``./journey setup --wheelhouse WH`` with no index: the host's stack (this environment's
    packages, seen through a .pth file) lacks ``datasets``, and WH holds only what building the package needs.
    The install succeeds, says each step as [k/n], prints no ERROR: line, and says in one line, once, that
    the hub extra's datasets could not be installed."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("needs git and a git checkout")
    wh = scratch / "wh"
    r = _run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", wh, "setuptools>=68"],
             env=_env(PIP_CONFIG_FILE=os.devnull), timeout=300)
    if r.returncode != 0:
        pytest.skip("setuptools could not be downloaded: " + r.stderr[-300:])
    clone = scratch / "clone"
    assert _run(["git", "clone", "-q", REPO_ROOT, clone], timeout=120).returncode == 0
    host = _host_site(scratch / "host-site", leave_out=("datasets",))
    assert _run([sys.executable, "-m", "venv", clone / ".venv"], timeout=120).returncode == 0
    purelib = _run([clone / ".venv" / "bin" / "python", "-c",
                    "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip()
    Path(purelib, "host.pth").write_text(f"{host}\n")
    env = {k: v for k, v in _env(isolated=True).items() if not k.startswith("PIP_")}
    env.update(PIP_CONFIG_FILE=os.devnull, PIP_DISABLE_PIP_VERSION_CHECK="1")
    r = _run(["bash", clone / "journey", "setup", "--wheelhouse", wh], env=env, cwd=clone, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-3000:]
    assert "ERROR" not in out, out
    steps = [line.split("]")[0] + "]" for line in out.splitlines() if line.startswith("[")]
    assert steps == [f"[{k}/6]" for k in range(1, 7)], out
    assert "byte-compiling the installed packages" in out, out
    (skipped,) = [line for line in out.splitlines() if "datasets" in line and "could not" in line]
    assert skipped.startswith("could not install datasets>=") and "the hub extra" in skipped
    assert "No matching distribution" in skipped and "skipped" in skipped
    r = _run([clone / ".venv" / "bin" / "python", "-c", "import datajourney, spdl; print(datajourney.__file__)"],
             env=env, cwd=clone, timeout=120)
    assert r.returncode == 0 and str(clone) in r.stdout, r.stderr[-2000:]


def _compiled_on_import(py: Path, module: str, under: Path, env: dict) -> int:
    """How many source files under ``under`` ``py`` compiles when it imports ``module`` (a fresh process)."""
    probe = ("import builtins; seen = []; c = builtins.compile\n"
             "def counting(src, name, *a, **k):\n    seen.append(str(name)); return c(src, name, *a, **k)\n"
             f"builtins.compile = counting\nimport {module}\n"
             f"print(sum(n.startswith({str(under)!r}) for n in seen))")
    r = _run([py, "-c", probe], env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return int(r.stdout.strip())


@pytest.mark.parametrize("host_has_bytecode", [False, True])
def test_a_host_torch_without_bytecode_is_compiled_into_the_venv_not_the_host(tmp_path, host_has_bytecode):
    """A .venv reusing a host's torch (a .pth naming the host's site-packages) on a host that writes no bytecode
    (PYTHONDONTWRITEBYTECODE): before scripts/bytecode.py every import compiles the host's sources; after it,
    none, with the bytecode in .venv/pycache, the host's folder untouched and a .pth pointing Python there. A host
    torch with its bytecode is left alone (no prefix)."""
    host = tmp_path / "host-site"
    (host / "torch").mkdir(parents=True)
    (host / "torch" / "__init__.py").write_text("from torch import part\n")
    (host / "torch" / "part.py").write_text("X = 1\n")
    if host_has_bytecode:
        import compileall
        assert compileall.compile_dir(host, quiet=2)
    venv = tmp_path / "venv"
    assert _run([sys.executable, "-m", "venv", "--without-pip", venv], timeout=120).returncode == 0
    py = venv / "bin" / "python"
    purelib = Path(_run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    (purelib / "host.pth").write_text(f"{host}\n")
    env = _env(isolated=True, PYTHONDONTWRITEBYTECODE="1")
    env.pop("PYTHONPYCACHEPREFIX", None)
    assert _compiled_on_import(py, "torch", host, env) == (0 if host_has_bytecode else 2)
    r = _run([py, SCRIPTS / "bytecode.py", venv], env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    assert _compiled_on_import(py, "torch", host, env) == 0
    pth = purelib / "datajourney-bytecode.pth"
    if host_has_bytecode:
        assert not pth.exists() and not (venv / "pycache").exists() and r.stdout == ""
    else:
        assert pth.is_file() and "has no bytecode" in r.stdout and len(r.stdout.splitlines()) == 1
        assert not (host / "torch" / "__pycache__").exists()
        assert list((venv / "pycache").rglob("part.*.pyc"))
