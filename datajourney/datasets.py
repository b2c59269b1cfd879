"""Synthetic storage data sets: many small files and the same bytes as one contiguous shard.

Data sets are generated atomically: everything is written into a hidden temporary
directory, the manifest (parameters + checksum) is written last, and only then is the
directory renamed into place. A directory without a matching manifest is never used, so
an interrupted generation cannot leave a half data set that looks complete. A data set
whose manifest matches the requested parameters is reused without being rewritten.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .book.params import ParameterError, free_space, positive_int, writable_dir

MANIFEST = "manifest.json"
FORMAT_VERSION = 1
BLOCK = 4096
MAX_FILES = 5_000_000
MAX_BYTES = 1 << 40


def default_data_dir() -> Path:
    """Where data sets go unless a chapter's ``data_dir`` says otherwise."""
    env = os.environ.get("DATAJOURNEY_DATA_DIR")
    return Path(env) if env else Path.home() / ".cache" / "datajourney"


@dataclass(frozen=True)
class SmallFiles:
    """``n_files`` files of ``file_size`` bytes, plus ``shard.bin`` holding the same bytes in order."""

    root: Path
    n_files: int
    file_size: int
    seed: int

    @property
    def files(self) -> list[Path]:
        d = self.root / "files"
        return [d / _file_name(i) for i in range(self.n_files)]

    @property
    def shard(self) -> Path:
        return self.root / "shard.bin"

    @property
    def total_bytes(self) -> int:
        return self.n_files * self.file_size

    @property
    def manifest(self) -> dict:
        return json.loads((self.root / MANIFEST).read_text())


@dataclass(frozen=True)
class Shard:
    """One contiguous file of ``size`` random bytes."""

    root: Path
    size: int
    seed: int

    @property
    def path(self) -> Path:
        return self.root / "shard.bin"

    @property
    def manifest(self) -> dict:
        return json.loads((self.root / MANIFEST).read_text())


def _file_name(i: int) -> str:
    return f"{i:08d}.bin"


