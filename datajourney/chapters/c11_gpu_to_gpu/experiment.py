"""Chapter 11: GPU to GPU — DDP gradient traffic, NCCL transports, and what helps.

Every measurement runs in ``torchrun`` jobs of :mod:`datajourney.ddp_worker` started as
subprocesses: one job on one GPU (the model without DDP, then wrapped in DDP), one on N GPUs
(the ladder of DDP options, the ``bucket_cap_mb`` sweep and the collective benchmark), and,
where NCCL runs on several GPUs, the same again with NCCL forced off the direct GPU-to-GPU
path (``NCCL_P2P_DISABLE=1``; then also ``NCCL_SHM_DISABLE=1``) to emulate a host whose GPUs
talk only through host memory or sockets. Each job logs NCCL's own choice of transport
(``NCCL_DEBUG=INFO``), which this module parses; ``nvidia-smi topo -m`` gives the topology.

Without CUDA the jobs run on the CPU with the gloo backend and a small ViT, so the code path
(DDP, hooks, collectives, failure handling) is exercised; NCCL transports and GPU kernels
are then absent and said so.

A job never hangs and never outlives the run: torchrun stops the other ranks when one fails, the
process group has a timeout, the job as a whole runs under a wall-clock timeout after which it is
stopped, it is stopped as well when the launching process raises (Ctrl-C included), and it dies
with that process however it ends (SIGTERM, SIGKILL) or after a hard time limit that does not
depend on it (:func:`launch`, :mod:`datajourney.toolkit.lifetime`).

With ``nnodes`` > 1 the jobs of N processes run across nodes: the same chapter is started on every
node (``node_rank`` 0 to ``nnodes - 1``) and torchrun's c10d rendezvous at ``rdzv_endpoint`` joins
them; the one-process job and the scaling jobs stay on each node (:func:`plan_jobs`).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd

from datajourney.chapters.c11_gpu_to_gpu.params import CHAPTER, MODELS, OPS, Params  # noqa: F401 - re-exported
from datajourney.chapters.c11_gpu_to_gpu.reading import (
    CHANNEL_ENV,
    CHANNEL_JOB,
    DDP_DEFAULT_MB,
    DEFAULT_RUNG,
    EXPLAIN,
    HOST_PATHS,
    MIN_JOB_S,
    RUNGS,
    parse_topology,
    predict_comm,
)
from datajourney.chapters.c11_gpu_to_gpu.worker import SAFE_ENV
from datajourney.core.params import ParameterError, run_options
from datajourney.core.paths import REPO_ROOT
from datajourney.toolkit import lifetime

#: A job still running this long after its timeout is killed, whatever the launching process does.
KILL_AFTER_S = 10
#: Scaling jobs are named "<SCALE_JOB><k>" (direct path) and "<host path>@<k>" (forced host path).
SCALE_JOB = "scale"


# --------------------------------------------------------------------------- rungs
def parse_rung(text: str, default_cap: int) -> dict:
    """'bf16@25' -> the bf16 rung with bucket_cap_mb=25; 'default' -> DDP with every argument at PyTorch's default
    (its bucket is DDP's own 25 MiB, whatever ``default_cap`` is, and cannot be set)."""
    name, _, cap = str(text).partition("@")
    if name not in RUNGS or (cap and not cap.isdigit()) or (cap and int(cap) < 1) or (cap and name == DEFAULT_RUNG):
        raise ValueError(text)
    mb = int(cap) if cap else DDP_DEFAULT_MB if name == DEFAULT_RUNG else default_cap
    return {"name": f"{name}@{mb}" if cap else name, "base": name, "bucket_cap_mb": mb, **RUNGS[name]}


# --------------------------------------------------------------------------- topology and transports


def read_topology() -> tuple[pd.DataFrame, str | None]:
    """Run ``nvidia-smi topo -m`` (None and an empty table where there is no nvidia-smi)."""
    if not shutil.which("nvidia-smi"):
        return parse_topology(""), None
    try:
        out = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return parse_topology(""), None
    return parse_topology(out.stdout), out.stdout


#: NCCL's channel line, e.g. "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read" (spaces written \x20)
_CHANNEL = re.compile(r"Channel\x20(\d+)(?:/\d+)?\x20?:\x20(\d+)\[(\w+)\]\x20->\x20(\d+)\[(\w+)\]"
                      r"(?:\x20\[(\w+)\])?\x20via\x20(\S+)")
_VERSION = re.compile(r"NCCL version (\S+)")


def parse_transports(log: str) -> pd.DataFrame:
    """NCCL's channel lines (``NCCL_DEBUG=INFO``): channel, from rank, to rank, via, transport."""
    rows = []
    for m in _CHANNEL.finditer(log or ""):
        via = m.group(7)
        rows.append({"channel": int(m.group(1)), "src": int(m.group(2)), "dst": int(m.group(4)),
                     "kind": m.group(6) or "", "via": via, "transport": via.split("/")[0]})
    return pd.DataFrame(rows, columns=["channel", "src", "dst", "kind", "via", "transport"])


def nccl_version(log: str) -> str | None:
    m = _VERSION.search(log or "")
    return m.group(1) if m else None


# --------------------------------------------------------------------------- launching
class JobError(RuntimeError):
    """A torchrun job failed or ran past its timeout; the message carries the log's tail."""


@dataclass
class Job:
    name: str
    path: str                 #: "direct", "p2p_off", "p2p_shm_off" or "gloo"
    nproc: int                #: processes per node
    rungs: list
    bench_ops: list
    env: dict = field(default_factory=dict)
    nodes: int = 1            #: > 1: the job spans nodes (torchrun's rendezvous)
    returncode: int | None = None
    wall_s: float | None = None
    status: str = "not run"
    reason: str | None = None  #: why a job was skipped: the parameter that stopped it
    records: list = field(default_factory=list)
    log: str = ""


def job_env(extra: dict | None = None) -> dict:
    """The environment of every job: NVLink multicast off, NCCL's transport choice logged, the
    repository importable; ``extra`` on top (the forced host paths)."""
    env = dict(os.environ)
    env.update(SAFE_ENV)
    env.update({"NCCL_DEBUG": "INFO", "PYTHONUNBUFFERED": "1"})
    env.setdefault("OMP_NUM_THREADS", "1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                            if p])
    env.update(extra or {})
    env.update({"NCCL_NVLS_ENABLE": "0"})  # whatever extra says
    return env


@dataclass(frozen=True)
class Rendezvous:
    """Where the nodes of a job spanning ``nnodes`` nodes meet: torchrun's c10d rendezvous at
    ``endpoint`` (HOST:PORT, served by the node whose address it is), under ``run_id``; a node waits
    ``wait_s`` for the others (they need not start at the same moment)."""
    nnodes: int
    node_rank: int
    endpoint: str
    run_id: str
    wait_s: int = 600


def torchrun_command(nproc: int, config: Path, rendezvous: Rendezvous | None = None) -> list[str]:
    """torchrun's command line: one node on its own (``--standalone``), or one of several."""
    where = ["--standalone"] if rendezvous is None else [
        f"--nnodes={rendezvous.nnodes}", f"--node-rank={rendezvous.node_rank}", "--rdzv-backend=c10d",
        f"--rdzv-endpoint={rendezvous.endpoint}", f"--rdzv-id={rendezvous.run_id}",
        f"--rdzv-conf=join_timeout={rendezvous.wait_s},read_timeout={rendezvous.wait_s}"]
    return [sys.executable, "-m", "torch.distributed.run", *where, f"--nproc-per-node={nproc}",
            "--max-restarts=0", "--monitor-interval=0.2", "-m", "datajourney.chapters.c11_gpu_to_gpu.worker",
            "--config", str(config)]


def launch(config: dict, nproc: int, out: Path, *, timeout_s: float, env_extra: dict | None = None,
           rendezvous: Rendezvous | None = None, kill_after_s: float = KILL_AFTER_S) -> tuple[int, float, str]:
    """Start one torchrun job and wait at most ``timeout_s``; returns (returncode, seconds, log).

    The job runs in its own session and never outlives this call: past the timeout, or when the
    wait raises (KeyboardInterrupt included), torchrun and every rank are stopped
    (:func:`~datajourney.toolkit.lifetime.stop`). Should this process die instead (SIGTERM, SIGKILL),
    torchrun gets SIGKILL from the kernel and its ranks follow it; and ``kill_after_s`` past the
    timeout torchrun is killed even when this process is alive but stuck. Return code 124 means
    "timed out"."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.jsonl").unlink(missing_ok=True)
    cfg_path = out / "config.json"
    cfg_path.write_text(json.dumps({**config, "out": str(out)}, indent=1))
    log_path = out / "log.txt"
    t0 = time.monotonic()
    with log_path.open("w") as log:
        proc = subprocess.Popen(torchrun_command(nproc, cfg_path, rendezvous), stdout=log,
                                stderr=subprocess.STDOUT, env=job_env(env_extra), cwd=str(REPO_ROOT),
                                start_new_session=True, preexec_fn=lifetime.child_setup(timeout_s + kill_after_s))
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            rc = 124
        finally:
            lifetime.stop(proc)
    if rc == -signal.SIGALRM:  # the hard time limit
        rc = 124
    return rc, time.monotonic() - t0, log_path.read_text(errors="replace")


def read_records(out: Path) -> list[dict]:
    p = out / "results.jsonl"
    if not p.exists():
        return []
    recs = []
    for line in p.read_text().splitlines():
        try:
            recs.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # a line cut by a kill
    return recs


def run_job(job: Job, base: dict, out: Path, *, timeout_s: float, rendezvous: Rendezvous | None = None) -> Job:
    """Run ``job`` (across nodes when it spans several: ``rendezvous``) and read what it recorded."""
    cfg = {**base, "rungs": job.rungs, "bench_ops": job.bench_ops, "budget_s": max(10.0, 0.8 * timeout_s)}
    job.returncode, job.wall_s, job.log = launch(cfg, job.nproc, out / job.name, timeout_s=timeout_s,
                                                 env_extra=job.env, rendezvous=rendezvous if job.nodes > 1 else None)
    job.records = read_records(out / job.name)
    done = any(r.get("kind") == "done" for r in job.records)
    job.status = ("ok" if job.returncode == 0 and done else "timed out" if job.returncode == 124
                  else f"failed (exit {job.returncode})")
    return job


def log_tail(log: str, lines: int = 15) -> str:
    keep = [ln for ln in log.splitlines() if "NCCL INFO" not in ln]
    return "\n".join(keep[-lines:])


# --------------------------------------------------------------------------- parameters
def _resolve_model(model: str, cuda: bool) -> str:
    if model != "auto":
        return model
    try:
        import torchvision  # noqa: F401
    except Exception:  # noqa: BLE001 - a CPU torch makes torchvision fail at import with a RuntimeError
        return "small_vit"
    return "vit_l_32" if cuda else "small_vit"


def _rung_list(name: str, vals, *, ddp_only: bool = False, nonempty: bool = False) -> None:
    """Every entry of ``vals`` a rung name (optionally '@<bucket_cap_mb>'); DDP rungs only where asked."""
    names = ", ".join(r for r in RUNGS if not ddp_only or r != "no_ddp")
    allowed = (f"a {'non-empty ' if nonempty else ''}list of {'DDP ' if ddp_only else ''}rung names: {names} "
               "(optionally '@<bucket_cap_mb>', e.g. 'bf16@25')")
    if nonempty and not vals:
        raise ParameterError(name, vals, allowed)
    for v in vals:
        try:
            if parse_rung(v, 1)["base"] == "no_ddp" and ddp_only:
                raise ValueError(v)
        except ValueError:
            raise ParameterError(name, vals, allowed) from None


def _node_params(params) -> None:
    """``nnodes``, ``node_rank`` (0 to nnodes - 1), ``rdzv_endpoint`` (HOST:PORT, only with several nodes)
    and ``node_path``, checked."""
    p = Params.coerce(params).checked()
    if p.node_rank > p.nnodes - 1:
        raise ParameterError("node_rank", p.node_rank, f"an integer from 0 to {p.nnodes - 1}")
    ep = p.rdzv_endpoint
    if p.nnodes == 1 and ep is not None:
        raise ParameterError("rdzv_endpoint", ep, "None with nnodes = 1 (one node needs no rendezvous)")
    if p.nnodes > 1:
        host, _, port = str(ep).rpartition(":") if isinstance(ep, str) else ("", "", "")
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            raise ParameterError("rdzv_endpoint", ep, f"'HOST:PORT' of node 0, the same on all {p.nnodes} "
                                 "nodes (e.g. 'node0:29400'), with nnodes > 1")


def scale_worlds(spec, n: int) -> list[int]:
    """The process counts of the scaling jobs: below N (the N-process job covers N itself);
    'auto' takes the powers of two from 2 below N, so a 4-GPU host adds 2, an 8-GPU host 2 and 4."""
    ks = [2 ** i for i in range(1, 7)] if spec == "auto" else spec
    return sorted({int(k) for k in ks if 2 <= int(k) < n})


def _memory_check(p: Params, n_dev: int) -> None:
    """The largest collective buffer (twice, for gather/scatter) must fit in a GPU's free memory."""
    if not n_dev:
        return
    import torch

    free, _ = torch.cuda.mem_get_info(0)
    need = 2 * max(p.bench_sizes) + (4 << 30)  # + the model, its gradients and its buckets
    if need > free:
        raise ParameterError("bench_sizes", p.bench_sizes,
                             f"sizes whose buffers fit the GPU's free memory ({free / 2**30:.1f} GiB)")


def preflight(params) -> Params:
    """Every parameter checked before any work: each against its declaration (:meth:`Params.checked`),
    then what the declarations cannot say — rung names, ranges of lists that may be empty, the model and
    GPUs this machine has, PowerSGD's start within the warm-up, the nodes, the collective buffers in GPU
    memory. A mapping (the runner's) may carry the book's options, which are checked too."""
    if not isinstance(params, Params):
        run_options(dict(params))
    p = Params.coerce(params).checked()
    import torch
    import torch.distributed as dist

    if not dist.is_available():
        raise ParameterError("model", p.model, "a torch built with torch.distributed")
    if p.model == "vit_l_32":
        try:
            import torchvision  # noqa: F401
        except Exception as e:  # noqa: BLE001
            raise ParameterError("model", "vit_l_32", f"'auto' or 'small_vit' here: torchvision does not import "
                                 f"({type(e).__name__})") from None
    if p.image_size % 32 and _resolve_model(p.model, torch.cuda.is_available()) == "vit_l_32":
        raise ParameterError("image_size", p.image_size, "a multiple of 32 for vit_l_32")
    if p.image_size % 8:
        raise ParameterError("image_size", p.image_size, "a multiple of 8")
    n_dev = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if p.gpus != "all" and n_dev and p.gpus > n_dev:
        raise ParameterError("gpus", p.gpus, f"'all' or an integer from 1 to {n_dev} (GPUs here)")
    _rung_list("ladder", p.ladder)
    _rung_list("host_ladder", p.host_ladder)
    _rung_list("scale_ladder", p.scale_ladder, ddp_only=True, nonempty=True)
    top = n_dev or 64
    if p.scale_worlds != "auto" and not all(2 <= k <= top for k in p.scale_worlds):
        raise ParameterError("scale_worlds", p.scale_worlds, f"'auto' or a list of integers from 2 to {top}")
    try:
        ex = parse_rung(p.explain_rung, 1)
    except ValueError:
        ex = None
    if ex is None or not ex["ddp"] or ex["hook"] != "none":
        raise ParameterError("explain_rung", p.explain_rung, "a DDP rung without a communication hook: default, ddp, "
                             "static_graph or bucket_view (optionally '@<bucket_cap_mb>', e.g. 'ddp@25')")
    if not all(1 <= c <= 64 for c in p.nccl_channels):
        raise ParameterError("nccl_channels", p.nccl_channels, "a list of integers from 1 to 64 (may be empty)")
    if not all(1 <= k <= 100_000 for k in p.bucket_sweep):
        raise ParameterError("bucket_sweep", p.bucket_sweep, "a list of integers from 1 to 100,000 (may be empty)")
    if p.powersgd_start_iter > p.warmup_steps:
        raise ParameterError("powersgd_start_iter", p.powersgd_start_iter,
                             f"an integer from 2 to warmup_steps ({p.warmup_steps}), so timed steps use PowerSGD")
    _node_params(p)
    _memory_check(p, n_dev)
    return p


# --------------------------------------------------------------------------- the chapter
def plan_jobs(params, backend: str, n: int) -> list[Job]:
    """The torchrun jobs of a run, ``n`` processes per node: one process; N processes; N on each forced
    host path (NCCL, N ≥ 2); the scaling jobs below N.

    With ``nnodes`` > 1, N is ``nnodes`` × ``n``: the N-process and forced-host-path jobs span the
    nodes (their NCCL environment gets ``node_path``'s too), while the one-process job and the
    scaling jobs (up to ``n``) run on each node alone. ``params``: a :class:`Params` (or a mapping of
    some of its names, the rest at their defaults)."""
    p = Params.coerce(params)
    cap = p.bucket_cap_mb
    rung = lambda s: parse_rung(s, cap)  # noqa: E731
    path = "direct" if backend == "nccl" else "gloo"
    nodes = p.nnodes
    node_env = HOST_PATHS.get(p.node_path, {}) if nodes > 1 and backend == "nccl" else {}
    ladder = [rung(s) for s in p.ladder if parse_rung(s, cap)["base"] != "no_ddp"]
    ladder += [rung(f"bucket_view@{mb}") for mb in p.bucket_sweep if mb != cap]
    # on one GPU too, the explained rung without sync: "ranks apart" then compares no-sync steps on N ranks with the
    # same no-sync step on one, and the sync cost beyond one GPU's is what the all-reduce adds on N
    jobs = [Job("one", path, 1, explained([rung("no_ddp"), rung("ddp")], p.explain_rung, cap), [])]
    if n * nodes >= 2:
        jobs.append(Job("n", path, n, explained(ladder, p.explain_rung, cap), list(p.bench_ops), env=dict(node_env),
                        nodes=nodes))
        worlds = scale_worlds(p.scale_worlds, n if nodes == 1 else n + 1)
        scale = [rung(s) for s in p.scale_ladder]
        jobs += [Job(f"{SCALE_JOB}{k}", path, k, explained(scale, p.explain_rung, cap), ["all_reduce"])
                 for k in worlds]
        if backend == "nccl":  # each channel count is its own launch: NCCL reads it when the process group starts
            ex = {**rung(p.explain_rung), "part": EXPLAIN, "iso": True}
            jobs += [Job(f"{CHANNEL_JOB}{c}", path, n, [ex], [], env={**node_env, **dict.fromkeys(CHANNEL_ENV, str(c))},
                         nodes=nodes) for c in p.nccl_channels]
            for h in p.host_paths:
                jobs.append(Job(h, h, n, [rung(s) for s in p.host_ladder], ["all_reduce"],
                                env={**node_env, **HOST_PATHS[h]}, nodes=nodes))
            jobs += [Job(f"{h}@{k}", h, k, [rung("ddp")], ["all_reduce"], env=HOST_PATHS[h])
                     for h in p.scale_host_paths for k in worlds]
    return jobs


def explained(rungs: list[dict], name: str, cap: int) -> list[dict]:
    """``rungs`` with the decomposition's rungs: ``name`` (run as part of the decomposition where the list lacks it)
    with its all-reduces timed alone after it, and ``name`` once more with gradient sync skipped (``no_sync``)."""
    ex = parse_rung(name, cap)
    out = [dict(r, iso=True) if r["name"] == ex["name"] else r for r in rungs]
    at = next((i + 1 for i, r in enumerate(rungs) if r["name"] == ex["name"]), None)
    if at is None:
        out.append({**ex, "part": EXPLAIN, "iso": True})
        at = len(out)
    # right after the synced rung: the same model, the same state of the host
    out.insert(at, {**ex, "part": EXPLAIN, "sync": False})
    return out


def is_scale_job(name: str) -> bool:
    """A job of the scaling curve below N (its records go to the ``scale_*`` tables)."""
    return "@" in name or (name.startswith(SCALE_JOB) and name[len(SCALE_JOB):].isdigit())


def measure(p: Params, context) -> None:
    """Run chapter 11: the torchrun jobs, their transports and the topology, as one result."""
    import torch
    from tqdm import tqdm

    cuda = torch.cuda.is_available()
    backend = "nccl" if cuda else "gloo"
    n = (torch.cuda.device_count() if p.gpus == "all" else p.gpus) if cuda else p.cpu_procs
    world = n * p.nnodes
    rdzv = Rendezvous(p.nnodes, p.node_rank, p.rdzv_endpoint, f"datajourney-{CHAPTER}",
                      int(p.job_timeout_s)) if p.nnodes > 1 else None
    res, rd, progress = context.result, context.run_dir, context.progress
    topo, topo_text = read_topology()
    res.add("topology", topo)
    the_model = _resolve_model(p.model, cuda)
    base = {"backend": backend, "model": the_model, "batch_size": p.batch_size, "image_size": p.image_size,
            "classes": 1000 if the_model == "vit_l_32" else 10, "warmup_steps": p.warmup_steps,
            "steps": p.steps, "windows": p.windows, "profile_steps": int(p.profile_steps),
            "powersgd_rank": p.powersgd_rank, "powersgd_start_iter": p.powersgd_start_iter,
            "bench_sizes": p.bench_sizes, "bench_iters": p.bench_iters, "bench_repeats": p.bench_repeats,
            "pg_timeout_s": p.pg_timeout_s, "threads": 1}
    jobs = plan_jobs(p, backend, n)
    out = rd / "ddp"
    deadline = time.monotonic() + p.time_budget_s
    for j in tqdm(jobs, desc="chapter 11 jobs", disable=not progress):
        left = deadline - time.monotonic()
        whole = j.name in ("one", "n") or j.nodes > 1  # every node runs the jobs across nodes, in full
        if not whole and left < MIN_JOB_S:
            j.status, j.reason = "skipped", "time_budget_s"
            continue
        run_job(j, base, out, timeout_s=p.job_timeout_s if whole else min(p.job_timeout_s, left),
                rendezvous=rdzv and replace(rdzv, run_id=f"{rdzv.run_id}-{j.name}"))
        if j.name in ("one", "n") and j.status != "ok":
            raise JobError(f"torchrun job {j.name!r} ({j.nproc * j.nodes} process(es), {backend}) {j.status} after "
                           f"{j.wall_s:.0f} s; its log ends:\n{log_tail(j.log)}")
    res.metadata.update(cuda=cuda, backend=backend, world=world, model=the_model, topology_text=topo_text,
                        gpu_count=torch.cuda.device_count() if cuda else 0, nnodes=p.nnodes,
                        node_rank=p.node_rank, rdzv_endpoint=p.rdzv_endpoint, node_path=p.node_path,
                        jobs=[{"job": j.name, "path": j.path, "nproc": j.nproc * j.nodes, "nodes": j.nodes,
                               "env": j.env, "status": j.status, "reason": j.reason,
                               "returncode": j.returncode, "wall_s": j.wall_s,
                               "nccl_version": nccl_version(j.log), "error_tail": None if j.status == "ok"
                               else log_tail(j.log)} for j in jobs],
                        start=next((r for j in jobs for r in j.records if r.get("kind") == "start"), {}))
    tables = tidy([j for j in jobs if not is_scale_job(j.name)])
    for name, df in tables.items():
        res.add(name, df)
    scale_jobs = [j for j in jobs if is_scale_job(j.name)]
    res.metadata["scale_worlds"] = sorted({j.nproc for j in scale_jobs})
    if scale_jobs:  # the scaling curve below N, kept apart so the tables above stay those of N
        for name, df in tidy(scale_jobs).items():
            res.add(f"scale_{name}", df)
    if "bench" in tables and "rungs" in tables:
        res.add("prediction", predict_comm(tables["rungs"], tables["bench"], world))
    for name, df in tidy_explain(jobs).items():
        res.add(name, df)


# --------------------------------------------------------------------------- tables
def tidy(jobs: list[Job]) -> dict[str, pd.DataFrame]:
    rungs, windows, bench, transports = [], [], [], []
    for j in jobs:
        for r in j.records:
            if r.get("part") == EXPLAIN:
                continue
            if r.get("kind") == "rung":
                prof = r.get("profile") or {}
                row = {"job": j.name, "path": j.path, "world": r["world"], "rung": r["rung"], "ddp": r["ddp"],
                       "static_graph": r["static_graph"], "bucket_view": r["bucket_view"], "hook": r["hook"],
                       "bucket_cap_mb": r["bucket_cap_mb"], "status": r["status"], "reason": r.get("reason"),
                       "grad_bytes": r.get("grad_bytes"), "loss": r.get("loss"),
                       "replica_spread": r.get("replica_spread"),
                       "hook_state": json.dumps(r["hook_state"]) if r.get("hook_state") else None,
                       "profile_error": r.get("profile_error")}
                sps = r.get("steps_per_s") or []
                if sps:
                    s = pd.Series(sps)
                    row.update(steps_per_s=float(s.mean()), sps_min=float(s.min()), sps_max=float(s.max()),
                               sps_std=float(s.std(ddof=1)) if len(s) > 1 else 0.0, windows=len(s))
                for k, v in (r.get("phases_ms") or {}).items():
                    row[f"{k}_ms"] = v
                row.update({f"prof_{k}": v for k, v in prof.items()})
                rungs.append(row)
                for i, v in enumerate(sps):
                    windows.append({"job": j.name, "path": j.path, "world": r["world"], "rung": r["rung"],
                                    "window": i, "steps_per_s": v})
            elif r.get("kind") == "bench":
                bench.append({"job": j.name, "path": j.path, **{k: v for k, v in r.items() if k != "kind"}})
        t = parse_transports(j.log)
        if len(t):
            t.insert(0, "path", j.path)
            t.insert(0, "job", j.name)
            transports.append(t)
    out = {"rungs": pd.DataFrame(rungs), "windows": pd.DataFrame(windows)}
    if bench:
        out["bench"] = pd.DataFrame(bench)
    tcols = ["job", "path", "channel", "src", "dst", "kind", "via", "transport"]
    out["transports"] = pd.concat(transports, ignore_index=True) if transports else pd.DataFrame(columns=tcols)
    return out


def tidy_explain(jobs: list[Job]) -> dict[str, pd.DataFrame]:
    """The decomposition's tables, from every job: ``explain`` (its own rungs: the explained rung where the job's
    list lacked it, and the rung with gradient sync skipped), ``explain_windows`` (their windows) and
    ``explain_iso`` (each job's all-reduces of the explained rung's buckets run alone, one row per window)."""
    rungs, windows, iso = [], [], []
    for j in jobs:
        for r in j.records:
            if r.get("kind") == "rung" and r.get("part") == EXPLAIN:
                sps = r.get("steps_per_s") or []
                row = {"job": j.name, "path": j.path, "world": r["world"], "rung": r["rung"], "sync": r["sync"],
                       "status": r["status"], "reason": r.get("reason"), "env": json.dumps(j.env or {}),
                       "steps_per_s": float(sum(sps) / len(sps)) if sps else None,
                       "profile_error": r.get("profile_error")}
                row.update({f"prof_{k}": v for k, v in (r.get("profile") or {}).items()})
                rungs.append(row)
                windows += [{"job": j.name, "path": j.path, "world": r["world"], "rung": r["rung"], "sync": r["sync"],
                             "window": i, "steps_per_s": v} for i, v in enumerate(sps)]
            elif r.get("kind") == "iso":
                prof = r.get("profile") or {}
                base = {"job": j.name, "path": j.path, "world": r["world"], "rung": r["rung"], "status": r["status"],
                        "reason": r.get("reason"), "buckets": r.get("buckets"),
                        "bucket_sizes": json.dumps(r.get("bucket_bytes") or []),
                        "prof_nccl_ms": prof.get("nccl_ms"), "profile_error": r.get("profile_error")}
                iso += [{**base, "window": i, "step_ms": v} for i, v in enumerate(r.get("step_ms") or [None])]
    return {f"{EXPLAIN}": pd.DataFrame(rungs), f"{EXPLAIN}_windows": pd.DataFrame(windows),
            f"{EXPLAIN}_iso": pd.DataFrame(iso)} if rungs or iso else {}
