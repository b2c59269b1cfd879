"""Published figures: the only numbers in the project that are typed in.

Every figure is quoted exactly as its source prints it (value, standard deviation where
given, unit), with the setting it was measured in and the source's hardware. Chapters
never restate these numbers in prose; they show them through :func:`table` and the
three-column comparison, so they live in this one place.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

#: The sources and the hardware their figures were measured on.
SOURCES = {
    "S1": ("“The Data Journey” report: AMD EPYC 7R13 (16 cores), 124 GiB, local NVMe, NVIDIA L40S on "
           "PCIe 4.0 x16, Linux 6.8, PyTorch 2.10"),
    # -- S2: chapter 8 (SPDL paper) --
    "S2": ("Hira et al., “Scalable and Performant Data Loading” (SPDL): AWS p4d.24xlarge, 96 CPU cores, one of its "
           "8 NVIDIA A100 GPUs used, ImageNet, Python 3.12, PyTorch 2.5, CUDA 12.1, Pillow 10.2.0"),
    # -- S3: chapter 9 (GPU-based storage I/O chapter) --
    "S3": ("a book chapter on GPU-based storage I/O: NVIDIA gdsio, one GPU (device 0), 4 workers, 1 MiB reads of a "
           "10 GiB file on a local file system; the host's storage, CPU and GPU are not named"),
    # -- S4: chapter 10 (tracing Megatron-LM I/O with DFTracer) --
    "S4": ("seminar report “Tracing IO in Large Language Model Pretraining on HPC” (Göttingen, 2026): Megatron-LM, "
           "LLaMA-3-8B on 4× NVIDIA H100 80 GB, Intel Xeon Platinum 8468, 240 GB RAM, data on a Ceph SSD "
           "parallel file system, DFTracer"),
    # -- S5: chapter 11 (GPU-to-GPU data transfer in DDP) --
    "S5": ("“Optimizing Data Transfer in Distributed AI/ML Training Workloads” (nsys series, part 3): "
           "Amazon EC2 g6e.48xlarge, 8 NVIDIA L40S on PCIe (NODE/SYS links, NCCL via SHM), and p4d.24xlarge, "
           "8 NVIDIA A100 with NVLink (NCCL P2P/CUMEM); PyTorch 2.8, Ubuntu 24.04 Deep Learning AMI"),
}


@dataclass(frozen=True)
class Figure:
    """One published number, as printed: ``value`` and ``std`` are the source's text."""

    metric: str
    value: str
    unit: str = ""
    std: str | None = None
    setting: str = ""
    source: str = "S1"
    #: A change that may go either way (a gain, a reduction): the words for a positive and a negative value
    #: ("faster", "slower"), so "−49.0%" reads "49.0% slower".
    ways: tuple[str, str] | None = None

    @property
    def mean(self) -> float:
        return float(self.value.replace(",", "").replace(" ", ""))  # "9 846" as some sources print it

    @property
    def text(self) -> str:
        """The figure with the source's digits and unit, thousands separated as every other number of the book
        ("1,421.85 ± 13.47", "9,846"; sources print "1421.85" or "9 846")."""
        t = separated(self.value) + (f" ± {separated(self.std)}" if self.std else "")
        t += self.unit if self.unit in ("×", "%") else (f" {self.unit}" if self.unit else "")
        return f"{t} {self.ways[0]}" if self.ways and not self.value.startswith("-") else t


def separated(digits: str) -> str:
    """A number as a source printed it, its digits kept, its thousands separated by commas: "1421.85" ->
    "1,421.85", "9 846" -> "9,846"; text that is not a plain number is returned as it is."""
    plain = digits.replace(",", "").replace(" ", "")
    whole, dot, frac = plain.partition(".")
    sign = whole[:1] if whole[:1] in "+-" else ""
    if not whole.lstrip("+-").isdigit() or (dot and not frac.isdigit()):
        return digits
    return f"{sign.replace('-', '−')}{int(whole.lstrip('+-')):,}{dot}{frac}"


_CH3 = "50,000 × 4 KiB samples, batch 64, cold, 3 runs"
_CH7 = "ResNet-50, batch 64, 100,000 synthetic 224×224 JPEGs, cold, pin_memory"

