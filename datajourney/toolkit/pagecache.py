"""Page-cache control: make a data set cold (or warm) and prove it.

A "cold" read must come from the storage device, not from RAM. Linux keeps file pages in
the page cache after a read, so every cold measurement first purges the cache and then
checks, with ``mincore(2)``, how much of the data set is still resident.

Two ways to purge, tried in this order by :func:`purge` with ``method="auto"``:

``drop_caches``
    ``sync`` then ``echo 3 > /proc/sys/vm/drop_caches``. Needs root (or a writable
    ``/proc/sys/vm``). Drops clean page-cache pages *and* the dentry and inode caches
    of the whole machine: the closest thing to a reboot.
``fadvise``
    For each file: ``fdatasync`` then ``posix_fadvise(POSIX_FADV_DONTNEED)``. Needs no
    privilege, but only evicts file *data*. Directory entries and inodes stay cached,
    so ``open()`` and ``stat()`` of many small files stay fast: the rootless cold run of
    a small-files data set is warmer than a real cold start.

Never prompts for a password: ``sudo`` is not used.

Example::

    import pathlib
    import tempfile

    from datajourney.toolkit import pagecache

    path = pathlib.Path(tempfile.mkdtemp()) / "sample.bin"
    path.write_bytes(bytes(1 << 20))
    print(pagecache.warm([path]).fraction)                # 1.0: every page resident after one read
    report = pagecache.purge([path], method="fadvise")    # evict, then count resident pages with mincore
    print(report.method, report.after["fraction"])        # what is left in RAM: 0.0 when the purge worked
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import random
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from datajourney.core.params import choice

__all__ = ["METHODS", "Residency", "PurgeReport", "residency", "file_residency", "can_drop_caches", "drop_caches",
           "fadvise_dontneed", "purge", "warm", "io_read_bytes"]

DROP_CACHES = Path("/proc/sys/vm/drop_caches")
PAGE = mmap.PAGESIZE
METHODS = ("auto", "drop_caches", "fadvise")

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_MAP_FAILED = ctypes.c_void_p(-1).value


@dataclass
class Residency:
    """How much of a set of files sits in the page cache (pages counted by mincore)."""

    files: int
    pages_total: int
    pages_resident: int

    @property
    def fraction(self) -> float:
        return self.pages_resident / self.pages_total if self.pages_total else 0.0

    def as_dict(self) -> dict:
        return {**asdict(self), "fraction": self.fraction}


@dataclass
class PurgeReport:
    """What a purge did and how well it worked; recorded with every cold result."""

    method: str
    before: dict
    after: dict
    seconds: float
    note: str = ""
    attempted: list = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


#: Every byte value with bit 0 clear: deleting them leaves one byte per resident page.
_EVEN = bytes(range(0, 256, 2))


def file_residency(path: str | os.PathLike) -> tuple[int, int]:
    """(resident pages, total pages) of one file, read with mincore(2)."""
    size = os.path.getsize(path)
    if size == 0:
        return 0, 0
    pages = (size + PAGE - 1) // PAGE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, _MAP_FAILED):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap failed for {path}: {os.strerror(err)}")
        try:
            vec = (ctypes.c_ubyte * pages)()
            if _libc.mincore(addr, size, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore failed for {path}: {os.strerror(err)}")
            resident = len(bytes(vec).translate(None, _EVEN))   # bit 0 set: resident (odd bytes kept)
        finally:
            _libc.munmap(addr, size)
    finally:
        os.close(fd)
    return resident, pages


#: Above this many files, residency is checked on a fixed random sample of them (a uniform sample of
#: this size puts a 5% resident share within about ±1 point); every file is still purged or read.
CHECK_SAMPLE = 2000


def check_sample(paths: Sequence[str | os.PathLike], k: int | None = CHECK_SAMPLE) -> list:
    """The files whose residency is checked: all of them, or a fixed random sample of ``k``
    (seeded by the set's size, so a purge and the check after it look at the same files)."""
    paths = list(paths)
    if k is None or len(paths) <= k:
        return paths
    return random.Random(len(paths)).sample(paths, k)


def residency(paths: Iterable[str | os.PathLike]) -> Residency:
    """Page-cache residency of a set of files (every file given; see :func:`check_sample`)."""
    n = total = resident = 0
    for p in paths:
        r, t = file_residency(p)
        n += 1
        total += t
        resident += r
    return Residency(n, total, resident)


def can_drop_caches() -> bool:
    """True when this process may write /proc/sys/vm/drop_caches (root, not read-only)."""
    return DROP_CACHES.exists() and os.access(DROP_CACHES, os.W_OK)


def drop_caches() -> None:
    """Write back dirty pages, then drop page cache, dentries and inodes (machine-wide)."""
    os.sync()
    with open(DROP_CACHES, "w") as f:
        f.write("3\n")


def fadvise_dontneed(paths: Iterable[str | os.PathLike]) -> None:
    """Evict the data pages of each file; dirty pages are written back first."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def purge(paths: Sequence[str | os.PathLike], method: str = "auto", sample: int | None = CHECK_SAMPLE) -> PurgeReport:
    """Make ``paths`` cold and report residency before and after (of every file, or of a fixed
    random ``sample`` of them when there are more: checking opens each file, which on a cold
    cache costs an inode read per file).

    ``method`` is ``auto`` (drop_caches when permitted, else fadvise), ``drop_caches``
    (fails when not permitted) or ``fadvise``.
    """
    choice("purge_method", method, METHODS)
    paths = list(paths)
    checked = check_sample(paths, sample)
    before = residency(checked)
    attempted = []
    note = ""
    t0 = time.perf_counter()
    used = method
    if method in ("auto", "drop_caches"):
        attempted.append("drop_caches")
        if can_drop_caches():
            try:
                drop_caches()
                used = "drop_caches"
            except OSError as e:
                if method == "drop_caches":
                    raise PermissionError(f"cannot write {DROP_CACHES}: {e}") from e
                note = f"drop_caches refused ({e.strerror}); fell back to fadvise"
                used = "fadvise"
        elif method == "drop_caches":
            raise PermissionError(
                f"purge_method='drop_caches' needs write access to {DROP_CACHES} (root); "
                "use purge_method='fadvise' or 'auto'"
            )
        else:
            note = "no permission to write /proc/sys/vm/drop_caches; used per-file fadvise"
            used = "fadvise"
    if used == "fadvise":
        attempted.append("fadvise")
        fadvise_dontneed(paths)
        note = note or "per-file fadvise: dentries and inodes stay cached"
    seconds = time.perf_counter() - t0
    after = residency(checked)
    if used == "drop_caches":
        # Checking residency opened every file and so reloaded their dentries and inodes
        # (not their data). Drop again so the timed run starts with cold metadata too.
        drop_caches()
        note = "drop_caches; repeated after the residency check to drop the inodes it loaded"
    return PurgeReport(used, before.as_dict(), after.as_dict(), seconds, note, attempted)


def warm(paths: Sequence[str | os.PathLike], block: int = 1 << 20,
         sample: int | None = CHECK_SAMPLE) -> Residency:
    """Read every file once so that it is resident; return the residency afterwards (of every
    file, or of a fixed random ``sample`` of them when there are more)."""
    buf = bytearray(block)
    view = memoryview(buf)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(view):
                pass
    return residency(check_sample(paths, sample))



def io_read_bytes() -> int | None:
    """Bytes this process (all its threads) has caused to be read from storage so far, readahead
    included (``read_bytes`` of ``/proc/self/io``); None where the kernel does not account it."""
    try:
        for line in Path("/proc/self/io").read_text().splitlines():
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None
