"""Chapter 1: the pipeline map and the reader's machine, recorded as a result."""
from __future__ import annotations

from datajourney.chapters.c01_introduction import analysis
from datajourney.chapters.c01_introduction.params import Params
from datajourney.core import results
from datajourney.core.fingerprint import summary

CHAPTER = "01_introduction"


def preflight(params) -> Params:
    """The chapter's parameters, checked (it measures nothing else that could fail)."""
    return Params.coerce(params).checked()


def run(params: Params | None = None, *, run_dir=None, **changes):
    """Record this machine's fingerprint as chapter 1's result in ``run_dir`` and return it."""
    p = preflight((params or Params()).replace(**changes))
    res = results.start(CHAPTER, {"data_dir": p.data_dir, "run_dir": run_dir}, run_dir, p.data_dir)
    res.add("machine", [{"field": k, "value": v} for k, v in summary(res.fingerprint).items()])
    res.facts = analysis.analyse(res)
    res.save(results.resolve_run_dir(run_dir))
    return res
