"""Chapter 11's ``torchrun`` entry point: one training ladder and one collective benchmark per job.

Launch it with torchrun, on any number of GPUs (or CPU processes with gloo), on one node or
several (torchrun's own rendezvous arguments, as the chapter's ``torchrun_command`` writes them)::

    torchrun --standalone --nproc-per-node=2 -m datajourney.chapters.c11_gpu_to_gpu.worker --config job.json

``job.json`` names the model, the rungs of the ladder and the collective sizes (written by
:func:`~datajourney.chapters.c11_gpu_to_gpu.experiment.run_job`). Local rank 0 of each node
appends one JSON line per finished rung or benchmark point to ``<out>/results.jsonl`` (the
numbers are those of all ranks, so every node writes the same), and a job stopped by its timeout
keeps what it finished. Every rank sets ``NCCL_NVLS_ENABLE=0`` before NCCL starts (NVLink
multicast off) and dies with torchrun (``PR_SET_PDEATHSIG``: torchrun starts ranks in sessions
of their own, so nothing else would end a rank whose torchrun was killed). A rank that fails
makes the job fail: torchrun stops the other ranks, and a rank stuck in a collective gives up
after the process group's timeout.
"""
from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

#: NVLink multicast stays off in every process this chapter starts.
SAFE_ENV = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
os.environ.update(SAFE_ENV)
if __name__ == "__main__":  # a rank, started by torchrun: first of all, die with it
    from datajourney.toolkit.lifetime import die_with_parent

    die_with_parent()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn as nn  # noqa: E402


