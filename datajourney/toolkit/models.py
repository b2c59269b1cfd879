"""Models and training steps the chapters feed: ResNet-50 (torchvision) or a small CNN for CPU runs,
a timed training loop that marks where each step waits, and a step replayed from CUDA graphs.

Example::

    import torch

    from datajourney.toolkit.models import make_model, train_steps

    model = make_model("small_cnn", classes=10)          # "resnet50" needs torchvision
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    batches = iter([(torch.randn(8, 3, 64, 64), torch.randint(0, 10, (8,)))] * 3)
    steps = train_steps(batches, model, opt, steps=3, device="cpu")
    print(steps.filter(like="_ms").round(2))             # where each step spent its time, by phase
"""
from __future__ import annotations

import copy
import time
import warnings

import pandas as pd
import torch
from torch import nn
from torch.profiler import record_function

from datajourney.toolkit import images

__all__ = ["make_model", "train_steps", "handover_ms", "GraphedStep", "graphed_step"]


def make_model(name: str, classes: int) -> nn.Module:
    """``resnet50`` (torchvision, random weights, no download) or ``small_cnn`` (for CPU runs)."""
    if name == "resnet50":
        from torchvision.models import resnet50

        return resnet50(weights=None, num_classes=classes)
    return nn.Sequential(
        nn.Conv2d(3, 16, 3, stride=2, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, classes))


