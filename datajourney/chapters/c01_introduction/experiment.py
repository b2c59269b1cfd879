"""Chapter 1: the pipeline map and the reader's machine, recorded as a result (the harness,
:mod:`datajourney.book.harness`, takes the fingerprint when it starts the result)."""
from __future__ import annotations

from datajourney.chapters.c01_introduction.params import Params
from datajourney.core.fingerprint import summary


def preflight(params) -> Params:
    """The chapter's parameters, checked (it measures nothing else that could fail)."""
    return Params.coerce(params).checked()


def measure(params: Params, context) -> None:
    """Record this machine's fingerprint, field by field, as the ``machine`` table."""
    res = context.result
    res.add("machine", [{"field": k, "value": v} for k, v in summary(res.fingerprint).items()])
