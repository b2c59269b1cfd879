"""Chapter 1: the pipeline map and the reader's machine, recorded as a result."""
from __future__ import annotations

from datajourney.chapters.c01_introduction.params import Params
from datajourney.core import results
from datajourney.core.fingerprint import summary

CHAPTER = "01_introduction"


def _measure(*, data_dir, run_dir=None):
    """Record this machine's fingerprint as chapter 1's result."""
    params = {"data_dir": data_dir, "run_dir": run_dir}
    res = results.start(CHAPTER, params, run_dir, data_dir)
    res.add("machine", [{"field": k, "value": v} for k, v in summary(res.fingerprint).items()])
    res.save(results.resolve_run_dir(run_dir))
    return res


def run(params: Params | None = None, *, run_dir=None, **changes):
    """Run chapter 1's experiment with ``params`` (default: :class:`Params`, the notebook's defaults)
    changed by ``changes``, save the result to ``run_dir`` and return it."""
    p = (params or Params()).replace(**changes)
    return _measure(**p.as_dict(), run_dir=run_dir)
