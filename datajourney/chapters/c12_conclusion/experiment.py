"""Chapter 12: the reader's pipeline diagnosed from the other chapters' results.

One thing is measured here: the training step of a GPT-2-family model, the token rate a GPU
consumes (:mod:`datajourney.toolkit.lmstep`). Everything else comes from the *facts* the other
chapters' analyses stored in their result files in the same run directory (:func:`collect`): this
chapter imports no other chapter's code and reads no other chapter's tables. Its analysis
(:mod:`.analysis`) turns those facts into each hop's sustainable rate and the weakest link; a chapter
this run did not execute leaves its hops out, named as missing, so a partial run still gets a
partial diagnosis.
"""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from datajourney.chapters.c12_conclusion.params import Params
from datajourney.core import results
from datajourney.core.facts import host_label
from datajourney.core.params import ParameterError


def collect(src, sources) -> dict:
    """The stored facts of each source chapter's result file in ``src`` (chapter -> run id, host, facts);
    a file without facts (written before schema 3) or unreadable is left out."""
    out = {}
    for ch in sources:
        f = Path(src) / f"{ch}.json"
        if not f.is_file():
            continue
        try:
            d = results.check(results.read(f), f)
        except (ValueError, KeyError):
            continue
        if d.get("facts"):
            out[ch] = dict(run_id=d["run_id"], host=host_label(d["fingerprint"]), facts=d["facts"])
    return out


def preflight(params) -> Params:
    """The chapter's parameters checked before any work (one-line errors naming the parameter)."""
    p = Params.coerce(params).checked()
    if p.tokens_per_batch < p.token_seq_len:
        raise ParameterError("tokens_per_batch", p.tokens_per_batch,
                             f"at least token_seq_len ({p.token_seq_len:,}): one row of tokens")
    if p.diagnose is not None and not Path(p.diagnose).is_dir():
        raise ParameterError("diagnose", p.diagnose, "a directory holding other chapters' result files")
    return p


def measure_token_step(p: Params) -> dict:
    """Time the GPT-2 training step on this machine's GPU (bf16), or on its CPU without one."""
    import torch

    from datajourney.toolkit.lmstep import token_step

    device = "cuda" if torch.cuda.is_available() else "cpu"
    size = p.token_model if p.token_model != "auto" else ("gpt2" if device == "cuda" else "tiny")
    return token_step(size=size, tokens_per_batch=p.tokens_per_batch, seq_len=p.token_seq_len,
                      steps=p.token_steps, device=device)


def gather(res: results.Result, src, sources) -> results.Result:
    """``res`` with the facts the chapters ``sources`` (the book's other chapters, which the harness names)
    exported in ``src``, as its inputs (the harness analyses them; a re-rendered run gathers the other
    chapters' facts again as they are now); the chapters without a result there are named as missing."""
    res.metadata["inputs"] = collect(src, sources)
    res.metadata["found"] = sorted(res.metadata["inputs"])
    res.metadata["missing"] = [c for c in sources if c not in res.metadata["inputs"]]
    return res


def measure(p: Params, context) -> None:
    """Time the token step (unless a demand is stated) and gather the facts of the run in ``diagnose``
    (default: this run, the run directory) into the started result."""
    from datajourney.core.timing import Laps  # loads torch: only when the chapter measures

    lap = Laps()  # how long each part of the run took (metadata)
    res = context.result
    src = Path(p.diagnose) if p.diagnose is not None else context.run_dir
    res.parameters.update(diagnose=str(src), run_dir=str(context.run_dir))
    if p.llm_tokens_per_s is None:
        step = measure_token_step(p)
        res.add("token_step", pd.DataFrame({"step": range(1, len(step["step_ms"]) + 1), "ms": step["step_ms"]}))
        res.metadata["token_step"] = {k: v for k, v in step.items() if k != "step_ms"}
        lap("token step")
    gather(res, src, context.sources)
    lap("gather facts")
    res.metadata["seconds"] = lap.seconds
