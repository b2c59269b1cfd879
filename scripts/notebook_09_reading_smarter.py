"""Write notebooks/09_reading_smarter.ipynb (cells stay thin: calls into datajourney, charts, computed text)."""
from pathlib import Path

import nbformat as nbf

ROOT = Path(__file__).resolve().parents[1]
cells = []


def md(text):
    cells.append(nbf.v4.new_markdown_cell(text.strip()))


def code(text, tags=("hide-input",)):
    c = nbf.v4.new_code_cell(text.strip())
    c.metadata["tags"] = list(tags)
    cells.append(c)


md("""
# 9. Reading smarter

Chapter 2 showed that one large sequential read beats many small random ones. This chapter
takes the usual advice for feeding GPUs from storage one piece at a time and measures each
piece on this machine: how big a request should be and how many should be in flight, what
readahead does, how to read small records at random, and how a file gets into **GPU memory**
(not only into user space), with and without GPUDirect Storage.

Every read starts cold (the page cache purged and the purge verified), unless a section says
warm. Beside what the program asks for, the chapter records what the **device** saw, from
its own counters in `/proc/diskstats`: how many requests it completed, how large they were on
average, how many were in flight, and how busy it was. GB/s and MB/s are 10⁹ and 10⁶ bytes
per second.
""")

code("""
# Parameters (papermill). Sizes in bytes.
file_size = 268435456        # one file of random bytes read by every experiment (a verified data set)
request_sizes = [4096, 65536, 1048576, 4194304]  # experiment 1: pread sizes
threads = [1, 4, 16]         # experiment 1: threads, each with one request in flight (the asked queue depth)
modes = ["buffered", "O_DIRECT"]
runs = 2                     # every measurement is repeated, cold, in a shuffled order
cell_seconds = 0.2           # experiment 1: time per (size, threads, mode) cell
cell_max_bytes = 67108864    # ... or this many bytes, whichever comes first
random_reads = 5000          # experiment 3: 4 KiB reads at random offsets
pool_threads = [4, 16]       # experiment 3: thread-pool sizes
random_seconds = 0.5         # experiments 2-3: time cap per random-read measurement
readahead_sysfs = "off"      # experiment 2: "auto" (root: change read_ahead_kb, always restored), "on", "off"
readahead_kb = [128, 1024]   # experiment 2: values to set (the device's own value is added)
fadvise = ["none", "SEQUENTIAL", "RANDOM", "WILLNEED"]  # experiment 2: per-file hints (no root needed)
seq_chunk = 131072           # experiment 2: sequential read size
seq_bytes = 134217728        # experiment 2: bytes per sequential read
gpu = "auto"                 # experiment 4: "auto" (when CUDA is there) or "off"
gpu_chunk = 8388608          # experiment 4: staging-buffer size
kvikio_threads = [4]         # experiment 4: kvikio thread-pool sizes
kvikio_task = 4194304        # experiment 4: kvikio task size
latency_reads = 1000         # experiment 6: QD1 4 KiB O_DIRECT reads per pass (0: skip)
purge_method = "auto"        # "auto", "drop_caches" (root) or "fadvise"
seed = 0
data_dir = None              # where the data set lives (default: $DATAJOURNEY_DATA_DIR or ~/.cache/datajourney)
run_dir = None               # where results go (the runner sets it)
reference_host = None        # committed reference to compare with
is_reference_run = False
replay = None                # a finished run directory: render its results instead of measuring again
""", tags=("parameters", "remove-cell"))

code("""
from datajourney import reading
from datajourney.book import plotting, report, results
from datajourney.book.pages import reading as page
from datajourney.book.stats import summarise
plotting.setup()
res = results.replay(reading.CHAPTER, replay, run_dir) or reading.run(
    file_size=file_size, request_sizes=request_sizes, threads=threads, modes=modes, runs=runs,
    cell_seconds=cell_seconds, cell_max_bytes=cell_max_bytes, random_reads=random_reads, pool_threads=pool_threads,
    random_seconds=random_seconds, readahead_sysfs=readahead_sysfs, readahead_kb=readahead_kb, fadvise=fadvise,
    seq_chunk=seq_chunk, seq_bytes=seq_bytes, gpu=gpu, gpu_chunk=gpu_chunk, kvikio_threads=kvikio_threads,
    kvikio_task=kvikio_task, latency_reads=latency_reads, purge_method=purge_method, seed=seed, data_dir=data_dir,
    run_dir=run_dir)
ref = report.reference(reading.CHAPTER, res, reference_host, is_reference_run)
report.parameters(res)
src = res if page.has_gpu(res) else ref
here = "" if src is res else " — reference run"
""", tags=("remove-stderr", "hide-input"))