class _Marks:
    """Phase boundaries: CUDA events on a GPU, host clock on a CPU. Unlike :func:`timing.cuda_ms`
    (one function between two events), consecutive phases share their boundary events and the
    step synchronises once, at the end, so that timing adds no synchronisation between phases."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.points = []

    def mark(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self.points.append(e)
        else:
            self.points.append(time.perf_counter())

    def durations_ms(self) -> list[float]:
        if self.cuda:
            self.points[-1].synchronize()
            return [a.elapsed_time(b) for a, b in zip(self.points, self.points[1:], strict=False)]
        return [(b - a) * 1e3 for a, b in zip(self.points, self.points[1:], strict=False)]


def train_steps(batches, model: nn.Module, opt, *, steps: int, device: str, on_gpu_batch: bool = False,
                profiler=None, first_step: int = 0, graph: GraphedStep | None = None) -> pd.DataFrame:
    """Run ``steps`` training steps from the iterator ``batches``; one row per step with each
    phase's ms, the host-clock start and end of the step (``t_start``/``t_end``, seconds) and,
    when the batches are :class:`images.Batch` es, the ms of each loader stage for the batch.
    A uint8 batch is normalised on the device inside H2D_TRANSFER. With ``graph`` (a
    :class:`GraphedStep`; ``model`` and ``opt`` are then unused) each phase replays its graph and
    H2D_TRANSFER is the copy into the graph's static input; with ``on_gpu_batch`` as well the graph
    runs on the batch put there beforehand (:meth:`GraphedStep.fill`), and nothing is copied."""
    cuda = device == "cuda"
    loss_fn = nn.CrossEntropyLoss()
    rows = []
    for step in range(first_step, first_step + steps):
        marks = _Marks(cuda)
        t0 = time.perf_counter()
        with record_function("DATALOADER_WAIT"):
            batch = next(batches)
        t1 = time.perf_counter()
        x, y = batch
        marks.mark()
        with record_function("H2D_TRANSFER"):
            if graph is not None:
                if not on_gpu_batch:
                    graph.load(x, y)
            elif not on_gpu_batch:
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                if x.dtype == torch.uint8:
                    x = images.normalise_on_device(x)
        marks.mark()
        with record_function("FORWARD"):
            loss = graph.forward() if graph is not None else loss_fn(model(x), y)
        marks.mark()
        with record_function("BACKWARD"):
            if graph is not None:
                graph.backward()
            else:
                loss.backward()
        marks.mark()
        with record_function("OPTIMIZER"):
            if graph is not None:
                graph.step()
            else:
                opt.step()
                opt.zero_grad(set_to_none=True)
        marks.mark()
        h2d, fwd, bwd, optim = marks.durations_ms()
        t2 = time.perf_counter()
        row = dict(step=step, DATALOADER_WAIT=(t1 - t0) * 1e3, H2D_TRANSFER=h2d, FORWARD=fwd, BACKWARD=bwd,
                   OPTIMIZER=optim, wall_ms=(t2 - t0) * 1e3, images=int(x.shape[0]), t_start=t0, t_end=t2)
        st = getattr(batch, "stages", None)
        if st is not None:
            row.update({f"{k}_ms": st[k] for k in images.SAMPLE_STAGES + images.BATCH_STAGES},
                       handover_ms=handover_ms(st, t0, t1), worker=st["worker"])
        rows.append(row)
        if profiler is not None:
            profiler.step()
    df = pd.DataFrame(rows)
    df["compute_ms"] = df["FORWARD"] + df["BACKWARD"] + df["OPTIMIZER"]
    return df


def handover_ms(stages: dict, t_asked: float, t_got: float) -> float:
    """The part of a data wait spent handing a finished batch to the loop: from the later of
    "collated" and "asked for" to "received", minus the pinning that fell inside that span.
    In a worker: the queue, the passing of shared memory and the rebuild of the tensors. A batch
    that sat ready in the queue before the loop asked for it costs only the time to take it."""
    start = max(stages["t_collated"], t_asked)
    span = max(0.0, t_got - start)
    if stages.get("t_pinned") is not None and stages["pin"] > 0:
        p1 = stages["t_pinned"]
        p0 = p1 - stages["pin"] / 1e3
        span -= max(0.0, min(p1, t_got) - max(p0, start))
    return max(0.0, span) * 1e3


def _device_batch(batch_size: int, out_size: int, classes: int, device: str):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(batch_size, 3, out_size, out_size, generator=g).to(device)
    y = torch.randint(0, classes, (batch_size,), generator=g).to(device)
    return x, y


class GraphedStep:
    """The training step of a copy of ``model`` (with its own SGD optimizer) captured as CUDA graphs
    and replayed: FORWARD (with the loss), BACKWARD and OPTIMIZER are one graph each, so a step is
    a handful of launches instead of one per kernel, and the main thread's place on the CPU no
    longer paces the GPU. The graphs read their batch from static buffers on the device:
    :meth:`load` copies a (pinned) host batch into them and, for a uint8 batch, replays a small
    graph that normalises it on the device; the step times that as H2D, like the eager step's copy.
    :meth:`fill` puts a batch already on the device there once, for the graphed ceiling.

    The copy is warmed up eagerly on a side stream first (cuDNN's choices, the momentum buffers),
    then captured with its gradients unset, so that the backward graph writes them afresh at every
    replay; the graphs share one memory pool and are replayed in the order they were captured."""

    def __init__(self, model: nn.Module, lr: float, *, batch_size: int, out_size: int, classes: int,
                 uint8: bool = True, warmup: int = 3):
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA graphs need a GPU")
        self.model = copy.deepcopy(model)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=0.9)
        self.shape = (batch_size, 3, out_size, out_size)
        x, y = _device_batch(batch_size, out_size, classes, "cuda")
        self.x_in = (x.mul(40).add(128).clamp(0, 255).to(torch.uint8) if uint8 else x.clone())
        self.y = y.clone()
        loss_fn = nn.CrossEntropyLoss()

        def prepare():
            return images.normalise_on_device(self.x_in) if uint8 else self.x_in

        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            for _ in range(warmup):
                loss_fn(self.model(prepare()), self.y).backward()
                self.opt.step()
                self.opt.zero_grad(set_to_none=True)
        torch.cuda.current_stream().wait_stream(side)
        if uint8:
            prepare()  # its constants reach the device before the capture (no copy may happen during one)
        torch.cuda.synchronize()
        pool = torch.cuda.graph_pool_handle()
        self.g_in = None
        if uint8:
            self.g_in = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.g_in, pool=pool):
                self.x = prepare()
        else:
            self.x = self.x_in
        self.g_fwd, self.g_bwd, self.g_opt = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
        with warnings.catch_warnings():  # autograd's notes on the capture's streams: expected here
            warnings.simplefilter("ignore", UserWarning)
            with torch.cuda.graph(self.g_fwd, pool=pool):
                self.loss = loss_fn(self.model(self.x), self.y)
            with torch.cuda.graph(self.g_bwd, pool=pool):
                self.loss.backward()
            with torch.cuda.graph(self.g_opt, pool=pool):
                self.opt.step()
        torch.cuda.synchronize()

    def load(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Copy a host batch into the static input (asynchronously from pinned memory) and, for a
        uint8 batch, normalise it there."""
        if tuple(x.shape) != self.shape or x.dtype != self.x_in.dtype:
            raise ValueError(f"the graph was captured for {self.x_in.dtype} batches of shape {self.shape}, not "
                             f"{x.dtype} {tuple(x.shape)}")
        self.x_in.copy_(x, non_blocking=True)
        self.y.copy_(y, non_blocking=True)
        if self.g_in is not None:
            self.g_in.replay()

    def fill(self, x: torch.Tensor, y: torch.Tensor) -> None:
        """Put a float batch already in device memory where the forward graph reads it (no copy per step)."""
        self.x.copy_(x)
        self.y.copy_(y)

    def forward(self) -> torch.Tensor:
        self.g_fwd.replay()
        return self.loss

    def backward(self) -> None:
        self.g_bwd.replay()

    def step(self) -> None:
        self.g_opt.replay()


def graphed_step(model: nn.Module, lr: float, *, batch_size: int, out_size: int, classes: int,
                 device: str) -> tuple[GraphedStep | None, str | None]:
    """A :class:`GraphedStep` for uint8 batches (it also runs float batches put there with
    :meth:`GraphedStep.fill`), or None with the reason: no GPU here, or the capture failed."""
    if device != "cuda":
        return None, "CUDA graphs need a GPU; this machine has none"
    try:
        return GraphedStep(model, lr, batch_size=batch_size, out_size=out_size, classes=classes), None
    except Exception as e:  # noqa: BLE001 - a failed capture is reported, the eager runs go on
        return None, f"CUDA graph capture failed here ({type(e).__name__}: {e})"