PUBLISHED: dict[str, list[Figure]] = {
    "02_random_vs_sequential": [
        Figure("random read, cold", "70.39", "MB/s", "3.12", "10,000 × 16 KiB files in shuffled order, 3 runs"),
        Figure("sequential read, cold", "1421.85", "MB/s", "13.47", "one 156 MB file, 16 KiB reads, 3 runs"),
        Figure("sequential ÷ random, cold", "20.2", "×", setting="ratio of the two means"),
    ],
    "03_dataloader": [
        Figure("small files, workers=0", "16.70", "MB/s", "1.93", _CH3 + "; files in shuffled order"),
        Figure("shard, workers=0", "326.05", "MB/s", "4.99", _CH3 + "; shard read in order (no shuffle)"),
        Figure("shard ÷ small files, workers=0", "19.5", "×", setting="ratio of the two means"),
        Figure("small files, workers=4", "79.94", "MB/s", "3.40", _CH3 + "; files in shuffled order"),
        Figure("shard, workers=4", "384.85", "MB/s", "5.78", _CH3 + "; shard read in order (no shuffle)"),
        Figure("shard ÷ small files, workers=4", "4.8", "×", setting="ratio of the two means"),
    ],
    "04_cpu_starvation": [
        Figure("data wait per step, W=0", "160.59", "ms",
               setting="D = 5 ms per sample (time.sleep), B = 32, step G = 50 ms (time.sleep), 20 steps"),
        Figure("compute per step, W=0", "50.09", "ms", setting="the simulated 50 ms step (time.sleep)"),
        Figure("GPU idle share, W=0", "76", "%", setting="160.59 / (160.59 + 50.09)"),
        Figure("data wait per step, W=4", "1.50", "ms",
               setting="D = 5 ms per sample (time.sleep), B = 32, step G = 50 ms (time.sleep), 20 steps"),
    ],
    "05_padding_tax": [
        Figure("efficiency, pad to context", "2.3", "%",
               setting=("the first batch (32 samples) of Alpaca as \"{instruction} {input} {output}\", "
                        "GPT-2 tokenizer, one 32 × 4,096 grid, no end-of-text token")),
        Figure("efficiency, packed", "98.5", "%",
               setting=("the first 32 rows of greedy packing over the sample stream (samples 0–1,800, each "
                        "followed by an end-of-text token), one 32 × 4,096 grid")),
        Figure("packed ÷ pad to context", "42.4", "×", setting="ratio of the two efficiencies"),
        Figure("first batch: shortest sample", "13", "tokens", setting="the source's length table"),
        Figure("first batch: longest sample", "307", "tokens", setting="the source's length table"),
        Figure("first batch: mean length", "95", "tokens", setting="the source's length table"),
        Figure("first batch: median length", "83", "tokens", setting="the source's length table"),
    ],
    "06_pcie": [
        Figure("H2D pinned, 1 GiB", "13.46", "GB/s", setting="L40S, PCIe 4.0 x16; “1 GB” transfer"),
        Figure("D2H pageable, 256 MiB", "1.77", "GB/s", setting="“256 MB” transfer"),
        Figure("D2H pageable, 1 GiB", "1.77", "GB/s", setting="“1 GB” transfer"),
        Figure("D2H pinned, 1 GiB", "13.21", "GB/s", setting="“1 GB” transfer"),
        Figure("D2H pinned ÷ pageable, 1 GiB", "7.44", "×", setting="“1 GB” transfer (7.46× at 256 MB)"),
        Figure("overlap, pinned + non_blocking, 256 MiB", "100", "%",
               setting="copy 19.03 ms with 5.48 ms of CPU work, together 19.04 ms"),
        Figure("overlap, pinned + non_blocking, 16 MiB", "77", "%",
               setting="copy 1.21 ms with 4.98 ms of CPU work, together 5.26 ms"),
        Figure("link peak (theoretical)", "31.51", "GB/s", setting="PCIe 4.0 x16, one direction"),
    ],
    "07_full_picture": [
        Figure("ImageFolder, workers=0: data wait", "130.52", "ms", setting=_CH7),
        Figure("ImageFolder, workers=0: images/s", "280.5", "img/s", setting=_CH7),
        Figure("streaming (MDS), workers=0: data wait", "92.09", "ms", setting=_CH7),
        Figure("streaming (MDS), workers=0: images/s", "337.1", "img/s", setting=_CH7),
        Figure("streaming ÷ ImageFolder, workers=0", "1.42", "×",
               setting="the source's DataLoader speed-up of MDS over ImageFolder (130.52 / 92.09 ms of data wait)"),
        Figure("ImageFolder, workers=4: data wait", "0.36", "ms", setting=_CH7),
        Figure("ImageFolder, workers=4: images/s", "652.8", "img/s", setting=_CH7),
        Figure("streaming (MDS), workers=4: data wait", "0.38", "ms", setting=_CH7),
        Figure("streaming (MDS), workers=4: images/s", "652.5", "img/s", setting=_CH7),
        Figure("compute per step (forward+backward+optimizer)", "94.56", "ms",
               setting="ImageFolder, workers=0 (94.56–94.64 ms over the four scenarios)"),
        Figure("H2D per step", "3.07", "ms", setting="ImageFolder, workers=0"),
    ],
    # -- chapter 8 --
    "08_threads_processes_gil": [
        Figure("throughput gain, thread pipeline over DataLoader", "74", "%",
               setting="SPDL vs the PyTorch DataLoader iterating ImageNet (abstract: “74% faster”)", source="S2",
               ways=("faster", "slower")),
        Figure("CPU reduction, thread pipeline vs DataLoader", "38", "%",
               setting="total CPU utilisation where the pipeline is stable, no downstream load (Fig. 6)",
               source="S2", ways=("less CPU", "more CPU")),
        Figure("memory reduction, thread pipeline vs DataLoader", "50", "GB",
               setting="abstract: “50GB less memory” (about 15 GB of it the path list copied to each worker)",
               source="S2", ways=("less", "more")),
        Figure("peak throughput, DataLoader, Python 3.12", "1510", "img/s",
               setting="Table 3, “3.12 (PyTorch)”, FPS without downstream load", source="S2"),
        Figure("peak throughput, SPDL, Python 3.12", "2627", "img/s", setting="Table 3, FPS without downstream load",
               source="S2"),
        Figure("peak throughput, SPDL, Python 3.13", "2714", "img/s", setting="Table 3, FPS without downstream load",
               source="S2"),
        Figure("peak throughput, SPDL, Python 3.13t", "3158", "img/s",
               setting="Table 3, free-threaded Python, FPS without downstream load", source="S2"),
        Figure("DataLoader time to first batch, 4 workers", "58.7", "s",
               setting="Table 2, concurrency 4, TorchVision ImageNet dataset (this run: spawn, largest Dataset)",
               source="S2"),
        Figure("DataLoader time to first batch, 32 workers", "277.3", "s",
               setting="Table 2, concurrency 32 (this run: spawn, largest Dataset, when 32 workers are in the sweep)",
               source="S2"),
    ],
    # -- chapter 9 --
    "09_reading_smarter": [
        Figure("storage → GPU memory through the CPU", "8.0", "GB/s",
               setting="gdsio -x 2 (pinned host memory, asynchronous copies), -w 4 -s 10G -i 1M -I 0", source="S3"),
        Figure("average latency through the CPU", "1.25", "ms", setting="the same gdsio -x 2 run", source="S3"),
        Figure("storage → GPU memory with GDS", "9.6", "GB/s", setting="gdsio -x 0 (GPUDirect Storage), same settings",
               source="S3"),
        Figure("average latency with GDS", "1.00", "ms", setting="the same gdsio -x 0 run", source="S3"),
        Figure("GDS gain over the CPU path", "20", "%", setting="printed as “+20%” beside 9.6 GB/s", source="S3",
               ways=("faster", "slower")),
    ],
    # -- chapter 10 --
    "10_mmap_vs_read": [
        Figure("POSIX events per run, mmap", "9 846", "events", setting="≈ constant over all nine sweep points "
               "(a whole training job: initialisation, metadata, checkpoints)", source="S4"),
        Figure("POSIX events, read(), largest point", "906,600", "events",
               setting="sequence length 2048, global batch 512 (133,037 at 512 / 128)", source="S4"),
        Figure("POSIX events read() ÷ mmap, largest point", "92", "×", setting="sequence length 2048, batch 512",
               source="S4"),
        Figure("loader time, mmap, largest point", "43.1", "s",
               setting="data-loader time of a training job, sequence length 2048, batch 512", source="S4"),
        Figure("loader time, read(), largest point", "255.5", "s",
               setting="data-loader time of a training job, sequence length 2048, batch 512", source="S4"),
        Figure("per-sample bandwidth, mmap, smallest sequence", "29.6", "MB/s", setting="sequence length 512",
               source="S4"),
        Figure("per-sample bandwidth, mmap, largest sequence", "111.4", "MB/s", setting="sequence length 2048",
               source="S4"),
        Figure("per-sample bandwidth, read(), largest sequence", "26.6", "MB/s", setting="largest configuration",
               source="S4"),
        Figure("mmap ÷ read() per-sample bandwidth, largest sequence", "4.4", "×", setting="sequence length 2048",
               source="S4"),
    ],
    # -- chapter 11 --
    "11_gpu_to_gpu": [
        Figure("one GPU without DDP", "8.91", "steps/s",
               setting=("L40S; 5.17 on one A100; ViT-L/32 (random weights), batch 32 per GPU, synthetic data, SGD, "
                        "bucket_cap_mb=2000"), source="S5"),
        Figure("DDP on one GPU", "8.40", "steps/s", setting="L40S; 5.04 on one A100", source="S5"),
        Figure("DDP on N GPUs, direct path: slowdown vs one GPU", "8", "%",
               setting="8 A100 over NVLink (P2P/CUMEM), throughput per step vs one A100", source="S5"),
        Figure("DDP on N GPUs, host path: one GPU ÷ N GPUs", "6", "×",
               setting="8 L40S over PCIe (SHM): “more than 6 times slower” than one GPU", source="S5"),
        Figure("NCCL all-reduce share of the step, host path", "84", "%",
               setting="8 L40S: 587 of 701 ms", source="S5"),
        Figure("gradient_as_bucket_view gain", "1", "%", setting="on top of static_graph", source="S5",
               ways=("faster", "slower")),
        Figure("bf16 compression gain, host path", "65", "%", setting="8 L40S over PCIe; a loss on 8 A100 (NVLink)",
               source="S5", ways=("faster", "slower")),
        Figure("PowerSGD, host path", "7.5", "steps/s",
               setting="8 L40S over PCIe, naive PowerSGDState(process_group=None): “more than five times faster” "
                       "than the DDP baseline", source="S5"),
    ],
    # -- end of chapters --
}