code("""
report.key_results(page.findings, res, ref, is_reference_run=is_reference_run)
if not page.has_gpu(res):
    report.say(page.no_gpu_text(res, ref))
""")

md("""
## 1. Request size and queue depth

One large file is read with `pread` at random offsets aligned to the request size. Each
thread keeps one request in flight, so the number of threads is the queue depth the
program asks for. Buffered reads go through the page cache (and its readahead); `O_DIRECT`
reads bypass it, with page-aligned buffers, so the device sees the requests as they were
made, unless the kernel splits them at the queue's largest request (`max_sectors_kb`) or
the block layer merges neighbours.

The device's side comes from `/proc/diskstats` before and after each cell: sectors read
divided by requests completed is the average request size it **saw**; the time its reads
spent in flight divided by the wall time is the average number in flight (the queue depth
it saw); the time it had any request in flight is its utilisation. The counters belong to
the whole device, so another process's I/O during a cell would show too.
""")

code("""
g = res.table("grid")
if len(g) and g["MBps"].notna().any():
    s = summarise(g.dropna(subset=["MBps"]), ["mode", "size", "threads"], "MBps")
    fig = plotting.lines_facets(s, x="size", color="threads", facet="mode", log_x=True, log_y=True,
        title="Cold random pread: bandwidth by request size and threads", xaxis="request size (log scale)",
        yaxis="MB/s (point: mean of runs, log scale)", unit="MB/s", shared_y=True)
    plotting.size_ticks(fig, s["size"]).show()
    seen = g.dropna(subset=["dev_request_bytes"])
    if len(seen):
        s2 = summarise(seen, ["mode", "size", "threads"], "dev_request_bytes")
        fig = plotting.lines_facets(s2, x="size", color="threads", facet="mode", log_x=True, log_y=True,
            title="Asked vs seen: the average request the device completed", xaxis="asked request size (log scale)",
            yaxis="request size the device saw (bytes, log scale)", unit="bytes", shared_y=True)
        for col in range(1, s2["mode"].nunique() + 1):
            fig.add_scatter(x=sorted(s2["size"].unique()), y=sorted(s2["size"].unique()), mode="lines",
                            line=dict(dash="dot", color="#888888"), name="seen = asked", showlegend=col == 1,
                            hoverinfo="skip", row=1, col=col)
        plotting.size_ticks(fig, s2["size"]).show()
    report.table(page.asked_seen_table(res), "Asked vs seen, per cell (mean of runs)")
report.findings([page.finding_asked_vs_seen(res)])
""")

md("""
## 2. Readahead

When the kernel sees a file read in order, it reads ahead: it fetches the next pages before
they are asked for, in a window that grows up to the device's `read_ahead_kb`. A larger
window means fewer, larger requests for sequential reads; for random reads, whatever is read
ahead and never used is wasted device time. Readahead can be changed for the whole device
(`/sys/block/<device>/queue/read_ahead_kb`, root only; this chapter restores the original
value after every setting, also on failure, and records each change), or per file with
`posix_fadvise`: `SEQUENTIAL` doubles the window, `RANDOM` turns readahead off, `WILLNEED`
starts reading the whole range at once.
""")

code("""
report.say(page.readahead_note(res))
report.table(page.readahead_table(res), "Cold buffered reads under each readahead setting (mean of runs)")
report.findings([page.finding_readahead(res)])
""")

md("""
## 3. Random small reads

Many small records at random offsets (a shuffled index into a large file) are a latency
problem: one thread waits for each read before it issues the next, so the device sees one
request at a time. A pool of threads issuing `pread` keeps several in flight. A memory map
reads the file through page faults instead: each missing page stops the thread, and the
kernel reads around the faulting page (its read-around window is the readahead setting)
unless the mapping is marked `MADV_RANDOM`. All variants read the same offsets, cold.
""")

code("""
r = res.table("random")
if len(r):
    r = r.assign(reader=[m if m != "pread, thread pool" else f"pread, {t} threads" for m, t in zip(r["mode"], r["threads"])],
                 family=[m.split(",")[0].split(" +")[0] for m in r["mode"]])
    s = summarise(r, ["reader", "family"], "IOPS")
    plotting.bars_facets(s, x="reader", color="family", facet=None, title="Cold random 4 KiB reads",
                         xaxis="reader", yaxis="reads per second (IOPS, mean of runs)", unit="IOPS").show()
    report.table(page.random_table(res), "Cold random 4 KiB reads: program's and device's view")
report.findings([page.finding_parallel(res)])
report.say(f"<small>io_uring: {res.metadata.get('io_uring')}.</small>")
""")

