"""A watcher that outlives the process it watches and kills the process groups that process left.

``kill -9`` of a launcher runs none of its clean-up. The kernel it started dies with it (its death signal),
and what the kernel *forked* or spawned through :func:`~datajourney.toolkit.lifetime.spawn_launcher` dies
with the kernel, but a process the kernel started by fork + exec in any other way (``subprocess`` without
``child_setup``, a library's own helper) may never ask for a death signal. They all stay in the kernel's
process group, so the launcher registers that group with this watcher, a separate process in a session of its own:
when the launcher's end of the pipe closes (it exited, however), the watcher sends SIGKILL to every group
still registered, twice 0.2 s apart, and exits.

Run as a script (``python -I reaper.py``): it imports only the standard library, so it is ready at once.
Protocol on its standard input, one line each: ``+<pgid>`` registers a group, ``-<pgid>`` forgets it.
"""
import os
import signal
import sys
import time

__all__ = ["main"]


def main() -> None:
    """Read ``+pgid`` / ``-pgid`` lines until standard input closes, then SIGKILL every group still registered."""
    groups: set[int] = set()
    for line in sys.stdin:
        line = line.strip()
        if line[:1] in "+-" and line[1:].isdigit() and int(line[1:]) > 1:
            (groups.add if line[0] == "+" else groups.discard)(int(line[1:]))
    for _ in range(2):
        for pgid in groups:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        time.sleep(0.2)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    main()
