"""Write notebooks/10_mmap_vs_read.ipynb (chapter 10) from the cells below."""
import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from datajourney import REPO_ROOT

MD, CODE = new_markdown_cell, new_code_cell


def code(src, tags=("hide-input",)):
    c = CODE(src)
    c.metadata["tags"] = list(tags)
    return c


cells = [
    MD("""# 10. Tracing the I/O: mmap vs read()

Language-model training reads tokens from an *indexed data set*: one `.bin` file holding every
document's token ids back to back, and one `.idx` file saying where each document starts and how
long it is (Megatron-LM's `MMIDIDX` layout). A training sample is a window of
`seq_length + 1` tokens cut from the documents laid end to end in a shuffled order, so one sample
usually spans several documents and needs one read per document piece.

There are two ways to get those pieces. **mmap** maps `.bin` into the process's address space
and slices it: the data arrive by page faults, which the kernel serves, and no read call is made.
**read()** opens the file, seeks, reads and closes it for every piece: every step is a system call.
This chapter builds such a data set (checked readable by Megatron's own reader in the tests),
loads samples both ways over a sweep of sequence length and batch size, cold and warm, and looks
at the same runs through three views: what a POSIX tracer (DFTracer, preloaded) records, what the
kernel counts (page faults, read calls, bytes from storage), and what the application's own spans
measure. It also measures what each view costs, and what writing a checkpoint costs.

Cold here means the `.bin` file is evicted from the page cache with `posix_fadvise(DONTNEED)`
(and the eviction checked with `mincore`), not the whole machine's cache: dropping every cache
would also evict the Python and PyTorch libraries, and the kernel's counters of a cold run would
then count those being read back in, not the data set. The `.idx` stays mapped, as Megatron keeps
it, and so stays in memory."""),
    code("""# Parameters (papermill). Sizes in bytes.
dataset_bytes = 268435456        # token data set (.bin), uint16 tokens
seq_lengths = [512, 1024, 2048]  # tokens per sample (each sample reads seq_length + 1)
batch_sizes = [32, 64, 128]      # samples per step (the global batch of one process)
steps = 3                        # batches timed per configuration (the first includes starting the loader)
runs = 2                         # repetitions of the whole sweep (different samples each run)
cache_states = ["cold", "warm"]  # cold: page cache purged and checked before each configuration
workers = [0, 2, 4]              # DataLoader num_workers sweep, at one point:
workers_seq_length = 2048
workers_batch_size = 64
posix_view = "auto"              # DFTracer's LD_PRELOAD view: "auto" (when it loads), "on", "off"
overhead_rounds = 3              # paired rounds of tracing off / POSIX / app / both
overhead_seq_length = 2048
overhead_batch_size = 64
checkpoint_sizes = [67108864, 268435456]  # model states saved with torch.save and DCP
checkpoint_runs = 2
posix_checkpoint_bytes = 16777216  # checkpoint written after every point under the POSIX view
purge_method = "fadvise"         # "fadvise" (the data set's .bin only), "drop_caches" (root) or "auto"
seed = 0
data_dir = None                  # where the data set lives (default: $DATAJOURNEY_DATA_DIR)
run_dir = None                   # where results go (the runner sets it)
reference_host = None            # committed reference to compare
is_reference_run = False
replay = None                    # a finished run directory to render instead of measuring""",
         tags=("parameters", "remove-cell")),
    code("""from datajourney import tracing
from datajourney.book import plotting, report, results
from datajourney.book.pages import tracing as page
plotting.setup()
res = results.replay(tracing.CHAPTER, replay, run_dir) or tracing.run(
    dataset_bytes=dataset_bytes, seq_lengths=seq_lengths, batch_sizes=batch_sizes, steps=steps, runs=runs,
    cache_states=cache_states, workers=workers, workers_seq_length=workers_seq_length,
    workers_batch_size=workers_batch_size, posix_view=posix_view, overhead_rounds=overhead_rounds,
    overhead_seq_length=overhead_seq_length, overhead_batch_size=overhead_batch_size,
    checkpoint_sizes=checkpoint_sizes, checkpoint_runs=checkpoint_runs,
    posix_checkpoint_bytes=posix_checkpoint_bytes, purge_method=purge_method, seed=seed, data_dir=data_dir,
    run_dir=run_dir, progress=False)
ref = report.reference(tracing.CHAPTER, res, reference_host, is_reference_run)
report.parameters(res)""", tags=("remove-stderr", "hide-input")),
    code("""report.key_results(page.findings, res, ref, is_reference_run=is_reference_run)
report.say(page.data_note(res))"""),
    MD("""## What a POSIX tracer sees

DFTracer's preload library wraps the C library's file calls (`open`, `lseek`, `read`, `write`,
`close`, `mmap`, ...) of every process it is loaded into, DataLoader workers included, and
records each call on a file under the traced directory. Under read() every document piece is
a handful of such calls; under mmap the only calls are the ones that set up the mapping, and
the page faults that move the data are invisible to it. Counts are per sweep point (the data
phase only), warm, with no worker; the log axis is needed because the two modes differ by
orders of magnitude."""),
    code("""if page.has_posix(res):
    c = page.posix_counts(res)
    c = c.assign(seq=c["seq"].astype(int), batch=c["batch"].astype(int), mean=c["posix_events"].clip(lower=0.5),
                 min=c["posix_events"].clip(lower=0.5), max=c["posix_events"].clip(lower=0.5), n=1)
    plotting.lines_facets(c, x="batch", color="mode", facet="seq", title="POSIX events per sweep point (warm, no worker)",
        xaxis="batch size", yaxis="events (log; 0 drawn at 0.5)", unit="events",
        log_y=True, shared_y=True, names=page.MODE_NAMES, band_label="one run").show()
    report.table(page.posix_table(res), "POSIX view per sweep point: events, opens, reads, MB read, mean read size (KB), time in read calls (s)")
    report.say(page.calls_note(res))
else:
    report.say(page.finding_posix(res).text)"""),
    MD("""## Three views of the same runs

The kernel keeps its own books for every process: minor page faults (a page already in memory
mapped in), major page faults (a page read from storage first), read calls and bytes asked
for (`/proc/<pid>/io`: `syscr`, `rchar`) and bytes that came from storage (`read_bytes`); the
chapter sums them over the main process and every worker. `/proc/diskstats` adds what the
whole device read. The application spans are timed inside `__getitem__` (index lookup: which
documents a sample spans; read; sample construction) and in the collate function, in every
process, and summed. The table puts the three views of the largest sweep point side by side."""),
    code("""report.table(page.views_table(res), "Largest sweep point: application spans, kernel counters and POSIX view (means over runs)")
report.say(page.spans_note(res))"""),
    MD("""## Loader time over the sweep

Loader time is the time from creating the DataLoader iterator to receiving the last of the
timed batches, starting the loader included; it is the sum over the steps of the time the
training loop would wait for data with nothing to overlap it. Heatmaps as in the source: one
panel per mode, mean over runs."""),
    code("""for cache in [c for c in ("cold", "warm") if c in set(res.table("sweep")["cache"])]:
    plotting.heatmap_pair(page.heatmap_table(res, "loader_s", cache), value="loader_s", facet="mode", scale=1e3,
        unit="ms", names=page.MODE_NAMES, title=f"Loader time, {cache} (ms, mean over runs, no worker)").show()
bw = page.per_sample_bandwidth(res)
bw = bw.assign(mode=bw["mode"].map(page.MODE_NAMES), batch=bw["batch"].astype(str))
plotting.lines_facets(bw[bw["cache"] == ("warm" if "warm" in set(bw["cache"]) else "cold")], x="seq", color="mode",
    facet="batch", title="Per-sample bandwidth inside __getitem__ (bytes of the sample ÷ time in lookup, read and construction)",
    xaxis="sequence length", yaxis="MB/s (mean; bars: min–max over runs)", unit="MB/s").show()"""),
    code("""report.three_columns(tracing.CHAPTER, res, ref, page.key_metrics, is_reference_run, reference_host,
                     caption="Published figure · reference run · this run (MB = 10⁶ bytes)")"""),
    MD("""The published figures come from a whole training job on a parallel file system; this
chapter times a few steps of the loader alone on a local disk. Counts and seconds therefore
differ in scale; the ratios between the modes, and how they move along the sweep, are what
compare. The source counted every event of the job, initialisation, metadata and checkpoint
writes included, so its mmap count is mostly not data at all; this chapter counts the data
phase of each sweep point alone, where mmap leaves only the calls that set up the map, which
makes the read() ÷ mmap ratio far larger than the source's."""),
    MD("""## The theoretical check

A sample of `seq_length + 1` uint16 tokens holds a known number of bytes; multiplied by the
samples per second the loader delivered, it gives the bandwidth the loader *needed*. The kernel's
count of bytes read from storage gives what it *moved*. Cold rows only: warm, nothing comes
from storage."""),
    code("""report.say(page.theory_note(res))
if "cold" in set(res.table("sweep")["cache"]):
    report.table(page.theory_table(res), "Bytes per sample × samples/s against bytes from storage (cold, means over runs)")"""),
    MD("""## Workers

The source did not vary the number of DataLoader workers. Workers read in parallel, which
hides the latency of cold reads, but each starts by forking the main process; the loader time
here includes that start."""),
    code("""wt = page.workers_table(res).assign(mode=lambda d: d["mode"].map(page.MODE_NAMES), workers=lambda d: d["workers"].astype(str))
plotting.lines_facets(wt, x="workers", color="mode", facet="cache", title="Loader time over num_workers",
    xaxis="num_workers", yaxis="loader time (ms, mean; bars: min–max over runs)", unit="ms").show()
report.say(page.workers_note(res))"""),
    MD("""## What tracing costs

Each view runs the same loader point in its own fresh process: tracing off, the POSIX tracer
preloaded, the application spans on, and both; the order of the views rotates from round to
round, and each view is compared with tracing off of the same round."""),
    code("""if "overhead" in res.tables:
    ot = page.overhead_table(res).assign(mode=lambda d: d["mode"].map(page.MODE_NAMES))
    report.table(ot, "Tracer overhead: loader time of each view ÷ tracing off − 1, in % (mean, min, max over paired rounds)")
    report.findings([page.finding_overhead(res)])
    note = page.overhead_note(res)
    if note:
        report.say(note)"""),
    MD("""## Checkpoint writes

The reverse journey: a model state written to the same disk. `torch.save` is followed by an
`fsync` of the file (it does not sync by itself); `torch.distributed.checkpoint` writes its files
with syncing on. The blocked time is how long the training loop could not continue: all of it
for `torch.save` and `save`; for `async_save`, the time to stage the state in host memory, after
which the writing goes on in the background. On a GPU host the state lives on the GPU."""),
    code("""if "checkpoint" in res.tables:
    cs = page.checkpoint_summary(res)
    report.table(cs, "Checkpoint writes: GB/s to synced files (mean, min, max), caller blocked (s), until synced (s)")
    report.findings([page.finding_checkpoint(res)])
note = page.checkpoint_posix_note(res)
if note:
    report.say(note)
note = page.checkpoint_invariance_note(res)
if note:
    report.say(note)"""),
]

nb = new_notebook(cells=cells, metadata={"kernelspec": {"display_name": "Python 3", "language": "python",
                                                         "name": "python3"},
                                         "language_info": {"name": "python"}})
nbformat.write(nb, REPO_ROOT / "notebooks" / "10_mmap_vs_read.ipynb")
