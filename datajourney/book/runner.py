"""Execute chapter notebooks with papermill into a run directory.

A run directory ``results/<run-id>/`` holds the executed notebooks (``notebooks/``), each
chapter's result file (``<chapter>.json``) and ``run.json`` (profile, parameters, status).
Every check that can fail (profile, parameter names, parameter values, data directory,
free disk) runs for every chapter before the first notebook starts.
"""
from __future__ import annotations

import ast
import datetime as _dt
import importlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import yaml

from .. import REPO_ROOT
from .chapters import Chapter, available, lookup
from .params import ParameterError

PROFILES_FILE = Path(__file__).with_name("profiles.yaml")
RESULTS_ROOT = REPO_ROOT / "results"
#: Parameters the runner sets itself; a profile or -p may not.
RUNNER_PARAMETERS = ("run_dir",)


class RunError(RuntimeError):
    """A run could not start or a chapter failed; the message says which and where."""


def profiles() -> dict:
    return yaml.safe_load(PROFILES_FILE.read_text())


def notebook_parameters(ch: Chapter) -> dict:
    """The parameters cell of a chapter's notebook: name -> default value."""
    import papermill as pm

    out = {}
    for name, info in pm.inspect_notebook(str(ch.notebook)).items():
        try:
            out[name] = ast.literal_eval(info["default"])
        except (ValueError, SyntaxError):
            out[name] = info["default"]
    return out


def parse_value(text: str):
    """A ``-p`` value: YAML scalars and lists ('4', '[0, 4]', 'true', 'null'), else the string."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


@dataclass
class Plan:
    chapter: Chapter
    parameters: dict  # what papermill injects (profile + overrides + run_dir)


def plan(chapter_keys, profile: str, overrides: dict, run_dir: Path, extra: dict | None = None) -> list[Plan]:
    """Resolve chapters and parameters, validate everything, and return what to execute."""
    profs = profiles()
    if profile not in profs:
        raise ParameterError("--profile", profile, "one of " + ", ".join(profs))
    chapters = [lookup(k) for k in chapter_keys] if chapter_keys else available()
    for ch in chapters:
        if not ch.available:
            raise RunError(f"chapter {ch.number} ({ch.slug}) has no notebook yet: {ch.notebook.name}")
    defaults = {ch.name: notebook_parameters(ch) for ch in chapters}
    known = set().union(*defaults.values()) if defaults else set()
    for name in overrides:
        if name in RUNNER_PARAMETERS:
            raise ParameterError(f"-p {name}", overrides[name], "not this one: the runner sets it (use --run-id)")
        if name not in known:
            raise ParameterError(f"-p {name}", overrides[name],
                                 "a parameter of the selected chapters: " + ", ".join(sorted(known)))
    plans = []
    for ch in chapters:
        prof = (profs[profile] or {}).get(ch.name, {}) or {}
        unknown = set(prof) - set(defaults[ch.name])
        if unknown:
            raise RunError(f"{PROFILES_FILE.name}: profile {profile!r} sets unknown parameters "
                           f"{sorted(unknown)} for {ch.name}")
        inject = {**prof, **{k: v for k, v in overrides.items() if k in defaults[ch.name]}, **(extra or {})}
        inject = {k: v for k, v in inject.items() if k in defaults[ch.name]}
        inject["run_dir"] = str(run_dir)
        if ch.module:
            importlib.import_module(ch.module).preflight({**defaults[ch.name], **inject})
        plans.append(Plan(ch, inject))
    return plans


def new_run_id(profile: str) -> str:
    return _dt.datetime.now().strftime("%Y%m%d-%H%M%S") + f"-{profile}"


def execute(plans: list[Plan], run_dir: Path, *, profile: str, progress: bool = True) -> dict:
    """Execute each planned notebook in order; stop at the first failing cell."""
    import papermill as pm
    from papermill.exceptions import PapermillExecutionError

    nb_dir = run_dir / "notebooks"
    nb_dir.mkdir(parents=True, exist_ok=True)
    record = {"run_id": run_dir.name, "profile": profile, "started": _now(), "chapters": []}
    _write_record(run_dir, record)
    for i, p in enumerate(plans, 1):
        out = nb_dir / p.chapter.notebook.name
        print(f"[{i}/{len(plans)}] chapter {p.chapter.number}: {p.chapter.title}", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        entry = {"chapter": p.chapter.name, "parameters": p.parameters, "notebook": str(out.relative_to(run_dir))}
        try:
            pm.execute_notebook(
                str(p.chapter.notebook), str(out), parameters=p.parameters, kernel_name="python3",
                progress_bar=progress, cwd=str(p.chapter.notebook.parent),
            )
        except PapermillExecutionError as e:
            entry.update(status="failed", seconds=round(time.perf_counter() - t0, 2),
                         error={"cell": e.cell_index, "execution_count": e.exec_count,
                                "ename": e.ename, "evalue": e.evalue})
            record["chapters"].append(entry)
            record.update(status="failed", finished=_now())
            _write_record(run_dir, record)
            raise RunError(
                f"chapter {p.chapter.number} ({p.chapter.notebook.name}) failed in cell {e.cell_index} "
                f"of the executed notebook (execution count {e.exec_count}): {e.ename}: {e.evalue}\n"
                f"  executed notebook with the traceback: {out}"
            ) from None
        hide_injected_cell(out)
        entry.update(status="ok", seconds=round(time.perf_counter() - t0, 2))
        record["chapters"].append(entry)
        _write_record(run_dir, record)
        print(f"      done in {entry['seconds']:.1f} s", file=sys.stderr, flush=True)
    record.update(status="ok", finished=_now())
    _write_record(run_dir, record)
    return record


def run(chapter_keys=(), *, profile: str = "quick", overrides: dict | None = None, run_id: str | None = None,
        results_root: Path | None = None, extra: dict | None = None, progress: bool = True) -> Path:
    """Plan (validating everything), then execute; return the run directory."""
    root = Path(results_root) if results_root else RESULTS_ROOT
    run_dir = (root / (run_id or new_run_id(profile))).resolve()
    plans = plan(chapter_keys, profile, overrides or {}, run_dir, extra)
    run_dir.mkdir(parents=True, exist_ok=True)
    execute(plans, run_dir, profile=profile, progress=progress)
    latest = root / "latest"
    if latest.is_symlink() or not latest.exists():
        if latest.is_symlink():
            latest.unlink()
        os.symlink(run_dir.name, latest)
    return run_dir


def hide_injected_cell(path: Path) -> None:
    """Tag papermill's injected-parameters cell ``remove-cell`` so the book does not show it;
    each chapter prints the parameters of its run as a table instead."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        tags = cell.metadata.setdefault("tags", [])
        if "injected-parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
    nbformat.write(nb, path)


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _write_record(run_dir: Path, record: dict) -> None:
    tmp = run_dir / ".run.json.tmp"
    tmp.write_text(json.dumps(record, indent=1, default=str))
    os.replace(tmp, run_dir / "run.json")
