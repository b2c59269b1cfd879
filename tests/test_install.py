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


@pytest.mark.notebooks
def test_fresh_venv_installs_and_runs_a_chapter(tmp_path):
    """A clean virtual environment (no system packages) and a copy of the checkout: torch, then
    ``pip install -e .[book]``, then chapter 2 under the ci profile runs and writes its result."""
    src = tmp_path / "checkout"
    shutil.copytree(REPO_ROOT, src, ignore=shutil.ignore_patterns(
        ".venv", ".git", "results", "_build", "*.egg-info", "__pycache__", ".pytest_cache"))
    venv = tmp_path / "venv"
    py = venv / "bin" / "python"
    assert _run([sys.executable, "-m", "venv", venv]).returncode == 0
    cfg = _run([py, "-c", "import sys; print(sys.prefix != sys.base_prefix)"])
    assert cfg.stdout.strip() == "True"
    env = _env(isolated=True, DATAJOURNEY_DATA_DIR=str(tmp_path / "data"), PIP_DISABLE_PIP_VERSION_CHECK="1")
    for args in (["torch==2.13.0"], ["-e", f"{src}[book]"]):
        r = _run([py, "-m", "pip", "install", "-q", *args], env=env, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
    r = _run([py, "-m", "datajourney", "run", "2", "--profile", "ci", "--results", tmp_path / "results",
              "--run-id", "fresh", "--quiet"], env=env, cwd=src, timeout=600)
    assert r.returncode == 0, (r.stdout + r.stderr)[-3000:]
    result = tmp_path / "results" / "fresh" / "02_random_vs_sequential.json"
    assert result.is_file()
    assert json.loads((tmp_path / "results" / "fresh" / "run.json").read_text())["status"] == "ok"


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
