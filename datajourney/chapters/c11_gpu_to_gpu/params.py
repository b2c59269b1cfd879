"""Chapter 11's parameters: each declared once, with its default, range and help.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` checks every field
against its declaration, and the experiment's ``preflight`` adds the checks that need several fields or
this machine (rung names, GPUs here, the collective buffers in GPU memory)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param

MODELS = ("auto", "vit_l_32", "small_vit")
OPS = ("all_reduce", "all_gather", "reduce_scatter")
HOST_PATH_NAMES = ("p2p_off", "p2p_shm_off")
NODE_PATH_NAMES = ("direct", *HOST_PATH_NAMES)


#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "11_gpu_to_gpu"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 11."""
    model: str = param("auto", '"vit_l_32" (torchvision, random weights), "small_vit" (torch modules only), "auto"',
                       choices=MODELS)
    batch_size: int = param(32, "samples per GPU (per process) and step", minimum=1, maximum=4096)
    image_size: int = param(224, "a multiple of 32 for vit_l_32 (of 8 otherwise)", minimum=8, maximum=1024,
                            unit="pixels")
    warmup_steps: int = param(3, "untimed steps before each rung (twice as many for a job's first rung)",
                              minimum=1, maximum=1000)
    steps: int = param(8, "steps per timed window", minimum=1, maximum=10_000)
    windows: int = param(3, "timed windows per rung (the spread); at least 2", minimum=2, maximum=100)
    profile_steps: int = param(2, "steps under torch.profiler per rung (NCCL kernels, overlap), none if 0",
                               minimum=0, maximum=100)
    gpus: object = param("all", 'GPUs for the N-GPU jobs: "all" or a number', kind="int", minimum=1, maximum=64,
                         also=("all",))
    cpu_procs: int = param(2, "processes per job without CUDA (gloo)", minimum=1, maximum=64)
    ladder: list = param(["default", "ddp", "static_graph", "bucket_view", "bf16", "powersgd"],
                         'rungs on N GPUs ("name@MiB" sets the bucket; "default": DDP with PyTorch\'s defaults, the '
                         "baseline of the chapter's answer)", kind="str_list")
    bucket_cap_mb: int = param(2000, 'the naive start: one bucket for all gradients (every rung but "default")',
                               minimum=1, maximum=100_000, unit="MiB")
    bucket_sweep: list = param([1, 25, 100, 500],
                               "bucket_cap_mb values tried with static_graph + gradient_as_bucket_view (may be empty)",
                               kind="int_list", unit="MiB")
    host_paths: list = param(["p2p_off", "p2p_shm_off"], "forced host paths (NCCL, two GPUs or more)",
                             kind="str_list", choices=HOST_PATH_NAMES)
    host_ladder: list = param(["ddp", "bf16", "powersgd", "bf16@25"], "rungs re-run on each forced host path",
                              kind="str_list")
    scale_worlds: object = param("auto", 'process counts of the scaling jobs below N: "auto" (powers of two) or a list',
                                 kind="int_list", also=("auto",))
    scale_ladder: list = param(["ddp", "bucket_view", "bf16", "bucket_view@1", "bucket_view@25"],
                               "rungs of the scaling jobs", kind="str_list")
    scale_host_paths: list = param(["p2p_off"], "forced host paths also run at each scaling count (ddp rung, "
                                   "all-reduce)", kind="str_list", choices=HOST_PATH_NAMES)
    explain_rung: str = param("default", "the DDP rung whose per-GPU loss is taken apart at each GPU count (DDP's "
                              "defaults: what a user runs): on one GPU, on N with and without gradient sync "
                              "(DDP.no_sync), and its all-reduces run alone",
                              kind="str")
    nccl_channels: list = param([], "NCCL channel counts tried with explain_rung on N GPUs, one launch each with "
                                "NCCL_MIN_NCHANNELS and NCCL_MAX_NCHANNELS set to it, NCCL only, may be empty",
                                kind="int_list", unit="channels")
    powersgd_rank: int = param(1, "PowerSGD matrix_approximation_rank", minimum=1, maximum=1024)
    powersgd_start_iter: int = param(2, "PowerSGD starts after this many steps (from 2 to warmup_steps)",
                                     minimum=2, maximum=10_000)
    bench_sizes: list = param([1048576, 16777216, 268435456, 1073741824], "collective sizes",
                              minimum=4096, maximum=1 << 34, unit="bytes")
    bench_ops: list = param(["all_reduce", "all_gather", "reduce_scatter"], "collectives timed alone",
                            kind="str_list", choices=OPS)
    bench_iters: int = param(5, "collectives per timed repeat", minimum=1, maximum=10_000)
    bench_repeats: int = param(3, "timed repeats per size", minimum=1, maximum=100)
    job_timeout_s: float = param(240, "a torchrun job is killed after this many seconds", kind="float",
                                 minimum=10, maximum=86_400, unit="s")
    pg_timeout_s: float = param(60, "a rank stuck in a collective gives up after this many seconds", kind="float",
                                minimum=5, maximum=86_400, unit="s")
    time_budget_s: float = param(900, "forced-host-path and scaling jobs start only while this budget lasts",
                                 kind="float", minimum=30, maximum=86_400, unit="s")
    nnodes: int = param(1, "nodes the N-process jobs span (the chapter runs on each, torchrun's rendezvous joins "
                        "them)", minimum=1, maximum=4096)
    node_rank: int = param(0, "this node's number, from 0 to one less than nnodes", minimum=0,
                             maximum=4095)
    rdzv_endpoint: object = param(None, 'with nnodes > 1: "HOST:PORT" of node 0, the same on every node; left '
                                  "unset on a single node", kind="str", optional=True)
    node_path: str = param("direct", 'NCCL across nodes: "direct" (its own choice) or a forced host path '
                           '("p2p_shm_off": sockets only)', choices=NODE_PATH_NAMES)
