"""How a chapter 11 result is read: its host paths, its rung names, the topology's links and the all-reduce
time the measured bandwidth predicts. The experiment records with them and the analysis and page read
with them, so they live apart from the measuring code (pandas only, no torch)."""
from __future__ import annotations

import re

import pandas as pd

from datajourney.core.units import MiB
from datajourney.toolkit.collectives import bench_summary, interp_algbw

#: The host paths a scaling job can be forced onto, and the NCCL settings that force each.
HOST_PATHS = {
    "p2p_off": {"NCCL_P2P_DISABLE": "1"},
    "p2p_shm_off": {"NCCL_P2P_DISABLE": "1", "NCCL_SHM_DISABLE": "1"},
}
#: The part of a result that holds the loss's decomposition (its own rungs, kept apart from the ladder's tables).
EXPLAIN = "explain"
#: The jobs of the NCCL channel settings are named "<CHANNEL_JOB><channels>".
CHANNEL_JOB = "nch"
#: NCCL's channel count (the fewest and most it may use), read when the process group starts.
CHANNEL_ENV = ("NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS")
#: DDP's own bucket size (``DistributedDataParallel(bucket_cap_mb=25)``), which the ``default`` rung keeps.
DDP_DEFAULT_MB = 25
#: The rung that is DDP as a reader gets it without the book: every argument at PyTorch's default.
DEFAULT_RUNG = "default"
#: The rung names of the ladder and their DDP settings; "<rung>@<MiB>" sets bucket_cap_mb (not on ``default``,
#: whose bucket is DDP's own :data:`DDP_DEFAULT_MB`).
RUNGS = {
    "no_ddp": dict(ddp=False, static_graph=False, bucket_view=False, hook="none"),
    DEFAULT_RUNG: dict(ddp=True, static_graph=False, bucket_view=False, hook="none"),
    "ddp": dict(ddp=True, static_graph=False, bucket_view=False, hook="none"),
    "static_graph": dict(ddp=True, static_graph=True, bucket_view=False, hook="none"),
    "bucket_view": dict(ddp=True, static_graph=True, bucket_view=True, hook="none"),
    "bf16": dict(ddp=True, static_graph=True, bucket_view=True, hook="bf16"),
    "fp16": dict(ddp=True, static_graph=True, bucket_view=True, hook="fp16"),
    "powersgd": dict(ddp=True, static_graph=True, bucket_view=True, hook="powersgd"),
}
#: Each rung's name on the page.
RUNG_LABELS = {"no_ddp": "one GPU, no DDP", DEFAULT_RUNG: f"DDP's defaults (bucket_cap_mb={DDP_DEFAULT_MB})",
               "ddp": "one-bucket DDP", "static_graph": "+ static_graph",
               "bucket_view": "+ gradient_as_bucket_view", "bf16": "+ bf16 compression",
               "fp16": "+ fp16 compression", "powersgd": "+ PowerSGD"}
#: A communication hook as the page names it.
HOOK_WORDS = {"bf16": "bf16 compression", "fp16": "fp16 compression", "powersgd": "PowerSGD"}
#: A forced-host-path job starts only with this many seconds of the time budget left.
MIN_JOB_S = 45


def rung_label(name: str) -> str:
    """A rung's name on the page, with its bucket_cap_mb when the rung name sets one ("bf16@25"; plain DDP with its
    own bucket size is no longer one bucket: "DDP, bucket_cap_mb=25")."""
    base, _, cap = name.partition("@")
    head = "DDP" if base == "ddp" and cap else RUNG_LABELS.get(base, base)
    return head + (f", bucket_cap_mb={cap}" if cap else "")


