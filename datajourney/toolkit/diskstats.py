"""What the block layer saw: ``/proc/diskstats`` counters around a read, and the block device
behind a path (its queue settings from sysfs).

Example::

    import pathlib
    import tempfile

    from datajourney.toolkit import pagecache
    from datajourney.toolkit.diskstats import DiskStats, block_device

    path = pathlib.Path(tempfile.mkdtemp()) / "shard.bin"
    path.write_bytes(bytes(8 << 20))
    pagecache.purge([path], method="fadvise")
    dev = block_device(path)                          # the partition and disk under the file
    stats = DiskStats(dev["partition"])
    before = stats.snapshot()
    with open(path, "rb") as f:                       # asked: 64 KiB reads
        while f.read(1 << 16):
            pass
    seen = DiskStats.delta(before, stats.snapshot())  # seen by the block layer (None where not a block device)
    print(dev["disk"], seen["dev_request_bytes"], seen["own_bytes"])
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from datajourney.core.fingerprint import storage_info
from datajourney.toolkit import pagecache

__all__ = ["DiskStats", "block_device", "SECTOR"]


@dataclass
class DiskStats:
    """Counters of one block device from ``/proc/diskstats``; ``delta`` of two snapshots is what
    the device did in between (all processes' I/O on that device, not only ours)."""

    device: str | None

    def snapshot(self) -> tuple[float, list[int] | None, int | None]:
        return time.perf_counter(), (_diskstats_line(self.device) if self.device else None), pagecache.io_read_bytes()

    @staticmethod
    def delta(a, b) -> dict:
        """Reads, merges, bytes, average request size, average reads in flight, utilisation of the device;
        and the bytes this process made the storage layer read (``/proc/self/io``: its own share, which
        other processes' I/O on the same device cannot blur)."""
        (t0, s0, o0), (t1, s1, o1) = a, b
        wall_ms = (t1 - t0) * 1e3
        own = (o1 - o0) if o0 is not None and o1 is not None else None
        if s0 is None or s1 is None:
            return dict(dev_reads=None, dev_merged=None, dev_bytes=None, dev_request_bytes=None,
                        dev_queue_depth=None, dev_util=None, dev_read_ms=None, own_bytes=own, own_share=None)
        d = [y - x for x, y in zip(s0, s1)]
        reads, merged, sectors, read_ms, io_ms = d[0], d[1], d[2], d[3], d[9]
        dev_bytes = sectors * SECTOR
        return dict(dev_reads=reads, dev_merged=merged, dev_bytes=dev_bytes,
                    dev_request_bytes=dev_bytes / reads if reads else None,
                    dev_queue_depth=read_ms / wall_ms if wall_ms > 0 else None,
                    dev_util=min(1.0, io_ms / wall_ms) if wall_ms > 0 else None,
                    dev_read_ms=read_ms / reads if reads else None, own_bytes=own,
                    own_share=min(1.0, own / dev_bytes) if own is not None and dev_bytes else None)


def block_device(path) -> dict:
    """The partition (for /proc/diskstats) and the whole disk (for sysfs queue settings) under ``path``,
    with the queue limits that split requests (``max_segments``, ``max_segment_size``)."""
    info = storage_info(path)
    if info.get("disk"):
        q = Path(f"/sys/block/{info['disk']}/queue")
        for name in ("max_segments", "max_segment_size", "max_hw_sectors_kb"):
            try:
                info[name] = int((q / name).read_text())
            except (OSError, ValueError):
                info[name] = None
    return dict(partition=info.get("block_device"), disk=info.get("disk"), info=info)


SECTOR = 512


# --------------------------------------------------------------------------- the device's view
def _diskstats_line(name: str, text: str | None = None) -> list[int] | None:
    text = text if text is not None else Path("/proc/diskstats").read_text()
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 14 and f[2] == name:
            return [int(x) for x in f[3:14]]
    return None