def figures(chapter: str) -> list[Figure]:
    return PUBLISHED.get(chapter, [])


def figure(chapter: str, metric: str) -> Figure | None:
    return next((f for f in figures(chapter) if f.metric == metric), None)


def fmt(mean, std=None, unit: str = "", ways: tuple[str, str] | None = None) -> str:
    """A measured value with sensible digits (three significant, thousands separated); with ``ways`` (see
    :attr:`Figure.ways`) a change is worded by its sign ("49.0% slower"), never a bare "−49.0%"."""
    if mean is None or (isinstance(mean, float) and math.isnan(mean)):
        return "—"
    from datajourney.core.units import num, signed

    if ways:
        return signed(mean, unit, *ways) + (f" (± {num(std, unit)})" if std is not None and std == std else "")
    text = num(mean, unit)
    if std is not None and not (isinstance(std, float) and math.isnan(std)):
        text = text.removesuffix(unit).rstrip() + " ± " + num(std, unit)
    return text


def three_columns(chapter: str, this: dict, reference: dict | None, *, this_is_reference: bool = False,
                  reference_label: str = "reference run") -> pd.DataFrame:
    """A table: metric | setting | published | reference run | this run.

    ``this`` and ``reference`` map metric name -> (mean, std); they come from the same
    chapter function applied to this run's and the reference run's result files. When
    this run *is* the reference run, the table has no separate "this run" column.
    """
    rows = []
    for f in figures(chapter):
        t = this.get(f.metric, (None, None))
        r = (reference or {}).get(f.metric, (None, None))
        row = {"metric": f.metric, f"published ({f.source})": f.text, "published setting": f.setting}
        if this_is_reference:
            row[reference_label] = fmt(*t, f.unit, f.ways)
        else:
            row[reference_label] = fmt(*r, f.unit, f.ways) if reference else "not committed yet"
            row["this run"] = fmt(*t, f.unit, f.ways)
        rows.append(row)
    return pd.DataFrame(rows)


def printed_as(value: float, figure) -> bool:
    """Whether ``value`` prints as the published figure does, to the digits the source printed."""
    text = figure.value.replace(",", "")
    digits = len(text.split(".")[1]) if "." in text else 0
    return f"{value:.{digits}f}" == text