def option_words(rung: str) -> str:
    """A rung's DDP settings in full, every option that is on named (the ladder adds them one on top of another):
    "static_graph + gradient_as_bucket_view with bucket_cap_mb=25", "one-bucket DDP", "DDP's defaults"."""
    base, _, cap = str(rung).partition("@")
    if base == DEFAULT_RUNG:
        return "DDP's defaults"
    if base == "ddp":
        return f"DDP with bucket_cap_mb={cap}" if cap else "one-bucket DDP"
    flags = RUNGS.get(base)
    if flags is None:
        return rung_label(rung)
    on = [name for k, name in (("static_graph", "static_graph"), ("bucket_view", "gradient_as_bucket_view"))
          if flags[k]]
    on += [HOOK_WORDS[flags["hook"]]] if flags["hook"] in HOOK_WORDS else []
    return " + ".join(on) + (f" with bucket_cap_mb={cap}" if cap else "")


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def parse_topology(text: str) -> pd.DataFrame:
    """``nvidia-smi topo -m`` as a tidy table: a, b, link (GPU and NIC columns only)."""
    lines = [_ANSI.sub("", ln).rstrip() for ln in (text or "").splitlines()]
    # the header is indented (it has no row label); the rows start with their device's name
    header = next((ln for ln in lines if ln[:1].isspace() and re.search(r"\bGPU0\b", ln)), None)
    if header is None:
        return pd.DataFrame(columns=["a", "b", "link"])
    devs = [c for c in header.split() if re.fullmatch(r"(GPU|NIC)\d+", c)]
    rows = []
    for ln in lines:
        parts = ln.split()
        if ln[:1].isspace() or not parts or not re.fullmatch(r"(GPU|NIC)\d+", parts[0]) or len(parts) <= len(devs):
            continue
        for dev, val in zip(devs, parts[1:1 + len(devs)]):
            rows.append({"a": parts[0], "b": dev, "link": val})
    return pd.DataFrame(rows, columns=["a", "b", "link"])


def link_kind(link: str) -> str:
    return "NV" if re.fullmatch(r"NV\d+", str(link)) else str(link)


def bucket_sizes(grad_bytes: int, cap_mb: int, first_mb: float = 1.0) -> list[int]:
    """Approximate DDP bucket sizes: a first small bucket (DDP's default 1 MiB), then buckets of
    ``cap_mb`` MiB (parameter boundaries ignored)."""
    cap = cap_mb * MiB
    first = min(grad_bytes, int(first_mb * MiB), cap)
    left = grad_bytes - first
    sizes = [first] if first else []
    while left > 0:
        sizes.append(min(cap, left))
        left -= cap
    return sizes


def predict_comm(rungs: pd.DataFrame, bench: pd.DataFrame, n: int) -> pd.DataFrame:
    """For each uncompressed DDP rung on N processes: the all-reduce time that its gradient bytes
    and the measured all-reduce bandwidth predict, beside the profiled NCCL kernel time.

    The buckets are taken as equal shares of the gradient bytes, as many as the profile counted
    NCCL kernels per step (one all-reduce per bucket); without a profile, from ``bucket_cap_mb``."""
    summ = bench_summary(bench)
    summ = summ[summ["op"] == "all_reduce"]
    rows = []
    for _, r in rungs.iterrows():
        if r["status"] != "ok" or not r["ddp"] or r["hook"] != "none" or r["world"] < 2:
            continue
        s = summ[summ["path"] == r["path"]]
        if s.empty:
            continue
        k = r.get("prof_nccl_kernels")
        if k is not None and not pd.isna(k) and k >= 1:
            # DDP keeps parameters whole, so the profile's all-reduce count per step is the bucket count
            k = int(round(k))
            sizes, how = [int(r["grad_bytes"]) // k] * k, "profile"
        else:
            sizes, how = bucket_sizes(int(r["grad_bytes"]), int(r["bucket_cap_mb"])), "bucket_cap_mb"
        pred = sum(b / (interp_algbw(s, b) * 1e9) for b in sizes) * 1e3
        rows.append({"path": r["path"], "rung": r["rung"], "buckets": len(sizes), "buckets_from": how,
                     "grad_bytes": int(r["grad_bytes"]),
                     "predicted_ms": pred, "profiled_nccl_ms": r.get("prof_nccl_ms"),
                     "exposed_nccl_ms": r.get("prof_exposed_nccl_ms")})
    return pd.DataFrame(rows, columns=["path", "rung", "buckets", "buckets_from", "grad_bytes", "predicted_ms",
                                       "profiled_nccl_ms", "exposed_nccl_ms"])
