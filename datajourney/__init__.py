"""The Data Journey: measure every hop of a training sample from disk to GPU memory."""
from pathlib import Path

__version__ = "0.1.0"

#: The repository checkout this package lives in (notebooks, profiles, reference data).
REPO_ROOT = Path(__file__).resolve().parent.parent
