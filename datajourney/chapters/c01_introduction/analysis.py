"""Chapter 1's analysis: the machine a run had, as facts (cores, GPU, memory), which every other page
names when it says whose numbers it shows."""
from __future__ import annotations

from datajourney.chapters.c01_introduction.params import CHAPTER
from datajourney.core.facts import Fact, Facts, host_label

EXPORTS = ("cores", "gpus", "host")


def analyse(res) -> Facts:
    """The run's machine: usable cores, GPUs and memory, and its label (:func:`host_label`)."""
    fp = res.fingerprint or {}
    cpu, gpu, mem = fp.get("cpu") or {}, fp.get("gpu") or {}, fp.get("memory") or {}
    facts = Facts(CHAPTER, exports=EXPORTS)
    facts.add(Fact("cores", cpu.get("usable_cores") or cpu.get("logical_cores"), "", "usable CPU cores",
                   "count", None),
              Fact("gpus", int(gpu.get("count") or 0) if gpu.get("available") else 0, "", "GPUs", "count", None),
              Fact("memory_bytes", mem.get("total_bytes"), "bytes", "memory", "amount", None))
    facts.data["host"] = host_label(fp)
    return facts
