"""Where things live: the checkout, the generated data sets, the committed reference results."""
from __future__ import annotations

import os
from pathlib import Path

#: The repository checkout this package lives in (notebooks, profiles, reference data).
REPO_ROOT = Path(__file__).resolve().parents[2]
#: Environment variable naming the data directory (default ``~/.cache/datajourney``).
DATA_DIR_ENV = "DATAJOURNEY_DATA_DIR"
#: Committed reference results, one folder per host.
REFERENCE_DIR = REPO_ROOT / "data" / "reference"
#: Where ``run`` puts run directories unless ``--results`` says otherwise.
RESULTS_ROOT = REPO_ROOT / "results"


def default_data_dir() -> Path:
    """Where data sets go unless a chapter's ``data_dir`` says otherwise."""
    env = os.environ.get(DATA_DIR_ENV)
    return Path(env) if env else Path.home() / ".cache" / "datajourney"


def reference_hosts() -> list[str]:
    """The hosts with committed reference results (folders of ``data/reference/``)."""
    return sorted(p.name for p in REFERENCE_DIR.iterdir() if p.is_dir()) if REFERENCE_DIR.is_dir() else []


def boot_id() -> str:
    """This boot's id (tells a reused pid or a rebooted host apart); empty where unknown."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""
