"""Files written whole or not at all.

Result files, run records and executed notebooks are read by later commands (``book``,
``promote``, ``rerender``); a write cut short by a full disk must not leave half a file
where a whole one was, so every such write goes through :func:`write_atomic`.
"""
from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

#: Errors of a write that did not fit (full disk, quota, file too large) or could not happen (read-only, I/O).
WRITE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO})


def umask() -> int:
    """This process's umask (read from /proc, so no other thread sees it changed)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def write_atomic(path, data: str | bytes, *, mode: int = 0o666) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same directory (fsync, then
    ``os.replace``): a reader sees the old file or the new one, never part of one. The file gets
    ``mode`` less the umask (0644 under the usual umask), as ``open`` would give it. On any
    failure the temporary file is removed, ``path`` is left as it was, and the ``OSError``
    names ``path``."""
    path = Path(path)
    raw = data.encode() if isinstance(data, str) else data
    fd, tmp = None, None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, mode & ~umask())
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
        os.close(fd)
        fd = None
        os.replace(tmp, path)
        tmp = None
    except OSError as e:
        raise OSError(e.errno, e.strerror or str(e), str(path)) from None
    finally:
        if fd is not None:
            os.close(fd)
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return path


def write_error(e: OSError, fallback) -> str:
    """'could not write FILE: reason' for an ``OSError`` of a write (``fallback``: the file, when
    the error does not name one)."""
    return f"could not write {e.filename or fallback}: {e.strerror or e}"