# --------------------------------------------------------------------------- models
class SmallViT(nn.Module):
    """A small Vision Transformer from torch's own modules (for machines without torchvision)."""

    def __init__(self, image_size: int = 32, patch: int = 8, dim: int = 64, depth: int = 2, heads: int = 4,
                 classes: int = 10):
        super().__init__()
        if image_size % patch:
            raise ValueError(f"image_size {image_size} is not a multiple of the patch size {patch}")
        n = (image_size // patch) ** 2
        self.patch = nn.Conv2d(3, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, activation="gelu", batch_first=True,
                                           norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        return self.head(self.norm(self.encoder(x))[:, 0])


def build_model(name: str, image_size: int, classes: int) -> nn.Module:
    if name == "vit_l_32":
        from torchvision.models import vit_l_32

        return vit_l_32(weights=None, image_size=image_size, num_classes=classes)
    if name == "small_vit":
        return SmallViT(image_size=image_size, classes=classes)
    raise ValueError(f"unknown model {name!r}")


# --------------------------------------------------------------------------- helpers
def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _max_over_ranks(value: float, device, world: int) -> float:
    if world == 1:
        return value
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


class Emitter:
    """Local rank 0 (one process per node) appends JSON lines; other ranks stay silent."""

    def __init__(self, out: Path, local_rank: int):
        self.path = out / "results.jsonl"
        self.local_rank = local_rank

    def __call__(self, **record):
        if self.local_rank == 0:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")
                f.flush()
                os.fsync(f.fileno())


def _fail_here(cfg: dict, rank: int, step: int) -> None:
    """Test hook: make one rank die or hang at a given step (``fail`` in the job's config)."""
    f = cfg.get("fail")
    if not f or int(f["rank"]) != rank or step != int(f["after_steps"]):
        return
    if f["how"] == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif f["how"] == "hang":
        time.sleep(3600)


def register_hook(model, hook: str, cfg: dict) -> dict:
    """Register a communication hook; returns what was registered (state stated)."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if hook == "none":
        return {}
    if hook == "bf16":
        model.register_comm_hook(None, default_hooks.bf16_compress_hook)
        return {"hook": "bf16_compress_hook"}
    if hook == "fp16":
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
        return {"hook": "fp16_compress_hook"}
    if hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(process_group=None,
                                            matrix_approximation_rank=int(cfg["powersgd_rank"]),
                                            start_powerSGD_iter=int(cfg["powersgd_start_iter"]),
                                            use_error_feedback=True, warm_start=True)
        model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
        return {"hook": "powerSGD_hook", "matrix_approximation_rank": state.matrix_approximation_rank,
                "start_powerSGD_iter": state.start_powerSGD_iter,
                "min_compression_rate": state.min_compression_rate, "use_error_feedback": True,
                "warm_start": True}
    raise ValueError(f"unknown hook {hook!r}")


def kernel_intervals(prof) -> list[tuple[str, float, float]]:
    """(name, start µs, end µs) of every GPU activity (kernels and copies) in a profile, read from the raw Kineto
    events: the same intervals as ``prof.events()`` (checked on an H200 host: all 4,552 of a ViT-L/32 DDP profile,
    within its 1 µs rounding) in a twelfth of the time (0.16 s against 2.1 s a rung, each rung of each job); a
    layout without them is read through ``prof.events()``."""
    out = []
    try:
        for e in prof.profiler.kineto_results.events():
            if e.device_type() == torch.autograd.DeviceType.CUDA:
                a = e.start_ns() / 1e3
                out.append((e.name(), a, a + e.duration_ns() / 1e3))
    except AttributeError:
        out = []
    if not out:
        for e in prof.events():
            if getattr(e, "device_type", None) == torch.autograd.DeviceType.CUDA:
                out.append((e.name, float(e.time_range.start), float(e.time_range.end)))
    return out


def _union(iv: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for a, b in sorted(iv):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _length(iv) -> float:
    return sum(b - a for a, b in iv)


def _intersection(a, b) -> float:
    i = j = 0
    total = 0.0
    while i < len(a) and j < len(b):
        lo, hi = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if hi > lo:
            total += hi - lo
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return total


def gpu_overlap(intervals: list[tuple[str, float, float]], steps: int) -> dict:
    """Per step: NCCL kernel time (union), compute kernel time, and how much of the NCCL time
    ran while a compute kernel was running (ms)."""
    nccl = _union([(a, b) for n, a, b in intervals if "nccl" in n.lower()])
    comp = _union([(a, b) for n, a, b in intervals
                   if "nccl" not in n.lower() and not n.lower().startswith(("memcpy", "memset"))])
    copies = _union([(a, b) for n, a, b in intervals if n.lower().startswith("memcpy")])
    ov = _intersection(nccl, comp)
    per = max(1, steps)
    return {"nccl_ms": _length(nccl) / 1e3 / per, "compute_ms": _length(comp) / 1e3 / per,
            "copy_ms": _length(copies) / 1e3 / per, "overlap_ms": ov / 1e3 / per,
            "exposed_nccl_ms": (_length(nccl) - ov) / 1e3 / per,
            "nccl_kernels": sum(1 for n, _, _ in intervals if "nccl" in n.lower()) / per}


# --------------------------------------------------------------------------- the ladder
def run_rung(rung: dict, cfg: dict, rank: int, world: int, device, emit: Emitter) -> None:
    torch.manual_seed(0)
    with torch.device(device):
        model = build_model(cfg["model"], cfg["image_size"], cfg["classes"])
    record = {"kind": "rung", "rung": rung["name"], "world": world, **{k: rung[k] for k in
              ("ddp", "static_graph", "bucket_view", "hook", "bucket_cap_mb")}}
    sync = bool(rung.get("sync", True))
    if rung.get("part"):  # a rung of the loss's decomposition: kept apart from the ladder
        record.update(part=rung["part"], sync=sync)
    n_params = sum(p.numel() for p in model.parameters())
    record["grad_bytes"] = 4 * n_params
    if rung["ddp"]:
        from torch.nn.parallel import DistributedDataParallel as DDP

        kw = {"device_ids": [device.index]} if device.type == "cuda" else {}
        model = DDP(model, bucket_cap_mb=rung["bucket_cap_mb"], static_graph=rung["static_graph"],
                    gradient_as_bucket_view=rung["bucket_view"], **kw)
        try:
            record["hook_state"] = register_hook(model, rung["hook"], cfg)
        except (TypeError, RuntimeError, ValueError) as e:
            record.update(status="skipped", reason=" ".join(str(e).split()))
            emit(**record)
            return
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    g = torch.Generator(device="cpu").manual_seed(rank)
    batches = [(torch.randn(cfg["batch_size"], 3, cfg["image_size"], cfg["image_size"], generator=g).to(device),
                torch.randint(0, cfg["classes"], (cfg["batch_size"],), generator=g).to(device)) for _ in range(2)]
    cuda = device.type == "cuda"
    step_no = [0]

    def step(marks=None):
        x, y = batches[step_no[0] % 2]
        _fail_here(cfg, rank, cfg.get("_global_step", 0))
        cfg["_global_step"] = cfg.get("_global_step", 0) + 1
        if marks is not None:
            marks.append(_mark(cuda))
        # without sync: the same forward and backward, DDP's all-reduce skipped (DDP.no_sync)
        with contextlib.nullcontext() if sync or not rung["ddp"] else model.no_sync():
            loss = loss_fn(model(x), y)
            if marks is not None:
                marks.append(_mark(cuda))
            opt.zero_grad()
            loss.backward()
        if marks is not None:
            marks.append(_mark(cuda))
        opt.step()
        if marks is not None:
            marks.append(_mark(cuda))
        step_no[0] += 1
        return loss

    # the first rung of a job also pays for cuBLAS/cuDNN/NCCL start-up: it warms up twice as long
    for _ in range(cfg["warmup_steps"] * (2 if cfg.get("_global_step", 0) == 0 else 1)):
        step()
    _sync(device)
    loss_value = None
    windows, phases = [], []
    for _w in range(cfg["windows"]):
        if world > 1:
            dist.barrier()
        _sync(device)
        t0 = time.perf_counter()
        marks_all = []
        for _ in range(cfg["steps"]):
            marks = []
            loss = step(marks)
            marks_all.append(marks)
        _sync(device)
        elapsed = _max_over_ranks(time.perf_counter() - t0, device, world)
        windows.append(cfg["steps"] / elapsed)
        for m in marks_all:
            phases.append(_phase_ms(m, cuda))
        loss_value = float(loss.item())
    record.update(status="ok", steps_per_s=windows, loss=loss_value, steps=cfg["steps"],
                  phases_ms={k: sorted(p[k] for p in phases)[len(phases) // 2] for k in phases[0]})
    if cfg["profile_steps"] > 0 and cuda:
        _profile(step, cfg["profile_steps"], device, record)
    elif cfg["profile_steps"] > 0:
        record["profile_error"] = "no_cuda"  # a code: the page words it
    if rung.get("iso") and rung["ddp"] and sync and world > 1:
        isolated(model, rung, cfg, world, device, emit)
    if world > 1 and rung["ddp"] and sync:
        # DDP keeps the replicas identical: every rank applied the same averaged gradients
        with torch.no_grad():
            total = sum(p.detach().double().sum() for p in model.parameters())
        hi = torch.tensor([float(total)], dtype=torch.float64, device=device)
        lo = hi.clone()
        dist.all_reduce(hi, op=dist.ReduceOp.MAX)
        dist.all_reduce(lo, op=dist.ReduceOp.MIN)
        record["replica_spread"] = float(hi.item() - lo.item())
        dist.barrier()
    emit(**record)
    model = opt = batches = None  # free the GPU memory before the next rung (closures hold the names)
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()


def bucket_bytes(model) -> list[int]:
    """The bytes of each gradient bucket DDP all-reduces, in its order (after its rebuild, where it rebuilt)."""
    d = model._get_ddp_logging_data()
    text = d.get("rebuilt_bucket_sizes") or d.get("bucket_sizes") or ""
    return [int(x) for x in str(text).replace(",", " ").split()]


def isolated(model, rung: dict, cfg: dict, world: int, device, emit: Emitter) -> None:
    """The all-reduces of one training step run alone: one per DDP bucket, of the same sizes, in the same
    order, on the same process group, with no compute beside them; timed in windows of ``steps`` like the
    rung (the slowest rank counts) and, on CUDA, profiled for their NCCL kernel time per step."""
    sizes = bucket_bytes(model)
    record = {"kind": "iso", "rung": rung["name"], "world": world, "buckets": len(sizes), "bucket_bytes": sizes}
    if not sizes:
        emit(**record, status="skipped", reason="no_buckets")
        return
    bufs = [torch.ones(max(1, b // 4), device=device) for b in sizes]

    def one_step():
        works = [dist.all_reduce(b, async_op=True) for b in bufs]
        for w in works:
            w.wait()

    for _ in range(2):
        one_step()
    _sync(device)
    ms = []
    for _w in range(cfg["windows"]):
        dist.barrier()
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(cfg["steps"]):
            one_step()
        _sync(device)
        ms.append(1e3 * _max_over_ranks(time.perf_counter() - t0, device, world) / cfg["steps"])
    record.update(status="ok", step_ms=ms)
    if cfg["profile_steps"] > 0 and device.type == "cuda":
        dist.barrier()
        _profile(one_step, cfg["profile_steps"], device, record)
    emit(**record)
    bufs = None


def _mark(cuda: bool):
    if cuda:
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e
    return time.perf_counter()


def _phase_ms(m, cuda: bool) -> dict:
    if cuda:
        d = [m[i].elapsed_time(m[i + 1]) for i in range(3)]
    else:
        d = [(m[i + 1] - m[i]) * 1e3 for i in range(3)]
    return {"forward": d[0], "backward": d[1], "optimizer": d[2]}


# --------------------------------------------------------------------------- collectives
#: nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md).
def bus_factor(op: str, n: int) -> float:
    return {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n, "reduce_scatter": (n - 1) / n}[op]


def bench(cfg: dict, rank: int, world: int, device, emit: Emitter) -> None:
    for op in cfg["bench_ops"]:
        for size in cfg["bench_sizes"]:
            n = size // 4
            n -= n % world
            try:
                if op == "all_reduce":
                    buf = torch.ones(n, device=device)
                    fn = lambda buf=buf: dist.all_reduce(buf)  # noqa: E731
                elif op == "all_gather":
                    out = torch.empty(n, device=device)
                    inp = torch.ones(n // world, device=device)
                    fn = lambda out=out, inp=inp: dist.all_gather_into_tensor(out, inp)  # noqa: E731
                else:
                    inp = torch.ones(n, device=device)
                    out = torch.empty(n // world, device=device)
                    fn = lambda out=out, inp=inp: dist.reduce_scatter_tensor(out, inp)  # noqa: E731
                for _ in range(2):
                    fn()
                iters = cfg["bench_iters"]
                times = []
                for _ in range(cfg["bench_repeats"]):
                    dist.barrier()
                    _sync(device)
                    t0 = time.perf_counter()
                    for _ in range(iters):
                        fn()
                    _sync(device)
                    times.append(_max_over_ranks((time.perf_counter() - t0) / iters, device, world))
                nbytes = 4 * n
                for t in times:
                    alg = nbytes / t / 1e9
                    emit(kind="bench", op=op, size=nbytes, world=world, time_ms=t * 1e3, algbw_GBps=alg,
                         busbw_GBps=alg * bus_factor(op, world), iters=iters, status="ok")
                if op == "all_reduce":
                    buf = None
                out = inp = fn = None  # the lambdas hold the tensors as defaults
            except (RuntimeError, ValueError, NotImplementedError) as e:
                emit(kind="bench", op=op, size=4 * n, world=world, status="skipped",
                     reason=" ".join(str(e).split())[:300])
                break
        if device.type == "cuda":
            torch.cuda.empty_cache()


# --------------------------------------------------------------------------- main
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="the job's JSON configuration")
    args = ap.parse_args(argv)
    cfg = json.loads(Path(args.config).read_text())
    out = Path(cfg["out"])
    rank, world = int(os.environ.get("RANK", 0)), int(os.environ.get("WORLD_SIZE", 1))
    local = int(os.environ.get("LOCAL_RANK", 0))
    backend = cfg["backend"]
    if backend == "nccl":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
    else:
        device = torch.device("cpu")
        torch.set_num_threads(max(1, int(cfg.get("threads", 1))))
    timeout = timedelta(seconds=float(cfg["pg_timeout_s"]))
    kw = {"device_id": device} if backend == "nccl" else {}
    dist.init_process_group(backend, timeout=timeout, **kw)
    emit = Emitter(out, local)
    deadline = time.monotonic() + float(cfg.get("budget_s", 1e9))
    emit(kind="start", world=world, backend=backend, torch=torch.__version__,
         nccl=".".join(map(str, torch.cuda.nccl.version())) if backend == "nccl" else None,
         device=torch.cuda.get_device_name(device) if backend == "nccl" else "cpu",
         nodes=int(os.environ.get("GROUP_WORLD_SIZE", 1)), node_rank=int(os.environ.get("GROUP_RANK", 0)))
    try:
        if world > 1 and cfg["bench_ops"]:
            bench(cfg, rank, world, device, emit)  # first: a job cut short by its timeout still has it
        for rung in cfg["rungs"]:
            if time.monotonic() > deadline:
                emit(kind="rung", rung=rung["name"], world=world, status="skipped",
                     reason="time_budget_s", **{k: rung[k] for k in (
                         "ddp", "static_graph", "bucket_view", "hook", "bucket_cap_mb")})
                continue
            run_rung(rung, cfg, rank, world, device, emit)
        emit(kind="done")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    return 0


def _profile(step, steps: int, device, record: dict) -> None:
    """``steps`` calls of ``step`` under the CUDA profiler: the kernels' overlap (NCCL beside compute) goes to
    ``record["profile"]``; a profiler failure is recorded, and the timings already taken stand."""
    try:
        from torch.profiler import ProfilerActivity, profile

        _sync(device)
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            for _ in range(steps):
                step()
            _sync(device)
        record["profile"] = gpu_overlap(kernel_intervals(prof), steps)
    except Exception as e:  # noqa: BLE001 - a profiler failure is recorded, the timings stand
        record["profile_error"] = f"{type(e).__name__}: {e}"


if __name__ == "__main__":
    sys.exit(main())