def _block_bytes(size: int) -> int:
    return -(-size // BLOCK) * BLOCK


def _read_manifest(root: Path) -> dict | None:
    try:
        return json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def _clean_stale(parent: Path, name: str) -> None:
    """Remove temporary directories left by interrupted generations of ``name``."""
    for p in parent.glob(f".tmp-{name}-*"):
        pid = p.name.rsplit("-", 2)[-2]
        if pid.isdigit() and _alive(int(pid)) and int(pid) != os.getpid():
            continue
        shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _publish(tmp: Path, final: Path) -> None:
    """Move a finished temporary directory into place, replacing an outdated one."""
    os.sync()
    if final.exists():
        old = final.with_name(f".old-{final.name}-{uuid.uuid4().hex[:8]}")
        final.rename(old)
        tmp.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(final)


def generate(parent: Path, name: str, params: dict, total: int | None, needed: int, write, progress: bool) -> Path:
    """Return ``parent/name`` if it holds a complete data set made with ``params``; otherwise check
    for ``needed`` bytes of free space, let ``write(tmp_dir, progress)`` fill a hidden temporary
    directory and return its checksum, write the manifest last and rename the directory into
    place. ``total`` is the payload size recorded in the manifest (``None``: measured)."""
    final = parent / name
    if is_ready(parent, name, params):
        return final
    free_space("data_dir", parent, needed)
    _clean_stale(parent, name)
    tmp = parent / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    tmp.mkdir()
    try:
        t0 = time.perf_counter()
        digest = write(tmp, progress)
        manifest = {
            "format": FORMAT_VERSION,
            "params": params,
            "sha256": digest,
            "bytes": total if total is not None else sum(
                f.stat().st_size for f in tmp.rglob("*") if f.is_file()),
            "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "generation_seconds": round(time.perf_counter() - t0, 3),
        }
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
        _publish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return final


def is_ready(parent, name: str, params: dict) -> bool:
    """True when ``parent/name`` holds a complete data set generated with ``params``."""
    manifest = _read_manifest(Path(parent) / name)
    return bool(manifest) and manifest.get("params") == params and manifest.get("format") == FORMAT_VERSION


def small_files_plan(n_files: int, file_size: int, seed: int = 0) -> tuple[str, dict, int]:
    """(directory name, manifest parameters, bytes on disk) of a small-files data set."""
    positive_int("n_files", n_files, maximum=MAX_FILES)
    positive_int("file_size", file_size, maximum=1 << 30)
    if n_files * file_size > MAX_BYTES:
        raise ParameterError("n_files * file_size", n_files * file_size, f"at most {MAX_BYTES:,} bytes")
    params = {"kind": "small_files", "n_files": n_files, "file_size": file_size, "seed": seed}
    return f"smallfiles-{n_files}x{file_size}-s{seed}", params, n_files * (_block_bytes(file_size) + file_size)


def shard_plan(size: int, seed: int = 0) -> tuple[str, dict, int]:
    """(directory name, manifest parameters, bytes on disk) of a shard data set."""
    positive_int("shard_size", size, maximum=MAX_BYTES)
    return f"shard-{size}-s{seed}", {"kind": "shard", "size": size, "seed": seed}, _block_bytes(size)


def check_space(data_dir, plans) -> Path:
    """Check up front that ``data_dir`` is writable and can hold every data set not yet there."""
    parent = writable_dir("data_dir", data_dir if data_dir is not None else ensure_default_dir())
    need = sum(b for name, params, b in plans if not is_ready(parent, name, params))
    if need:
        free_space("data_dir", parent, need)
    return parent


def _bar(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="B", unit_scale=True, disable=not enabled, leave=False)


def small_files(
    data_dir=None, *, n_files: int, file_size: int, seed: int = 0, progress: bool = True
) -> SmallFiles:
    """Get (generate or reuse) ``n_files`` files of ``file_size`` random bytes and their shard.

    The shard ``shard.bin`` is the files concatenated in index order, so file ``i`` is the
    byte range ``[i * file_size, (i + 1) * file_size)`` of the shard.
    """
    name, params, needed = small_files_plan(n_files, file_size, seed)
    parent = writable_dir("data_dir", data_dir if data_dir is not None else ensure_default_dir())

    def write(tmp: Path, show: bool) -> str:
        rng = np.random.default_rng(seed)
        h = hashlib.sha256()
        d = tmp / "files"
        d.mkdir()
        with open(tmp / "shard.bin", "wb") as shard, _bar(n_files * file_size, "small files", show) as bar:
            for i in range(n_files):
                data = rng.bytes(file_size)
                with open(d / _file_name(i), "wb") as f:
                    f.write(data)
                shard.write(data)
                h.update(data)
                bar.update(file_size)
        return h.hexdigest()

    root = generate(parent, name, params, n_files * file_size, needed, write, progress)
    return SmallFiles(root, n_files, file_size, seed)


def shard(data_dir=None, *, size: int, seed: int = 0, progress: bool = True) -> Shard:
    """Get (generate or reuse) one contiguous file of ``size`` random bytes."""
    name, params, needed = shard_plan(size, seed)
    parent = writable_dir("data_dir", data_dir if data_dir is not None else ensure_default_dir())

    def write(tmp: Path, show: bool) -> str:
        rng = np.random.default_rng(seed)
        h = hashlib.sha256()
        left = size
        with open(tmp / "shard.bin", "wb") as f, _bar(size, "shard", show) as bar:
            while left:
                data = rng.bytes(min(left, 8 << 20))
                f.write(data)
                h.update(data)
                left -= len(data)
                bar.update(len(data))
        return h.hexdigest()

    root = generate(parent, name, params, size, needed, write, progress)
    return Shard(root, size, seed)


def verify(ds: SmallFiles | Shard) -> bool:
    """Re-read a data set and compare with its manifest checksum (reads every byte)."""
    path = ds.shard if isinstance(ds, SmallFiles) else ds.path
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            h.update(block)
    if h.hexdigest() != ds.manifest["sha256"]:
        return False
    if isinstance(ds, SmallFiles):
        h = hashlib.sha256()
        for p in ds.files:
            h.update(p.read_bytes())
        return h.hexdigest() == ds.manifest["sha256"]
    return True


def ensure_default_dir() -> Path:
    """The default data directory, created if missing."""
    d = default_data_dir()
    d.mkdir(parents=True, exist_ok=True)
    return d
