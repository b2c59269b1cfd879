"""Synthetic storage data sets: many small files and the same bytes as one contiguous shard,
and the machinery every generated data set of the book goes through (:func:`generate`).

**Atomic.** Everything is written into a hidden temporary directory
(``.tmp-<name>-<pid>-<random>``), the integrity index and the manifest (parameters +
checksum) are written last, and only then is the directory renamed into place. A
directory without a matching manifest is never used, so an interrupted generation cannot
leave a half data set that looks complete.

**One writer per data set.** An advisory lock (``flock`` on ``.lock-<name>`` in the data
directory) is held shared while a process uses a data set and exclusive while one
checks, generates and publishes it. A second run asking for a data set that another is
generating waits, says so, and then reuses it; a damaged data set is never replaced
under a run that is reading it. The free-space check counts what other runs are still
writing into the same directory. (On NFS, Linux maps ``flock`` onto NFS byte-range locks,
which work across hosts unless the file system is mounted with ``nolock``.)

**Verified on reuse, far cheaper than regenerating.** At generation, an index
(``.integrity.json``, its SHA-256 in the manifest) records every file's size and a
digest (SHA-1, 64 bits kept) of every 1 MiB block (a smaller file is one block), and a
stamp file records every file's inode, mtime and ctime. On every reuse:

1. every file is ``stat``-ed: a missing file or a different size is damage;
2. a file whose inode, mtime or ctime differs from its stamp has been written, replaced
   or copied since: all of its blocks are hashed and compared (a bit flipped by any
   write changes the ctime, which no user can set back, so it is always caught);
   the stamps are refreshed when every such file is intact (e.g. after a copy);
3. a random sample of blocks (0.5 %, at least 2 MiB worth: all of a small data set) is
   hashed and compared, to catch damage no time stamp shows (media errors, bit rot
   under the file system).

The cost is one ``stat`` per file, plus reading 0.5 % of the blocks. Measured with
``python -m datajourney bench verify`` (recorded in ``data/benchmarks/verify_full.json``)
for the chapter 2 and 3 full-profile data sets (3.2 GB, 104,000 files) on a 2-core
virtual machine: 0.5 s with the page cache warm and 1.9 s with it dropped, against 23 s
to generate them: 2 % and 8 %. Sets of many small files cost most (the ``stat`` of each
file); hashing every block instead costs about as much as generating them.
``DATAJOURNEY_VERIFY=full`` (or ``run --verify-data full``) does that. A damaged data set
is regenerated with a message naming what was wrong; in a read-only directory, the error
names it instead. (Time stamps on NFS are the server's, and attribute caching can hide a
change made on another client for up to a minute.)

**Stale temporary data** (``.tmp-*`` of a killed generation, ``.old-*`` of a killed
publish) is removed whenever a data set in the same directory is checked or generated,
and only when nobody holds that data set's lock and its owner is known to be dead: the
owner file records host name, boot id, process id and process start time; an owner on
this host is dead when that process no longer runs (or the host was restarted); an owner
on another host is only presumed dead after :data:`STALE_AGE_S` without any write.

**Nothing outside the data directory is touched.** Symbolic links in it are never followed: a link
named like temporary data is removed as a link (its target left alone), lock files are opened with
``O_NOFOLLOW`` (a link there is a one-line error), removals walk by descriptor, and a data set folder
that is a link is refused in one line naming it, never renamed, emptied or written through. To keep
data sets on another disk, ``data_dir`` is set there (it may itself be a link). ``/``, the checkout
and the results folder are refused as ``data_dir`` (:func:`check_data_dir`).
"""
from __future__ import annotations

import bisect
import errno
import fcntl
import hashlib
import itertools
import json
import math
import os
import random
import shutil
import socket
import stat
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datajourney.core.files import write_atomic
from datajourney.core.params import ParameterError, free_space, positive_int, size_text, writable_dir
from datajourney.core.paths import DATA_DIR_ENV, REPO_ROOT, RESULTS_ROOT, boot_id, default_data_dir  # noqa: F401 - re-exported

