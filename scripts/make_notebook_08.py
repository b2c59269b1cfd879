"""Write notebooks/08_threads_processes_gil.ipynb (cells: Markdown mechanisms, thin code cells)."""
from pathlib import Path

import nbformat as nbf

ROOT = Path(__file__).resolve().parents[1]
cells = []


def md(text):
    cells.append(nbf.v4.new_markdown_cell(text.strip()))


def code(text, tags=("hide-input",)):
    cells.append(nbf.v4.new_code_cell(text.strip(), metadata={"tags": list(tags)}))


md("""
# 8. Threads, processes and the GIL

A loader turns files into batches: read the bytes, decode the JPEG, resize, stack, copy
to the GPU. PyTorch's `DataLoader` does this work in **worker processes**, because
CPython's global interpreter lock (GIL) lets only one thread run Python bytecode at a
time. Processes pay for that isolation: every worker starts an interpreter (or forks
one), receives a copy of the `Dataset` object, and hands each finished batch back
through shared memory and a queue.

Threads share one address space, so a batch needs no copy between them and a worker
costs almost nothing to start. They scale only as far as the work releases the GIL:
C code that drops the lock while it decodes (libjpeg inside Pillow, FFmpeg inside SPDL's
`spdl.io`) runs in parallel, while the Python glue between those calls runs one thread at
a time. SPDL (Scalable and Performant Data Loading) builds pipelines out of such stages,
each stage with its own thread concurrency.

This chapter measures, on this machine, the primitives (a thread pool against a process
pool on the same decode work), what each operation costs as threads contend, whole
loaders from cold files to the GPU with their CPU time and memory summed over every
process, the start-up of DataLoader workers, the cost of moving a batch between
processes, and finally which feed keeps a bf16 ResNet-50 busy.
""")

code("""
# Parameters (papermill).
n_images = 4096            # photo-like JPEGs in the data set
width = 500                # pixels of each stored JPEG
height = 375
jpeg_quality = 92
classes = 10
out_size = 224             # decoded images are resized to out_size²
batch_size = 64            # batch of the end-to-end loaders and the model
primitive_batch = 32       # batch of the primitive scaling tasks
primitive_images = 256     # images per point of the primitive sweep
concurrency = "auto"       # threads/processes of the primitive sweep; "auto": 1, 2, 4, … cores, 2 × cores
decoders = "auto"          # any of pillow, spdl, torchvision; "auto": those this machine can run
executors = ["thread", "process"]
repeats = 2                # runs of every point (interleaved)
loaders = ["dataloader", "spdl", "threadpool"]
loader_decoder = "pillow"  # the decoder every end-to-end loader uses
dataloader_workers = "auto"   # DataLoader worker sweep; "auto": 1, 2, 4, … up to the cores (at most 16)
thread_concurrency = "auto"   # thread sweep of the SPDL pipeline and the thread pool
loader_batches = 20        # timed batches per loader run (after the first and the warm ones)
warm_batches = 2
prefetch_factor = 2        # DataLoader batches in flight per worker
start_methods = ["fork", "forkserver", "spawn"]
startup_workers = [1, 4]   # DataLoader workers of the start-up sweep
startup_paths = [0, 100000]   # file paths held by the Dataset object of the start-up sweep
ipc_batch_sizes = [32, 128]   # batches passed through one worker process
ipc_workers = [0, 1]
free_threaded = "auto"     # true: require a free-threaded interpreter; "auto": detect
moonshot = "auto"          # model-fed runs (ResNet-50 bf16, channels_last); "auto": when a GPU is present
model = "resnet50"
model_steps = 30
model_warmup = 5
read_threads = 8           # threads reading bytes for GPU decoding
purge_method = "auto"      # how files are evicted from the page cache before each loader
seed = 0
run_dir = None             # where results go (the runner sets it)
reference_host = None      # committed reference to compare with
is_reference_run = False
replay = None              # a finished run directory: render its results instead of measuring again
""", tags=("parameters", "remove-cell"))

code("""
from datajourney import gil
from datajourney.book import plotting, report, results
from datajourney.book.pages import gil as page
plotting.setup()
res = results.replay(gil.CHAPTER, replay, run_dir) or gil.run(
    n_images=n_images, width=width, height=height, jpeg_quality=jpeg_quality, classes=classes, out_size=out_size,
    batch_size=batch_size, primitive_batch=primitive_batch, primitive_images=primitive_images,
    concurrency=concurrency, decoders=decoders, executors=executors, repeats=repeats, loaders=loaders,
    loader_decoder=loader_decoder, dataloader_workers=dataloader_workers, thread_concurrency=thread_concurrency,
    loader_batches=loader_batches, warm_batches=warm_batches, prefetch_factor=prefetch_factor,
    start_methods=start_methods, startup_workers=startup_workers, startup_paths=startup_paths,
    ipc_batch_sizes=ipc_batch_sizes, ipc_workers=ipc_workers, free_threaded=free_threaded, moonshot=moonshot,
    model=model, model_steps=model_steps, model_warmup=model_warmup, read_threads=read_threads,
    purge_method=purge_method, seed=seed, run_dir=run_dir)
ref = report.reference(gil.CHAPTER, res, reference_host, is_reference_run)
report.parameters(res)
gpu = res if res.metadata["device"] == "cuda" else ref
""", tags=("remove-stderr", "hide-input"))

