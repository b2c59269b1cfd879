"""Chapter 6's parameters: the one place their defaults live, each declared once with its range.

The notebook's parameters cell (:func:`~datajourney.core.params.parameters_cell`), the profiles in
``profiles.yaml`` and the harness's ``run()`` start from :class:`Params`; :meth:`Params.checked` checks every
declared range before any work, and the experiment's ``preflight`` adds the checks that span fields
(the interleaved check's rounds) or depend on this machine (host and GPU memory)."""
from __future__ import annotations

from dataclasses import dataclass

from datajourney.core.params import ChapterParams, param

#: The largest copy size any list accepts (64 GiB).
SIZE_MAX = 1 << 36
#: The smallest copy size (one page).
SIZE_MIN = 4096


#: The chapter's name: its notebook, its result file and its reference file.
CHAPTER = "06_pcie"


@dataclass
class Params(ChapterParams):
    """Every knob of chapter 6."""
    sizes: list[int] = param([65536, 1048576, 16777216, 268435456], "bandwidth sweep",
                             minimum=SIZE_MIN, maximum=SIZE_MAX, unit="bytes")
    repeats: int = param(10, "timed copies per point (fewer above 256 MiB); at least 3", minimum=3, maximum=10_000)
    warmup: int = param(3, "untimed copies first", minimum=1, maximum=1000)
    ceiling_size: int = param(268435456, "copy size of the ceiling's rounds (pinned H2D through CuPy and PyTorch, "
                                         "spread over the run)", minimum=SIZE_MIN, maximum=SIZE_MAX, unit="bytes")
    overlap_sizes: list[int] = param([16777216, 268435456], "copy sizes for the overlap experiments",
                                     minimum=SIZE_MIN, maximum=SIZE_MAX, unit="bytes")
    cpu_work_ms: float = param(5.0, "Python work done while a copy runs", minimum=0.001, maximum=10_000, unit="ms")
    staging_sizes: list[int] = param([16777216, 67108864, 268435456], "why pageable copies slow down",
                                     minimum=SIZE_MIN, maximum=SIZE_MAX, unit="bytes")
    kernel_ms: float = param(20.0, "matrix products a side-stream copy runs beside", minimum=0.001, maximum=10_000,
                             unit="ms")
    kernel_rounds: int = param(20, "interleaved rounds: kernel, copy, both", minimum=3, maximum=10_000)
    profile_timeline: bool = param(True, "read the copy/kernel overlap off a profiler timeline")
    dip_sizes: list[int] = param([134217728, 268435456], "pageable H2D sizes copied interleaved, to decide the dip "
                                                         "([]: skip)", kind="int_list", maximum=SIZE_MAX, unit="bytes")
    dip_rounds: int = param(10, "rounds of the interleaved check (each size once per round, shuffled)",
                            minimum=0, maximum=10_000)