MANIFEST = "manifest.json"
#: Per-file sizes and block digests; immutable once published (its SHA-256 is in the manifest).
INDEX = ".integrity.json"
#: Per-file (inode, mtime, ctime) at the last verification: a cache, refreshed when stale.
STAMPS = ".stamps.json"
#: Who is writing a temporary directory (host, boot id, pid, process start time, plan).
OWNER = ".owner.json"
FORMAT_VERSION = 2
BLOCK = 4096
MAX_FILES = 5_000_000
MAX_BYTES = 1 << 40
HASH_BLOCK = 1 << 20
#: Share of the blocks hashed on every reuse (at least SAMPLE_MIN_BYTES worth: all of a small data set).
SAMPLE_FRACTION = 0.005
SAMPLE_MIN_BYTES = 2 << 20
#: A temporary directory written from another host is presumed abandoned after this long untouched.
STALE_AGE_S = 24 * 3600
#: File time stamps tick coarsely (a jiffy); a change within this of the stamp could hide.
RACY_NS = 20_000_000
VERIFY_ENV = "DATAJOURNEY_VERIFY"
NOTICES_ENV = "DATAJOURNEY_NOTICES"
_OWN_FILES = {MANIFEST, INDEX, STAMPS, OWNER}


def notice(message: str) -> None:
    """Tell the reader something about the data (waiting, damage found, clean-up): on stderr,
    and, under the runner, in its terminal too (the runner names a file in ``$DATAJOURNEY_NOTICES``)."""
    print(message, file=sys.stderr, flush=True)
    path = os.environ.get(NOTICES_ENV)
    if path:
        try:
            with open(path, "a") as f:
                f.write(message.replace("\n", " ") + "\n")
        except OSError:
            pass


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


def _read_json(path: Path):
    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- who writes