code("""
report.key_results(page.findings, res, ref, is_reference_run=is_reference_run)
if res.metadata["device"] != "cuda" and ref is not None:
    report.say("This machine has no CUDA GPU. The key results of the reference run, labelled as such:")
    report.key_results(page.findings, ref, None, is_reference_run=True)
if page.errors_text(res):
    report.say(page.errors_text(res))
""")

md("""
## The images

The images stand in for ImageNet photographs: a smooth colour field whose spectrum falls
off like that of natural images, a few hard-edged objects and light sensor noise, stored
as JPEGs of about the size of an ImageNet training image. What matters for this chapter
is that decoding and resizing one costs about what a photograph costs, so the
proportions between CPU work, Python glue and copying are realistic.
""")

code("""
report.say(page.calibration_text(res))
report.say("Decoders on this machine:\\n\\n" + page.decoder_notes(res))
""")

md("""
## 1. The primitives: a thread pool against a process pool

Each task reads, decodes and resizes one batch of images and stacks them into one array,
submitted to `concurrent.futures.ThreadPoolExecutor` or `ProcessPoolExecutor` (started
with fork). Before the clock starts, every worker runs one warm task, so the time to
start the pool, its processes and their imports is kept apart (it is in the table) and
the throughput is the work alone. A process pool pickles each finished batch back to the
parent; a thread pool just returns a reference. The page cache is warm here: this part
is about the CPU.
""")

code("""
plotting.lines_facets(page.primitive_lines(res), x="concurrency", color="executor", facet="decoder",
    title="Decode + resize + batch: images/s by concurrency", xaxis="threads or processes (log scale)",
    yaxis="images/s (point: mean of runs)", unit="img/s", log_x=True).show()
report.findings([page.finding_primitives(res, d) for d in res.metadata["decoders_run"]])
report.table(page.primitive_table(res), "Primitive scaling: images/s (runs' mean, min, max) and the pool's start-up time")
""")

md("""
## 2. GIL contention, operation by operation

The same tasks timed each operation: read (open and read the file), decode, resize (for
`spdl.io`, decode and resize are one FFmpeg filter graph and count as decode), and the
stacking of the batch (per image). An operation's time is wall-clock time inside the
task, so it includes any time the thread waited for the GIL in the middle of it. The
process pool is the control: the same operation at the same concurrency, but with one
interpreter per worker and so no lock to wait for. Growth common to both comes from
sharing cores, caches and memory bandwidth; growth only in threads comes from the lock.
""")

code("""
for d in res.metadata["decoders_run"]:
    plotting.lines_facets(page.op_lines(res, d), x="concurrency", color="executor", facet="op",
        title=f"{d}: time per image of each operation", xaxis="threads or processes (log scale)",
        yaxis="ms per image (point: mean of runs)", unit="ms", log_x=True).show()
report.findings([page.finding_contention(res, d) for d in res.metadata["decoders_run"]])
""")

md("""
## 3. End to end: DataLoader, SPDL pipeline, thread pool

Three loaders read the same cold files in the same shuffled order and hand over batches
of uint8 images, pinned, and copied to the GPU without blocking:

* **DataLoader**: `num_workers` processes (fork), each building whole batches;
  `pin_memory=True` pins them in a thread of the main process.
* **SPDL pipeline**: `PipelineBuilder` with a source of file names, a decode stage run
  by a pool of threads, an aggregation into batches, a collate stage, and SPDL's
  `transfer_tensor`, which pins and copies each batch on its own CUDA stream.
* **Thread pool**: a `ThreadPoolExecutor` in which each task builds and pins a whole
  batch, a few batches in flight per thread.

Each run starts with the page cache emptied of its files. Time to first batch counts
from building the loader. Then as many batches as the loader keeps in flight are skipped,
so that the timed window measures what the loader produces rather than a queue it filled
during the warm-up, and the next batches are timed. As a check, a window counts only if
the CPU time per image spent in it reaches a set share of what one image costs to decode
and resize on one core; a window below it cannot have produced all the images it
counted, and is left out (the share and the windows left out are printed below the
table).
CPU time is user plus system time summed over the main process (all its threads) and
every child process; memory is the proportional set size (PSS) summed over the same
processes, minus the main process's PSS before the loader started. PSS charges a page
shared by several processes in equal parts to each, so the sum counts it once; the
resident set size (RSS) would count it once per process. The unique set size (USS) of a
forked worker drops the pages it shares with its parent, so USS sums undercount.
""")

