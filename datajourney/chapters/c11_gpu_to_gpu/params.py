"""Chapter 11's parameters: the one place their defaults live.

The notebook's parameters cell, the profiles in ``profiles.yaml`` and ``run()`` start from
:class:`Params`; a test fails when the cell and these defaults differ. Ranges are checked by
the experiment's ``preflight`` before any work."""
from __future__ import annotations

from dataclasses import dataclass, field

from datajourney.core.params import ChapterParams


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 11; the docstring of each field says what it sets."""
    model: object = "auto"
    """"vit_l_32" (torchvision, random weights), "small_vit" (torch modules only), "auto" """
    batch_size: int = 32
    """samples per GPU (per process) and step"""
    image_size: int = 224
    """a multiple of 32 for vit_l_32"""
    warmup_steps: int = 3
    """untimed steps before each rung (twice as many for a job's first rung)"""
    steps: int = 8
    """steps per timed window"""
    windows: int = 3
    """timed windows per rung (the spread); at least 2"""
    profile_steps: int = 2
    """steps under torch.profiler per rung (NCCL kernels, overlap), none if 0"""
    gpus: str = "all"
    """GPUs for the N-GPU jobs: "all" or a number"""
    cpu_procs: int = 2
    """processes per job without CUDA (gloo)"""
    ladder: list[str] = field(default_factory=lambda: ["ddp", "static_graph", "bucket_view", "bf16", "powersgd"])
    """rungs on N GPUs ("name@MiB" sets the bucket)"""
    bucket_cap_mb: int = 2000
    """the naive start: one bucket for all gradients"""
    bucket_sweep: list[int] = field(default_factory=lambda: [1, 25, 100, 500])
    """bucket_cap_mb values tried with static_graph + gradient_as_bucket_view"""
    host_paths: list[str] = field(default_factory=lambda: ["p2p_off", "p2p_shm_off"])
    """forced host paths (NCCL, two GPUs or more)"""
    host_ladder: list[str] = field(default_factory=lambda: ["ddp", "bf16", "powersgd", "bf16@25"])
    """rungs re-run on each forced host path"""
    scale_worlds: object = "auto"
    """process counts of the scaling jobs below N: "auto" (powers of two) or a list"""
    scale_ladder: list[str] = field(
        default_factory=lambda: ["ddp", "bucket_view", "bf16", "bucket_view@1", "bucket_view@25"]
    )
    """rungs of the scaling jobs"""
    scale_host_paths: list[str] = field(default_factory=lambda: ["p2p_off"])
    """forced host paths also run at each scaling count (ddp rung, all-reduce)"""
    powersgd_rank: int = 1
    """PowerSGD matrix_approximation_rank"""
    powersgd_start_iter: int = 2
    """PowerSGD starts after this many steps (at most warmup_steps)"""
    bench_sizes: list[int] = field(default_factory=lambda: [1048576, 16777216, 268435456, 1073741824])
    """collective sizes in bytes"""
    bench_ops: list[str] = field(default_factory=lambda: ["all_reduce", "all_gather", "reduce_scatter"])
    bench_iters: int = 5
    """collectives per timed repeat"""
    bench_repeats: int = 3
    """timed repeats per size"""
    job_timeout_s: int = 240
    """a torchrun job is killed after this many seconds"""
    pg_timeout_s: int = 60
    """a rank stuck in a collective gives up after this many seconds"""
    time_budget_s: int = 900
    """forced-host-path and scaling jobs start only while this budget lasts"""
    nnodes: int = 1
    """nodes the N-process jobs span (the chapter runs on each, torchrun's rendezvous joins them)"""
    node_rank: int = 0
    """this node's number, 0 to nnodes - 1"""
    rdzv_endpoint: object = None
    """with nnodes > 1: "HOST:PORT" of node 0, the same on every node; None: one node on its own"""
    node_path: str = "direct"
    """NCCL across nodes: "direct" (its own choice) or a forced host path ("p2p_shm_off": sockets only)"""
