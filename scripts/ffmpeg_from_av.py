"""FFmpeg's shared libraries for spdl.io (chapter 8) from the ``av`` wheel, without root.

The ``av`` wheel carries FFmpeg under hashed names (``av.libs/libavcodec-<hash>.so.<N>...``);
spdl.io loads the plain names (``libavcodec.so.<N>``). This writes one link per library,
``OUT/lib<name>.so.<N>``, and prints the value for ``LD_LIBRARY_PATH``: ``OUT`` first, then
``av.libs`` itself. Both are needed: the libraries find their own dependencies (libdrm, libx264
...) through ``$ORIGIN``, which for a library opened through a link is the link's directory,
so ``av.libs`` must be on the search path too. The variable must be set before Python starts
(the dynamic loader reads it once), which is why ``./journey`` calls this and then starts Python.

usage: python scripts/ffmpeg_from_av.py OUT_DIR   (exit 1, with the reason, when ``av`` is missing)
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

#: The FFmpeg libraries spdl.io links against.
LIBRARIES = ("avutil", "avcodec", "avformat", "avfilter", "avdevice", "swscale", "swresample")


def av_libs() -> Path:
    """The ``av.libs`` directory of the installed ``av`` wheel (without importing ``av``)."""
    spec = importlib.util.find_spec("av")
    if spec is None or not spec.origin:
        raise LookupError("the 'av' package is not installed (pip install av)")
    libs = Path(spec.origin).parent.parent / "av.libs"
    if not libs.is_dir():
        raise LookupError(f"the 'av' package has no bundled FFmpeg ({libs} is missing)")
    return libs


def link(out: Path, libs: Path) -> list[Path]:
    """One ``lib<name>.so.<N>`` link in ``out`` per FFmpeg library found in ``libs``."""
    out.mkdir(parents=True, exist_ok=True)
    made = []
    for name in LIBRARIES:
        found = sorted(libs.glob(f"lib{name}-*.so.*"))
        if not found:
            continue
        target = found[0].resolve()
        major = target.name.split(".so.", 1)[1].split(".")[0]
        dest = out / f"lib{name}.so.{major}"
        if dest.is_symlink() or dest.exists():
            dest.unlink()
        dest.symlink_to(target)
        made.append(dest)
    if not any(p.name.startswith("libavcodec.") for p in made):
        raise LookupError(f"no libavcodec in {libs}")
    return made


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: ffmpeg_from_av.py OUT_DIR", file=sys.stderr)
        return 2
    out = Path(argv[0]).resolve()
    try:
        libs = av_libs().resolve()
        link(out, libs)
    except (LookupError, OSError) as e:
        print(f"FFmpeg from the av wheel: {e}", file=sys.stderr)
        return 1
    print(f"{out}:{libs}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