code("""
plotting.lines_with_band(page.loader_lines(res), x="concurrency", color="loader",
    title="Loaders from cold files to the GPU: images/s", xaxis="workers or threads (log scale)",
    yaxis="images/s (point: mean of runs)", unit="img/s").show()
report.table(page.loader_table(res), "Loaders (means of the runs): throughput, first batch, CPU per image, memory")
report.say(page.cold_note(res))
for note in [page.steady_note(res), page.spdl_note(res)]:
    if note:
        report.say(note)
for note in page.loader_spread(res):
    report.say(note)
report.three_columns(gil.CHAPTER, res, ref, page.key_metrics, is_reference_run, reference_host,
                     caption="Published figure · reference run · this run")
""")

md("""
The published figures come from a far larger host, on the whole ImageNet training set,
with SPDL decoding through `spdl.io`; read the comparison as one of direction and
mechanism. The published memory saving is mostly the DataLoader's copy of a file list
of a million entries in every worker, which the next section isolates.

## Time to first batch: workers × start method × Dataset size

Before a DataLoader yields its first batch, every worker must exist and hold the
`Dataset`. With **fork**, a worker is a copy of the parent and inherits the `Dataset`
without copying it (pages are shared until written; reading Python objects writes their
reference counts, so shared pages are copied bit by bit later). With **spawn** and
**forkserver**, a worker starts a fresh interpreter, imports torch, and receives the
`Dataset` pickled: a large file list is serialised once per worker. Here the `Dataset`
holds only a list of file paths and its items are tiny, so the time is start-up alone.
""")

code("""
st = page.startup_lines(res)
plotting.lines_facets(st, x="workers", color="start_method", facet="dataset",
    title="DataLoader: time to the first batch", xaxis="workers", yaxis="seconds (one run)", unit="s").show()
report.say(page.startup_note(res))
""")

md("""
## 4. The cost of moving a batch between processes

A worker collates its batch into shared memory; the main process receives a handle
through a queue and maps the same memory. Here the items are already decoded, so the
loader does nothing but collate and hand over, once in the main process (no workers)
and once through one worker. The difference is the price of crossing processes, which a
thread pipeline never pays. It is also the mechanism by which one worker can be slower
than none on light work (chapters 3 and 7): the handover can cost more than the work it
moves.
""")

code("""
report.say(page.ipc_text(res))
""")

md("""
## 5. Free-threaded Python

CPython 3.13 and later can be built without the GIL (`python3.13t`). On such an
interpreter every thread runs Python code in parallel, and the process pool's reason to
exist, escaping the lock, goes away. The chapter detects the interpreter with
`sys._is_gil_enabled()`. On a free-threaded interpreter, experiments 1 and 2 run
unchanged and show what remains without the lock. To run it, build or install a
free-threaded Python with numpy, Pillow and `spdl` (they publish free-threaded wheels)
and run this notebook with it; torch on a free-threaded interpreter needs its CUDA
wheels.
""")

code("""
report.say(page.free_threading_text(res))
""")

md("""
## 6. The moonshot: keeping a bf16 ResNet-50 busy

The model is chapter 7's ResNet-50 with chapter 7's training step (forward, backward,
SGD), run in bf16 autocast with the model in channels_last memory format, so that each
step is shorter and the model asks for images faster. Its ceiling is the same step fed by one batch kept in
GPU memory. Three kinds of feed read cold files: the best DataLoader and the best thread
pipelines of the sweep above, and **GPU decoding**: threads only read the bytes, and a
decode thread calls `torchvision.io.decode_jpeg` on a whole batch with `device="cuda"`
(nvJPEG), resizes on the GPU on its own CUDA stream and hands the batch over with an
event the training stream waits on.
""")

code("""
if gpu is not None and not page.model_summary(gpu).empty:
    label = "" if gpu is res else " — reference run"
    plotting.bars_facets(page.model_bars(gpu), x="label", color="series", facet=None,
        title="ResNet-50 (bf16, channels_last) fed from cold files" + label, xaxis="feed",
        yaxis="images/s (mean of runs)", unit="img/s").add_hline(
        y=gpu.metadata["ceiling"]["images_per_s"], line=dict(dash="dot"), annotation_text="ceiling").show()
    report.table(page.model_table(gpu), "Model-fed runs" + label)
    if gpu is not res:
        report.say("This machine has no CUDA GPU: the chart and table above are the reference run's.")
report.findings([page.finding_moonshot(res)])
if gpu is not None and page.gpu_share_note(gpu):
    report.say(page.gpu_share_note(gpu) + ("" if gpu is res else " (reference run)"))
""")

md("""
## What this means for a training job
""")

code("""
report.say(page.takeaways(res))
""")

md("""
* A thread pipeline pays off when the heavy stages release the GIL and the Python glue
  between them is thin; if a stage holds the lock (pure-Python transforms), give it few
  threads or move it into a process.
* Keep the `Dataset` object small (a compact array of offsets, not a list of strings) or
  use fork, so that starting workers does not copy it into each of them.
* When the CPU cannot decode fast enough for the GPU, decode on the GPU and let the CPU
  only read bytes.
""")

nb = nbf.v4.new_notebook(cells=cells, metadata={"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                "language": "python"}})
nbf.write(nb, ROOT / "notebooks" / "08_threads_processes_gil.ipynb")
print("written")