md("""
## 4. From a file to GPU memory

Five ways to get a large file into GPU memory, each timed from the first read to the last
byte on the GPU, cold, and checked byte for byte against the file:

* **pageable + copy**: `read` a chunk into ordinary memory, copy it to the GPU (`.cuda()`),
  then read the next: the disk and the bus take turns, and the driver stages every pageable
  copy through its own pinned buffer with the CPU.
* **pinned, double-buffered**: two pinned buffers; while one is copied asynchronously on a
  CUDA stream, the next chunk is read into the other, which is refilled only after its copy
  has finished (an event): the disk and the bus work at the same time.
* **mmap + pinned**: the file is memory-mapped and each chunk copied out of the mapping
  (page faults read it) into a pinned buffer, double-buffered as above.
* **kvikio** (cuFile): `CuFile.read` into the GPU buffer with kvikio's own thread pool.
  With GPUDirect Storage the device writes into GPU memory by DMA; in compatibility mode
  kvikio reads into host bounce buffers and copies, like the pinned path with more threads.
* **preloaded**: the file already in the page cache, already in pinned RAM (only the copy
  is left), or already in GPU memory (a device-to-device copy).

Each is put against two ceilings measured in the same run: the device's cold sequential read
of the same file (chapter 2's `dd`), and a pinned host-to-device copy (chapter 6's
independent ceiling). The slower of the two is what a path can reach at best. CPU time per GB
is the process's user plus system time (every thread) over the transfer.
""")

code("""
if src is not None and page.has_gpu(src):
    report.say(page.ceilings_text(src))
    plotting.bars_facets(page.gpu_chart_data(src), x="path", color="cache", facet=None,
                         title="File to GPU memory" + here, xaxis="path",
                         yaxis="GB/s (mean of runs)", unit="GB/s").show()
    report.table(page.gpu_table(src), "Every path to GPU memory" + here)
    for e in page.gpu_errors(src):
        report.say(f"⚠ failed: {e}")
    report.findings([page.finding_to_gpu(src)])
    report.three_columns(reading.CHAPTER, res, ref, page.key_metrics, is_reference_run, reference_host,
                         caption="Published figure · reference run · this run (GB = 10⁹ bytes)")
""")

md("""
## 5. GPUDirect Storage or compatibility mode

GPUDirect Storage needs the `nvidia-fs` kernel module, a file system and device that
support it, and cuFile configured to use it. Without them cuFile (or kvikio before it)
falls back to a compatibility mode that reads through host memory. Both give correct data;
only one is GDS. The chapter asks kvikio which path it takes and labels every number by the
answer; a compatibility-mode number is never shown as GDS. The published figures come from
NVIDIA's `gdsio` with four workers and 1 MiB requests; this chapter's pinned path uses one
reader and larger chunks, so the comparison is of paths, not of tools.
""")

code("""
gsrc = src if src is not None and (src.metadata.get("gds") or {}).get("kvikio") else res
report.table(page.gds_table(gsrc), "What kvikio reports" + ("" if gsrc is res else " — reference run"))
report.findings([page.finding_gds(gsrc)])
""")

md("""
## 6. The storage under the data

What the kernel says about the device that holds the data directory, and what each fact
means for the numbers above. On a virtual machine the disk is an emulated device backed by
storage on the host; the host may cache what the guest reads, so a read that is cold for the
guest's page cache can still be served from the host's memory. The check: single 4 KiB
`O_DIRECT` reads, one at a time, against how fast flash can answer at all.
""")

code("""
report.table(page.storage_table(res), "Storage facts of the data directory (this machine)")
report.say(page.storage_notes(res))
if "latency_cdf" in res.tables and len(res.table("latency_cdf")):
    plotting.latency_distribution(res.table("latency_cdf"), floor_us=res.metadata["nand_read_floor_us"],
        title="Single 4 KiB reads, one at a time", floor_label="fastest flash read").show()
report.findings([page.finding_virtual_disk(res)])
""")

md("""
## What this means for a training job
""")

code("""
report.say(page.takeaways(src if src is not None else res))
""")

md("""
* Read large files in large requests, and keep several requests in flight; check with
  `/proc/diskstats` (or `iostat -x`) that the device sees the request size and depth you
  meant to ask for.
* For random access, turn readahead off for that file (`POSIX_FADV_RANDOM`, or
  `MADV_RANDOM` for a memory map), or the device reads data nobody asked for.
* To get a file onto the GPU, overlap reading and copying with pinned buffers; a GDS
  library helps only where GDS is really active, so check its mode before counting on it.
""")

nb = nbf.v4.new_notebook()
nb["cells"] = cells
nb.metadata["kernelspec"] = {"display_name": "Python 3", "language": "python", "name": "python3"}
nbf.write(nb, ROOT / "notebooks" / "09_reading_smarter.ipynb")
print("wrote notebooks/09_reading_smarter.ipynb")
