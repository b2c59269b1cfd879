"""Write notebooks/11_gpu_to_gpu.ipynb (cells stay thin: calls into datajourney)."""
from pathlib import Path

import nbformat as nbf

ROOT = Path(__file__).resolve().parents[1]
md = nbf.v4.new_markdown_cell


def code(src, tags=("hide-input",)):
    c = nbf.v4.new_code_cell(src)
    c.metadata["tags"] = list(tags)
    return c


cells = [
    md("""# 11. GPU to GPU

With data-parallel training every GPU holds a copy of the model, computes gradients on its own
share of the batch, and then all GPUs average their gradients before the optimizer step. That
average is an **all-reduce** of every gradient, every step: for a model of a few hundred million
parameters in FP32, more than a gigabyte crosses between GPUs per step. PyTorch's
`DistributedDataParallel` (DDP) groups gradients into **buckets** and starts the all-reduce of a
bucket as soon as its gradients are ready, so communication can run while the rest of the
backward pass computes. How long it takes depends on the path between the GPUs: NVLink, PCIe
peer-to-peer, a bounce through host memory, or a network socket. NCCL, the library that does
the work on NVIDIA GPUs, picks the path itself and says which in its debug log.

This chapter runs one `torchrun` entry point (`python -m datajourney.ddp_worker`) for any number
of GPUs and climbs a ladder: one GPU without DDP, DDP on one GPU, DDP on all GPUs, then
`static_graph`, `gradient_as_bucket_view`, bf16 compression, PowerSGD and a sweep of
`bucket_cap_mb`. It then forces NCCL off the direct path to emulate a host whose GPUs only
talk through host memory, and measures the collectives themselves from 1 MiB up.
Steps/s are per GPU (each GPU processes its own batch of `batch_size` samples); GB/s = 10⁹ bytes/s."""),
    code('''# Parameters (papermill).
model = "auto"              # "vit_l_32" (torchvision, random weights), "small_vit" (torch modules only), "auto"
batch_size = 32             # samples per GPU (per process) and step
image_size = 224            # a multiple of 32 for vit_l_32
warmup_steps = 3            # untimed steps before each rung (twice as many for a job's first rung)
steps = 8                   # steps per timed window
windows = 3                 # timed windows per rung (the spread); at least 2
profile_steps = 2           # steps under torch.profiler per rung (NCCL kernels, overlap), none if 0
gpus = "all"                # GPUs for the N-GPU jobs: "all" or a number
cpu_procs = 2               # processes per job without CUDA (gloo)
ladder = ["ddp", "static_graph", "bucket_view", "bf16", "powersgd"]  # rungs on N GPUs ("name@MiB" sets the bucket)
bucket_cap_mb = 2000        # the naive start: one bucket for all gradients
bucket_sweep = [1, 25, 100, 500]  # bucket_cap_mb values tried with static_graph + gradient_as_bucket_view
host_paths = ["p2p_off", "p2p_shm_off"]  # forced host paths (NCCL, two GPUs or more)
host_ladder = ["ddp", "bf16", "powersgd", "bf16@25"]  # rungs re-run on each forced host path
powersgd_rank = 1           # PowerSGD matrix_approximation_rank
powersgd_start_iter = 2     # PowerSGD starts after this many steps (at most warmup_steps)
bench_sizes = [1048576, 16777216, 268435456, 1073741824]  # collective sizes in bytes
bench_ops = ["all_reduce", "all_gather", "reduce_scatter"]
bench_iters = 5             # collectives per timed repeat
bench_repeats = 3           # timed repeats per size
job_timeout_s = 240         # a torchrun job is killed after this many seconds
pg_timeout_s = 60           # a rank stuck in a collective gives up after this many seconds
time_budget_s = 900         # forced-host-path jobs start only while this budget lasts
run_dir = None              # where results go (the runner sets it)
reference_host = None       # committed reference to compare with
is_reference_run = False
replay = None               # a finished run directory: render its results instead of measuring again
''', tags=("parameters", "remove-cell")),
    code('''from datajourney import ddp
from datajourney.book import plotting, report, results
from datajourney.book.pages import ddp as page
plotting.setup()
res = results.replay(ddp.CHAPTER, replay, run_dir) or ddp.run(
    model=model, batch_size=batch_size, image_size=image_size, warmup_steps=warmup_steps, steps=steps,
    windows=windows, profile_steps=profile_steps, gpus=gpus, cpu_procs=cpu_procs, ladder=ladder,
    bucket_cap_mb=bucket_cap_mb, bucket_sweep=bucket_sweep, host_paths=host_paths, host_ladder=host_ladder,
    powersgd_rank=powersgd_rank, powersgd_start_iter=powersgd_start_iter, bench_sizes=bench_sizes,
    bench_ops=bench_ops, bench_iters=bench_iters, bench_repeats=bench_repeats, job_timeout_s=job_timeout_s,
    pg_timeout_s=pg_timeout_s, time_budget_s=time_budget_s, run_dir=run_dir)
ref = report.reference(ddp.CHAPTER, res, reference_host, is_reference_run)
report.parameters(res)
gpu = res if res.metadata["cuda"] else ref''', tags=("remove-stderr", "hide-input")),
    code('''report.key_results(page.findings, res, ref, is_reference_run=is_reference_run)
if not res.metadata["cuda"]:
    report.say(page.no_gpu_text(res, ref))
    if ref is not None:
        report.key_results(page.findings, ref, None, is_reference_run=True)'''),
    md("""## The jobs

Each box of the ladder runs inside a `torchrun` job started as a subprocess; the job's rank 0
appends one line of JSON per finished measurement to a result file, which this page reads. A job
runs under a wall-clock timeout (its whole process group is killed past it), `torchrun` stops all
ranks as soon as one fails, and a rank blocked in a collective gives up after the process group's
timeout, so a broken rank fails the chapter instead of hanging it. Every job runs with
`NCCL_NVLS_ENABLE=0` (NVLink multicast off).

The entry point also runs on several nodes: start it on every node with torchrun's own
rendezvous arguments (`--nnodes`, `--node-rank` or `--rdzv-backend=c10d --rdzv-endpoint=HOST:PORT`)
and the same `--config` file; each node needs the configuration's output folder, and global
rank 0 writes the results. This page launches single-node jobs only."""),
    code('''report.say(page.scope_text(res, ref))
report.table(page.jobs_table(res), "torchrun jobs of this run")
if page.failed_jobs_text(res):
    report.say(page.failed_jobs_text(res))'''),
    md("""## Topology and transport

`nvidia-smi topo -m` prints how each pair of GPUs is connected: `NV#` is a bonded set of NVLink
links, the other codes are PCIe paths of increasing length (`PIX`, `PXB`, `PHB`, `NODE`, `SYS`).
What NCCL actually uses is a separate question, answered by its own log: with `NCCL_DEBUG=INFO`
each channel connection prints a line ending in `via P2P/...` (direct GPU-to-GPU reads or writes,
over NVLink or PCIe), `via SHM/...` (through a shared-memory buffer in host RAM) or `via NET/...`
(through the network stack, here sockets)."""),
    code('''if gpu is not None and not page.topology(gpu).empty:
    plotting.topology_matrix(page.topology(gpu), legend=page.TOPO_LEGEND,
        title="nvidia-smi topo -m" + ("" if gpu is res else " — reference run")).show()
    report.say(page.topology_text(gpu))
else:
    report.say(page.topology_text(res))
src = res if not res.table("transports").empty else gpu
if src is not None and not src.table("transports").empty:
    report.table(page.transports_table(src), "NCCL's channel connections by path and transport (parsed from "
                 "NCCL_DEBUG=INFO)" + ("" if src is res else " — reference run"))'''),
    md("""## The ladder

Each rung builds the model afresh (the same seed), wraps it as the rung says, warms up, and then
times several windows of steps with the host clock around synchronised steps; the slowest rank's
time counts. Per step, CUDA events on the compute stream split the time into forward, backward
and optimizer. DDP makes the end of the backward pass wait until the last bucket's all-reduce has
finished, so waiting for communication that did not overlap shows up as a longer backward phase.

The rungs: `static_graph=True` tells DDP the set of parameters that get gradients never changes,
which lets it skip some per-step bookkeeping. `gradient_as_bucket_view=True` makes each
parameter's `.grad` a view into DDP's bucket, so gradients are not copied into the bucket and back.
The bf16 and fp16 hooks halve the bytes on the wire by casting each bucket before the all-reduce
and back after it (bf16 needs NCCL). PowerSGD replaces each gradient matrix by a low-rank
approximation and all-reduces the two small factors, with error feedback; it is lossy and needs
tuning in real training."""),
    code('''src = res
report.table(page.ladder_table(src), "Steps/s per GPU (mean, min and max over timed windows) and per-step phases "
             "(median, CUDA events; host clock on the CPU)")
lad = page.ladder_summary(src)
if len(lad):
    plotting.bars_facets(lad, x="step", color="label", facet=None, unit="steps/s",
        title="Steps/s per GPU or process (bar: mean over windows; error bar: one std)",
        xaxis="rung", yaxis="steps/s per GPU (mean; error bar: std over windows)").show()
report.say(page.spread_notes(src))
for psrc in [s for s in ([res] if res.metadata["cuda"] else [res, gpu]) if s is not None]:
    ph = page.phases(psrc)
    if len(ph):
        plotting.ddp_phase_bars(ph, title="Where a step's time goes" + ("" if psrc is res else " — reference run")
                                ).show()
report.say(page.powersgd_state(src))
if gpu is not None and gpu is not res:
    report.table(page.ladder_table(gpu), "The ladder on the reference run (labelled)")'''),
    code('''report.three_columns(ddp.CHAPTER, res, ref, page.key_metrics, is_reference_run, reference_host,
                     caption="Published figure · reference run · this run")'''),
    md("""### Bucket size

With one bucket the all-reduce can only start after the whole backward pass; with many small
buckets it starts early and overlaps the remaining backward computation, but every bucket is a
separate collective with its own latency."""),
    code('''report.say(page.sweep_text(res))
if gpu is not None and gpu is not res:
    report.say("On the reference run: " + page.sweep_text(gpu))'''),
    md("""## What the profiler sees

For each rung a few steps run under `torch.profiler`. The NCCL kernels' time per step is the
union of their intervals on the GPU; "beside compute" is the part of it during which a compute
kernel of the same GPU was also running, which is the overlap DDP's buckets are meant to create;
the rest is exposed communication."""),
    code('''if gpu is not None:
    pt = page.profile_table(gpu)
    if len(pt):
        report.table(pt, "Per step, from torch.profiler (ms)" + ("" if gpu is res else " — reference run"))
    report.say(page.profile_note(gpu))
else:
    report.say(page.profile_note(res))'''),
    md("""## Collective bandwidth

The same collectives NCCL runs for DDP, timed alone: warm-up calls, then several repeats of a few
calls each between a barrier and a synchronisation; the slowest rank's time counts. Following
nccl-tests, the **algorithm bandwidth** is bytes ÷ time and the **bus bandwidth** scales it by
the share of the data each GPU has to send: `2(n−1)/n` for all-reduce, `(n−1)/n` for all-gather and
reduce-scatter, so that bus bandwidth can be compared with a link's speed whatever the number
of GPUs. From the gradient bytes of a rung, DDP's approximate bucket sizes and the all-reduce
bandwidth measured at those sizes, the chapter predicts each uncompressed rung's all-reduce time
and puts it beside the NCCL kernel time the profiler saw."""),
    code('''shown = [res] + ([gpu] if gpu is not None and gpu is not res else [])
for bsrc in [s for s in shown if "bench" in s.tables]:
    bl = page.bench_long(bsrc)
    label = "" if bsrc is res else " — reference run"
    plotting.size_ticks(plotting.lines_with_band(bl, x="size", color="series", unit="GB/s", centre="busbw_GBps",
        low="busbw_min", high="busbw_max", band_label="min–max over repeats", x_format=plotting.size_label,
        xaxis="message size (bytes, log scale)", yaxis="bus bandwidth (GB/s; point: median)",
        title="Collective bus bandwidth by size" + label), bl["size"]).show()
    report.table(bl.drop(columns=["series"]), "Collectives: median time, algorithm and bus bandwidth" + label)
    if len(page.prediction_table(bsrc)):
        report.table(page.prediction_table(bsrc), "Predicted all-reduce time vs profiled NCCL time per step" + label)'''),
    md("""## The host path is an emulation

`NCCL_P2P_DISABLE=1` stops NCCL from letting one GPU read or write another's memory directly, so
it falls back to copying through a buffer in host memory (`SHM`); adding `NCCL_SHM_DISABLE=1`
pushes it further, onto sockets (`NET/Socket`). On an NVLink host this routes traffic through
the host's memory system and PCIe, which resembles a host whose GPUs sit on PCIe without peer
access, but it is **not** such a host: the GPUs, their PCIe links, the CPU and its memory are
those of this machine, and a real PCIe-only host (or one with PCIe peer-to-peer) can be faster or
slower. What the emulation shows is how the same training step behaves when the path between
GPUs is slow, and which options then help.

## What this means for a training job

* On one GPU, DDP has nothing to exchange and only adds work: train without it.
* Look at the path before tuning: `nvidia-smi topo -m` and NCCL's `via` lines tell whether
  gradients go over NVLink, PCIe peer-to-peer, host memory or a socket.
* Compression trades GPU work (casting, low-rank factorisation) for fewer bytes on the wire;
  it can only pay where the bytes are the bottleneck, so measure it on your own path, and
  check the accuracy cost of a lossy scheme on the real training curve. Several buckets let
  the all-reduce start while the backward pass is still computing, at the price of more
  collectives.
* Set a process-group timeout and let `torchrun` stop a job whose rank died."""),
]

nb = nbf.v4.new_notebook(cells=cells)
nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
nbf.write(nb, ROOT / "notebooks" / "11_gpu_to_gpu.ipynb")
print("written")