def _proc_start(pid: int) -> int | None:
    """Start time of process ``pid`` (clock ticks since boot): tells a reused pid apart."""
    try:
        line = Path(f"/proc/{pid}/stat").read_text()
        return int(line.rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    except (OverflowError, ValueError):
        return False
    return True


def identity() -> dict:
    """This process as an owner file records it."""
    return {"host": socket.gethostname(), "boot_id": boot_id(), "pid": os.getpid(),
            "start": _proc_start(os.getpid())}


def _last_activity(entry: Path) -> float:
    """Newest mtime of a directory and its direct children: a generation writing into
    ``files/`` or ``shard.bin`` keeps it fresh."""
    try:
        newest = entry.stat().st_mtime
        with os.scandir(entry) as it:
            for e in it:
                try:
                    newest = max(newest, e.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    pass
        return newest
    except OSError:
        return time.time()


def _owner_dead(entry: Path, owner: dict | None) -> str | None:
    """Why the temporary directory ``entry`` is abandoned, or ``None`` while its writer may live."""
    age = time.time() - _last_activity(entry)
    if age > STALE_AGE_S:
        return f"untouched for {age / 3600:.0f} h"
    if owner:
        if owner.get("host") != socket.gethostname():
            return None  # another host's run: only the age rule above applies
        if owner.get("boot_id") and owner.get("boot_id") != boot_id():
            return "this host has restarted since it was written"
        pid = owner.get("pid")
        if not isinstance(pid, int) or pid == os.getpid():
            return None
        if not _alive(pid):
            return f"process {pid} on this host is gone"
        if owner.get("start") is not None and _proc_start(pid) not in (None, owner["start"]):
            return f"process {pid} on this host is gone (the id now belongs to another process)"
        return None
    parts = entry.name.rsplit("-", 2)  # written before owner files existed: .tmp-<name>-<pid>-<hex>
    if entry.name.startswith(".tmp-") and len(parts) == 3 and parts[1].isdigit():
        pid = int(parts[1])
        if pid != os.getpid() and not _alive(pid):
            return f"process {pid} is gone"
    return None


def _temp_name(entry: str) -> str | None:
    """The data set a ``.tmp-<name>-<pid>-<hex>`` or ``.old-<name>-<hex>`` directory belongs to."""
    if entry.startswith(".tmp-"):
        parts = entry[5:].rsplit("-", 2)
        return parts[0] if len(parts) == 3 else None
    if entry.startswith(".old-"):
        parts = entry[5:].rsplit("-", 1)
        return parts[0] if len(parts) == 2 else None
    return None


def _du(path: Path) -> tuple[int, int]:
    """(bytes allocated, entries) under ``path``."""
    total = count = 0
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            with os.scandir(d) as it:
                for e in it:
                    count += 1
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if e.is_dir(follow_symlinks=False):
                        stack.append(Path(e.path))
        except OSError:
            pass
    return total, count


# --------------------------------------------------------------------------- locks
_HELD: dict[str, int] = {}  # lock file -> open descriptor of this process (shared or exclusive lock)


def _forget_inherited_locks() -> None:
    """In a forked child (DataLoader or pool worker): close the inherited lock descriptors. The
    parent keeps its locks; a child orphaned by a killed parent then holds none of them."""
    for fd in _HELD.values():
        try:
            os.close(fd)
        except OSError:
            pass
    _HELD.clear()


os.register_at_fork(after_in_child=_forget_inherited_locks)


def _lock_fd(parent: Path, name: str) -> int | None:
    """This process's descriptor of ``parent/.lock-<name>`` (``None``: the directory is read-only
    and has no lock file, so nobody can be writing there through us)."""
    path = str(parent / f".lock-{name}")
    if path in _HELD:
        return _HELD[path]
    try:
        fd = _open_lock(path, os.O_RDWR | os.O_CREAT)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _link_refused(parent, path, "plain file") from None
        try:
            fd = _open_lock(path, os.O_RDONLY)
        except OSError:
            return None
    _HELD[path] = fd
    return fd


def _open_lock(path: str, flags: int) -> int:
    """Open a lock file without following a link (``O_NOFOLLOW``: a link planted under its name raises
    ``ELOOP`` instead of creating or locking a file elsewhere); anything but a plain file is refused too."""
    fd = os.open(path, flags | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.ELOOP, "not a plain file", path)
    return fd


def _link_refused(parent: Path, path, what: str) -> ParameterError:
    """The one-line error for a symbolic link, or anything but a ``what`` (folder, plain file), where a data
    set folder or a lock file belongs."""
    path = Path(path)
    found = f"a symbolic link (to {os.readlink(path)})" if path.is_symlink() else f"not a {what}"
    return ParameterError("data_dir", str(parent), f"a directory whose data set folders and lock files are its "
                          f"own: {path} is {found}, which is never followed, replaced or emptied (remove it; to "
                          "keep data sets on another disk, set data_dir there)")


def _writers(parent: Path, name: str) -> list[dict]:
    """Owner records of temporary directories of ``name`` being written now."""
    out = []
    for entry in parent.glob(f".tmp-{name}-*"):
        if entry.is_symlink():  # never a generation's: its owner file is not read through it
            continue
        owner = _read_json(entry / OWNER)
        if owner and not _owner_dead(entry, owner):
            out.append(owner)
    return out


def _lock_holders(fd: int) -> list[str]:
    """Processes of this host holding a lock on the file open as ``fd`` (from /proc/locks)."""
    try:
        st = os.fstat(fd)
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        pids = {int(f[4]) for f in (line.split() for line in Path("/proc/locks").read_text().splitlines())
                if len(f) > 5 and f[1] == "FLOCK" and f[5] == key and f[4].isdigit()}
    except (OSError, ValueError):
        return []
    out = []
    for pid in sorted(pids - {os.getpid()}):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            cmd = ""
        out.append(f"pid {pid}" + (f" ({cmd[:60]})" if cmd else ""))
    return out


def _acquire(fd: int, mode: int, parent: Path, name: str, why: str) -> None:
    """Take the lock ``mode`` on ``fd``; when someone else holds it, say who and wait."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
        return
    except BlockingIOError:
        pass
    who = _writers(parent, name)
    if who:
        w = who[0]
        holder = f"another run is generating it (host {w.get('host')}, pid {w.get('pid')})"
    elif mode == fcntl.LOCK_SH:  # only an exclusive holder blocks a reader: a generation or a publish
        holder = "another run is generating it"
    else:
        holder = "another run is using or generating it"
    pids = _lock_holders(fd)
    if pids and not who:
        holder += " (held on this host by " + ", ".join(pids[:3]) + ")"
    notice(f"data set {name} in {parent}: {holder}; waiting before {why}")
    t0 = time.monotonic()
    next_note = 60.0
    while True:
        try:
            fcntl.flock(fd, mode | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            time.sleep(0.2)
        if time.monotonic() - t0 > next_note:
            notice(f"data set {name}: still waiting ({time.monotonic() - t0:.0f} s)")
            next_note += 60
    notice(f"data set {name}: waited {time.monotonic() - t0:.1f} s")


def _try_exclusive(parent: Path, name: str):
    """A descriptor holding ``name``'s lock exclusively, or ``None`` when anyone holds it."""
    if not os.access(parent, os.W_OK):
        return None
    try:
        fd = _open_lock(str(parent / f".lock-{name}"), os.O_RDWR | os.O_CREAT)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


# --------------------------------------------------------------------------- stale temporary data
def clean_stale(parent, *, holding: str | None = None) -> list[str]:
    """Remove the temporary data (``.tmp-*``, ``.old-*``) of dead generations in ``parent``,
    whatever data set they belong to; return what was removed. A directory is removed only
    while nobody holds its data set's lock and its owner is known to be dead (see the module
    docstring), so a live generation, on this host or another, is never touched. ``holding``:
    the data set whose lock this process already holds exclusively."""
    parent = Path(parent)
    removed = []
    try:
        entries = [e for e in os.scandir(parent) if e.name[:5] in (".tmp-", ".old-")
                   and (e.is_dir(follow_symlinks=False) or e.is_symlink())]
    except OSError:
        return removed
    for e in entries:
        name = _temp_name(e.name)
        if not name:
            continue
        entry = Path(e.path)
        if e.is_symlink():  # never made by a generation: removed as a link, its target left alone
            try:
                target = os.readlink(entry)
                os.unlink(entry)
            except OSError:
                continue
            removed.append(e.name)
            notice(f"removed {entry}: a symbolic link (to {target}) under a name of temporary data; "
                   "its target was left alone")
            continue
        if e.name.startswith(".tmp-"):
            why = _owner_dead(entry, _read_json(entry / OWNER))
        else:  # .old-*: a published data set moved aside; only a publish in progress owns it
            why = "left by an interrupted publish"
        if not why:
            continue
        fd = None if name == holding else _try_exclusive(parent, name)
        if fd is None and name != holding:
            continue
        try:
            if not entry.exists():
                continue
            notice(f"removing stale temporary data {parent / e.name} ({why}); a large one takes a while")
            files, size = _remove_tree(entry)
            removed.append(e.name)
            notice(f"removed stale temporary data {parent / e.name} ({files:,} files, {size_text(size)})")
        finally:
            if fd is not None:
                os.close(fd)
    return removed


#: Seconds between the progress lines of a long removal (:func:`_remove_tree`).
PROGRESS_EVERY_S = 5.0


def _remove_tree(root: Path) -> tuple[int, int]:
    """Delete the directory ``root``, saying every :data:`PROGRESS_EVERY_S` seconds how far it got
    (:func:`notice`): millions of files take minutes. Links are removed, never followed: ``root`` itself
    when it is one, and every link inside (``os.fwalk`` by descriptor, which never enters a directory
    swapped for a link during the walk). Returns (files removed, bytes they held)."""
    if os.path.islink(root):
        os.unlink(root)
        return 1, 0
    files = size = 0
    last = time.monotonic()
    for _dirpath, dirnames, filenames, dir_fd in os.fwalk(root, topdown=False, follow_symlinks=False):
        for name in filenames + dirnames:
            try:
                st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                if stat.S_ISDIR(st.st_mode):
                    os.rmdir(name, dir_fd=dir_fd)  # emptied already (bottom-up)
                    continue
                os.unlink(name, dir_fd=dir_fd)
                size += st.st_blocks * 512
                files += 1
            except OSError:
                pass
            if time.monotonic() - last >= PROGRESS_EVERY_S:
                last = time.monotonic()
                notice(f"  ... {files:,} files ({size_text(size)}) of {root} removed so far")
    try:
        os.rmdir(root)
    except OSError:
        shutil.rmtree(root, ignore_errors=True)  # anything the walk could not take (rmtree never follows links)
    return files, size


def pending_writes(parent, exclude_pid: int | None = None) -> tuple[int, int, list[str]]:
    """(bytes, files, data set names) that live generations of other processes in ``parent``
    still have to write, from the plan in their owner files minus what they have written."""
    parent = Path(parent)
    me = (socket.gethostname(), exclude_pid if exclude_pid is not None else os.getpid())
    nbytes = nfiles = 0
    names = []
    for entry in parent.glob(".tmp-*"):
        if entry.is_symlink():  # never a generation's: nothing is read or counted through it
            continue
        owner = _read_json(entry / OWNER)
        if not owner or (owner.get("host"), owner.get("pid")) == me or _owner_dead(entry, owner):
            continue
        used, count = _du(entry)
        nbytes += max(0, int(owner.get("bytes", 0)) - used)
        nfiles += max(0, int(owner.get("inodes", 0)) - count)
        names.append(str(owner.get("name", _temp_name(entry.name))))
    return nbytes, nfiles, names


# --------------------------------------------------------------------------- integrity
DIGEST_CHARS = 16  # 64 bits of SHA-1 per block: a chance of 2**-64 to miss a damaged block


def _hash(data) -> str:
    return hashlib.sha1(data, usedforsecurity=False).hexdigest()[:DIGEST_CHARS]


def _block_digests(fd: int, size: int) -> list[str]:
    return [_hash(os.pread(fd, HASH_BLOCK, off)) for off in range(0, size, HASH_BLOCK)]


def _payload_files(root: Path) -> list[str]:
    """Relative paths of a data set's files (not its manifest, index, stamps), sorted."""
    out = []
    for d, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(d, root)
        for f in sorted(files):
            if rel == "." and (f in _OWN_FILES or f.startswith(".settle") or f.startswith((STAMPS, "." + STAMPS))):
                continue
            out.append(f if rel == "." else os.path.join(rel, f))
    return out


def _settle(d: Path) -> bool:
    """Wait until the file system's clock has moved :data:`RACY_NS` past the files just written,
    so that any later write to them gets a different ctime. False when time stamps do not move."""
    probe = d / ".settle"
    probe.write_bytes(b"")
    c0 = os.stat(probe).st_ctime_ns
    deadline = time.monotonic() + 1.0
    ok = False
    while time.monotonic() < deadline:
        time.sleep(0.005)
        os.utime(probe)
        if os.stat(probe).st_ctime_ns >= c0 + RACY_NS:
            ok = True
            break
    probe.unlink()
    return ok


def build_index(root) -> tuple[dict, list]:
    """(index, stamps) of the files under ``root``: paths, sizes and block digests, and the
    (inode, mtime, ctime) of each file taken before it was read (a write during the read
    then shows as a changed stamp)."""
    root = Path(root)
    stamps_ok = _settle(root)
    paths, sizes, digests, stamps = [], [], [], []
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for rel in _payload_files(root):
            fd = os.open(rel, os.O_RDONLY, dir_fd=root_fd)
            try:
                st = os.fstat(fd)
                paths.append(rel)
                sizes.append(st.st_size)
                digests += _block_digests(fd, st.st_size)
                stamps += [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    index = {"version": 2, "block": HASH_BLOCK, "hash": "sha1/64", "stamps_reliable": stamps_ok,
             "paths": paths, "sizes": sizes, "digests": "".join(digests)}
    return index, stamps


def _write_stamps(root: Path, index_sha: str, stamps: list) -> None:
    """The stamps file: the index it belongs to, then a flat list of (inode, mtime, ctime) per file."""
    write_atomic(root / STAMPS, (index_sha + "\n" + json.dumps(stamps)).encode())


def _read_stamps(root: Path, index_sha: str) -> str | None:
    """The stamps list as text (compared as text: parsed only when something changed)."""
    try:
        head, _, body = (root / STAMPS).read_text().partition("\n")
    except (OSError, ValueError):
        return None
    return body if head == index_sha else None


def _stamps_list(text: str) -> list | None:
    """The stamps body parsed, or ``None`` when it is not a list (a truncated or damaged file): the stamps
    are a cache, so damage only means every file is hashed, and the stamps written again."""
    try:
        old = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return old if isinstance(old, list) else None


def verify_mode() -> str:
    """``quick`` (sizes + stamps + a 0.5 % sample, the default) or ``full`` (every block)."""
    mode = os.environ.get(VERIFY_ENV, "quick").strip().lower() or "quick"
    if mode not in ("quick", "full"):
        raise ParameterError(VERIFY_ENV, mode, "'quick' or 'full'")
    return mode


def check(root, *, full: bool | None = None, stats: dict | None = None) -> list[str]:
    """What is wrong with the published data set in ``root`` (empty: intact). See the module
    docstring for what is checked; ``full`` hashes every block (default: ``$DATAJOURNEY_VERIFY``).
    ``stats`` (a dict) receives counts of what was examined."""
    root = Path(root)
    full = (verify_mode() == "full") if full is None else full
    manifest = _read_manifest(root)
    integ = (manifest or {}).get("integrity")
    if not integ:
        return ["it has no integrity index (made by an older version)"]
    try:
        raw = (root / INDEX).read_bytes()
    except OSError as e:
        return [f"its integrity index {INDEX} cannot be read ({e.strerror})"]
    index_sha = hashlib.sha256(raw).hexdigest()
    if index_sha != integ.get("index_sha256"):
        return [f"its integrity index {INDEX} does not match its manifest"]
    index = json.loads(raw)
    block, paths, sizes, digests = int(index["block"]), index["paths"], index["sizes"], index["digests"]
    width = DIGEST_CHARS
    saved = _read_stamps(root, index_sha)
    problems: list[str] = []
    bad = set()  # files already found missing or of the wrong size
    now: list[int] = []
    root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)  # names resolved from here: no path objects
    try:
        stat_at = os.stat
        for k, rel in enumerate(paths):
            try:
                st = stat_at(rel, dir_fd=root_fd)
            except OSError as e:
                problems.append(f"{rel} is missing" if e.errno == errno.ENOENT
                                else f"{rel} cannot be read ({e.strerror})")
                bad.add(k)
                now += [0, 0, 0]
                continue
            if st.st_size != sizes[k]:
                how = "truncated" if st.st_size < sizes[k] else "grown"
                problems.append(f"{rel} is {st.st_size:,} bytes instead of {sizes[k]:,} ({how})")
                bad.add(k)
            now += [st.st_ino, st.st_mtime_ns, st.st_ctime_ns]
        now_text = json.dumps(now)
        to_hash: dict[int, set | None] = {}  # file number -> blocks to hash (None: all of them)
        old = _stamps_list(saved) if saved is not None and saved != now_text and not full else None
        if full or not index.get("stamps_reliable", True) or saved is None or (saved != now_text and old is None):
            to_hash = {k: None for k in range(len(paths)) if k not in bad}
        elif saved != now_text:  # something was written, replaced or copied: find what
            for k in range(len(paths)):
                if k not in bad and old[3 * k:3 * k + 3] != now[3 * k:3 * k + 3]:
                    to_hash[k] = None
        changed = len(to_hash)
        # a random sample of blocks, for damage no time stamp shows
        cum = list(itertools.accumulate(-(-n // block) for n in sizes))
        total_blocks = cum[-1] if cum else 0
        share = max(SAMPLE_FRACTION, SAMPLE_MIN_BYTES / max(1, sum(sizes)))
        k_sample = total_blocks if full else min(total_blocks, math.ceil(share * total_blocks))
        for g in random.sample(range(total_blocks), k_sample) if total_blocks and not full else []:
            k = bisect.bisect_right(cum, g)
            if k in bad or (k in to_hash and to_hash[k] is None):
                continue
            to_hash.setdefault(k, set()).add(g - (cum[k - 1] if k else 0))
        hashed = 0
        for k in sorted(to_hash):
            rel, first = paths[k], (cum[k - 1] if k else 0)
            n_blocks = cum[k] - first
            blocks = range(n_blocks) if to_hash[k] is None else sorted(to_hash[k])
            try:
                fd = os.open(rel, os.O_RDONLY, dir_fd=root_fd)
            except OSError as e:
                problems.append(f"{rel} cannot be read ({e.strerror})")
                continue
            try:
                for b in blocks:
                    data = os.pread(fd, block, b * block)
                    hashed += len(data)
                    if _hash(data) != digests[(first + b) * width:(first + b + 1) * width]:
                        where = "" if n_blocks == 1 else f" (block {b} at byte {b * block:,})"
                        problems.append(f"{rel} differs from what was generated{where}")
                        break
            except OSError as e:
                problems.append(f"{rel} cannot be read ({e.strerror})")
            finally:
                os.close(fd)
    finally:
        os.close(root_fd)
    if stats is not None:
        stats.update(files=len(paths), changed=changed, bytes_hashed=hashed, blocks_sampled=k_sample,
                     total_blocks=total_blocks, full=full)
    if not problems and saved != now_text and index.get("stamps_reliable", True):
        try:  # refresh the stamps (e.g. after a copy); each stat was taken before its file was hashed
            _write_stamps(root, index_sha, now)
        except OSError:
            pass  # a read-only directory: the changed files are hashed again next time
    return problems


def describe(problems: list[str], limit: int = 4) -> str:
    """The first problems, and how many more."""
    more = len(problems) - limit
    return "; ".join(problems[:limit]) + (f"; and {more} more" if more > 0 else "")


# --------------------------------------------------------------------------- generate / reuse
def _publish(tmp: Path, final: Path) -> None:
    """Move a finished temporary directory into place, replacing an outdated one (under the lock). A
    ``final`` that is a symbolic link is refused (:func:`_own_folder`), never renamed or emptied."""
    os.sync()
    _own_folder(final)
    if os.path.lexists(final):
        old = final.with_name(f".old-{final.name}-{uuid.uuid4().hex[:8]}")
        final.rename(old)
        tmp.rename(final)
        _remove_tree(old)
    else:
        tmp.rename(final)


def _own_folder(final: Path) -> None:
    """Refuse a data set folder that is a symbolic link (or not a directory), in one line naming it. A data
    set is only ever read, replaced or emptied as a folder of the data directory itself: a link there
    (say, to keep one data set on another disk) would be followed into a folder the run does not own. To
    keep data sets elsewhere, ``data_dir`` (which may itself be a link) is set there instead."""
    if os.path.islink(final) or (os.path.lexists(final) and not final.is_dir()):
        raise _link_refused(final.parent, final, "folder")


def _state(final: Path, params: dict) -> tuple[str, list[str]]:
    """('ok' | 'missing' | 'outdated' | 'damaged', problems) of a published data set."""
    manifest = _read_manifest(final)
    if manifest is None:
        if final.exists():
            return "outdated", ["it has no readable manifest"]
        return "missing", []
    if manifest.get("params") != params or manifest.get("format") != FORMAT_VERSION:
        return "outdated", ["it was made with other parameters or by an older version"]
    problems = check(final)
    return ("damaged", problems) if problems else ("ok", [])


def inodes_of(params: dict, nbytes: int = 0) -> int:
    """Files and directories a data set needs (for the free-inode check)."""
    kind = params.get("kind")
    if kind == "small_files":
        return params["n_files"] + 8
    if kind == "image_folder":
        return params["n_images"] + params.get("classes", 1) + 8
    if kind == "mds":
        return nbytes // (32 << 20) + 16
    return 16


def generate(parent: Path, name: str, params: dict, total: int | None, needed: int, write, progress: bool) -> Path:
    """Return ``parent/name`` if it holds an intact data set made with ``params``; otherwise
    (under the data set's exclusive lock) check for ``needed`` bytes of free space, let
    ``write(tmp_dir, progress)`` fill a hidden temporary directory and return its checksum,
    index it, write the manifest last and rename the directory into place. ``total`` is the
    payload size recorded in the manifest (``None``: measured). The caller keeps a shared
    lock on the data set until it exits, so nobody replaces it while it is being read."""
    parent = Path(parent)
    final = parent / name
    _own_folder(final)
    if not is_ready(parent, name, params):  # fail on a full disk before leaving anything behind
        free_space("data_dir", parent, needed, inodes=inodes_of(params, needed))
    fd = _lock_fd(parent, name)
    if fd is not None:
        _acquire(fd, fcntl.LOCK_SH, parent, name, "reading it")
    state, problems = _state(final, params)
    if state == "ok":
        return final
    try:
        writable_dir("data_dir", parent, create=False)
    except ParameterError as e:
        what = f"is damaged ({describe(problems)})" if state == "damaged" else f"is {state}"
        raise ParameterError("data_dir", str(parent),
                             f"{e.allowed}: data set {name} {what}, so it must be generated there") from None
    if fd is None:
        fd = _lock_fd(parent, name)
        if fd is None:
            raise ParameterError("data_dir", str(parent), f"a directory where the lock file .lock-{name} can be made")
    why = "regenerating it" if state in ("damaged", "outdated") else "generating it"
    _acquire(fd, fcntl.LOCK_EX, parent, name, why)
    try:
        state, problems = _state(final, params)  # someone may have made it while we waited
        if state == "ok":
            return final
        if state == "damaged":
            notice(f"data set {name} in {parent} is damaged: {describe(problems)}; regenerating it")
        elif state == "outdated":
            notice(f"data set {name} in {parent} is outdated ({describe(problems)}); regenerating it")
        clean_stale(parent, holding=name)
        inodes = inodes_of(params, needed)
        pend_bytes, pend_files, _ = pending_writes(parent)
        free_space("data_dir", parent, needed, inodes=inodes, pending_bytes=pend_bytes, pending_inodes=pend_files)
        tmp = parent / f".tmp-{name}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        tmp.mkdir()
        try:
            owner = {**identity(), "name": name, "bytes": needed, "inodes": inodes,
                     "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            (tmp / OWNER).write_text(json.dumps(owner))
            t0 = time.perf_counter()
            digest = write(tmp, progress)
            payload = total if total is not None else sum(
                (tmp / rel).stat().st_size for rel in _payload_files(tmp))
            index, stamps = build_index(tmp)
            raw = json.dumps(index, separators=(",", ":")).encode()
            (tmp / INDEX).write_bytes(raw)
            index_sha = hashlib.sha256(raw).hexdigest()
            _write_stamps(tmp, index_sha, stamps)
            manifest = {
                "format": FORMAT_VERSION,
                "params": params,
                "sha256": digest,
                "bytes": payload,
                "generated_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "generation_seconds": round(time.perf_counter() - t0, 3),
                "generated_by": {"host": owner["host"], "pid": owner["pid"]},
                "integrity": {"index": INDEX, "index_sha256": index_sha, "files": len(index["paths"]),
                              "block": HASH_BLOCK, "hash": index["hash"]},
            }
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
            (tmp / OWNER).unlink()
            _publish(tmp, final)
        except BaseException:
            notice(f"removing the unfinished data set {tmp}")
            _remove_tree(tmp)
            raise
    finally:
        fcntl.flock(fd, fcntl.LOCK_SH)  # keep using it: nobody may replace it under us
    return final


def release(parent, name: str) -> None:
    """Give up this process's lock on a data set (it is released at exit anyway)."""
    fd = _HELD.pop(str(Path(parent) / f".lock-{name}"), None)
    if fd is not None:
        try:  # unlock the open file description itself: a child forked a moment ago shares it
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError:
            pass
        os.close(fd)


def is_ready(parent, name: str, params: dict) -> bool:
    """True when ``parent/name`` has a manifest for ``params`` (cheap: its files are checked
    when a chapter uses it, see :func:`check`)."""
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


def parent_dir(data_dir=None) -> Path:
    """The data directory (``data_dir``, else ``$DATAJOURNEY_DATA_DIR``, else ``~/.cache/datajourney``).
    It must be a directory (created when missing and its parent exists) but need not be
    writable: a read-only directory that already holds intact data sets is reused."""
    if data_dir is None:
        return ensure_default_dir()
    if not isinstance(data_dir, (str, os.PathLike)) or str(data_dir) == "":
        raise ParameterError("data_dir", data_dir, "a directory path")
    p = Path(data_dir).expanduser()
    check_data_dir("data_dir", p)
    if p.is_dir():
        return p
    return writable_dir("data_dir", p)


def check_data_dir(name: str, path, *, results_root=None) -> None:
    """Refuse, before any work, a data directory that is ``/``, the checkout, or a results folder (the
    default ``results/`` or ``results_root``): data sets would land among the checkout's files or the run
    directories, and the clean-up of stale data would scan them. ``name``: what the error calls it."""
    p = Path(path).expanduser().resolve()
    roots = {Path(p.anchor): "the root directory", REPO_ROOT.resolve(): "the checkout",
             RESULTS_ROOT.resolve(): "the results folder"}
    if results_root is not None:
        roots.setdefault(Path(results_root).resolve(), "the results folder")
    if p in roots:
        raise ParameterError(name, str(path), f"a directory for data sets only, not {roots[p]} "
                             "(e.g. ~/.cache/datajourney, the default)")


def check_space(data_dir, plans) -> Path:
    """Check up front that ``data_dir`` can hold every data set not yet there (bytes and
    inodes, counting what other runs are still writing there), and that it is writable
    unless every data set is already there; remove stale temporary data. Returns the directory."""
    parent = parent_dir(data_dir)
    if os.access(parent, os.W_OK):
        clean_stale(parent)
    for n, _, _ in plans:
        _own_folder(parent / n)
    missing = [(n, p, b) for n, p, b in plans if not is_ready(parent, n, p)]
    if not missing:
        return parent
    writable_dir("data_dir", parent)
    busy = {n for n, _, _ in missing if _writers(parent, n)}  # being generated by another run: we wait and reuse
    mine = [(n, p, b) for n, p, b in missing if n not in busy]
    need = sum(b for _, _, b in mine)
    inodes = sum(inodes_of(p, b) for _, p, b in mine)
    pend_bytes, pend_files, _ = pending_writes(parent)
    if need or pend_bytes:
        free_space("data_dir", parent, need, inodes=inodes, pending_bytes=pend_bytes, pending_inodes=pend_files)
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
    parent = parent_dir(data_dir)

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
    parent = parent_dir(data_dir)

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


def verify(ds) -> bool:
    """Re-read every byte of a data set (anything with a ``root``) and compare with what was
    generated. Reuse runs the cheaper :func:`check` instead."""
    root = Path(getattr(ds, "root", ds))
    manifest = _read_manifest(root) or {}
    if manifest.get("integrity"):
        return not check(root, full=True)
    path = ds.shard if isinstance(ds, SmallFiles) else ds.path  # older data sets: the manifest checksum
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(8 << 20), b""):
            h.update(block)
    if h.hexdigest() != manifest.get("sha256"):
        return False
    if isinstance(ds, SmallFiles):
        h = hashlib.sha256()
        for p in ds.files:
            h.update(p.read_bytes())
        return h.hexdigest() == manifest.get("sha256")
    return True


def ensure_default_dir() -> Path:
    """The default data directory, created if missing."""
    d = default_data_dir()
    name = DATA_DIR_ENV if os.environ.get(DATA_DIR_ENV) else "data_dir"
    check_data_dir(name, d)
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ParameterError(name, str(d), f"a directory that can be created ({e.strerror or e})") from None
    if not d.is_dir():
        raise ParameterError(name, str(d), "a directory, not a file")
    return d
