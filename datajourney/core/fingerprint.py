"""The environment fingerprint stored with every result.

A bandwidth number means little without the machine it came from, so every result file
carries this record: GPU and PCIe link, CPU and cores, RAM, the storage device under the
data directory with its scheduler, readahead and file system, the kernel, container and
cgroup limits, software versions and the date. Everything is read from the system at run
time; a field that cannot be read is ``None``, never guessed.
"""
from __future__ import annotations

import datetime as _dt
import os
import platform
import re
import resource
import shutil
import subprocess
from pathlib import Path


def _read(path, default=None):
    try:
        return Path(path).read_text().strip()
    except OSError:
        return default


def _int(text):
    try:
        return int(text)
    except (TypeError, ValueError):
        return None


def _run(cmd, timeout=10) -> str | None:
    if not shutil.which(cmd[0]):
        return None
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def cpu_info() -> dict:
    model = None
    flags = ""
    for line in (_read("/proc/cpuinfo", "") or "").splitlines():
        if line.startswith("model name") and model is None:
            model = line.split(":", 1)[1].strip()
        elif line.startswith("flags") and not flags:
            flags = line.split(":", 1)[1]
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count()
    return {
        "model": model or platform.processor() or None,
        "logical_cores": os.cpu_count(),
        "usable_cores": usable,
        "hypervisor": " hypervisor" in f" {flags} ",
        "machine": platform.machine(),
    }


def memory_info() -> dict:
    info = {}
    for line in (_read("/proc/meminfo", "") or "").splitlines():
        key, _, rest = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            info[key] = _int(rest.split()[0]) * 1024 if rest.split() else None
    return {"total_bytes": info.get("MemTotal"), "available_bytes": info.get("MemAvailable")}


def cgroup_limits(cgroup_root="/sys/fs/cgroup", proc_cgroup="/proc/self/cgroup") -> dict:
    """Memory and CPU limits of this process's cgroup and every ancestor (the tightest wins).

    cgroup v2: ``memory.max``, ``memory.current`` and ``cpu.max`` from this process's cgroup
    (read from ``/proc/self/cgroup``) up to the root. cgroup v1: ``memory.limit_in_bytes`` and
    ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` of the memory and cpu hierarchies. Unlimited
    or unknown values are None."""
    root = Path(cgroup_root)
    lines = (_read(proc_cgroup) or "").splitlines()
    v2 = (root / "cgroup.controllers").exists()
    out = dict(cgroup_version=2 if v2 else (1 if (root / "memory").is_dir() else None), cgroup_path=None,
               limit_bytes=None, used_bytes=None, cpu_quota_cores=None)

    def chain(base: Path, rel: str) -> list[Path]:
        parts = [p for p in rel.strip("/").split("/") if p]
        return [base.joinpath(*parts[:k]) for k in range(len(parts), -1, -1)]

    if v2:
        rel = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), "/")
        out["cgroup_path"] = rel
        for d in chain(root, rel):
            m = _int(_read(d / "memory.max"))
            if m is not None and (out["limit_bytes"] is None or m < out["limit_bytes"]):
                out["limit_bytes"] = m
                out["used_bytes"] = _int(_read(d / "memory.current"))
            c = _read(d / "cpu.max")
            if c and not c.startswith("max"):
                q, p = c.split()[:2]
                cores = int(q) / int(p)
                if out["cpu_quota_cores"] is None or cores < out["cpu_quota_cores"]:
                    out["cpu_quota_cores"] = cores
    elif out["cgroup_version"] == 1:
        rels = {}
        for ln in lines:
            _, ctrls, rel = (ln.split(":", 2) + ["", ""])[:3]
            for c in ctrls.split(","):
                rels[c] = rel
        out["cgroup_path"] = rels.get("memory", "/")
        for d in chain(root / "memory", rels.get("memory", "/")):
            m = _int(_read(d / "memory.limit_in_bytes"))
            if m is not None and m < (1 << 60) and (out["limit_bytes"] is None or m < out["limit_bytes"]):
                out["limit_bytes"] = m
                out["used_bytes"] = _int(_read(d / "memory.usage_in_bytes"))
        for d in chain(root / "cpu", rels.get("cpu", "/")):
            q = _int(_read(d / "cpu.cfs_quota_us"))
            p = _int(_read(d / "cpu.cfs_period_us"))
            if q and q > 0 and p:
                cores = q / p
                if out["cpu_quota_cores"] is None or cores < out["cpu_quota_cores"]:
                    out["cpu_quota_cores"] = cores
    return out


def container_info() -> dict:
    """cgroup limits and container hints; None where unlimited or unknown. The memory limit and
    CPU quota are the tightest of this process's cgroup and every parent (:func:`cgroup_limits`),
    the limits that actually apply."""
    cg = cgroup_limits()
    soft, hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    unl = resource.RLIM_INFINITY
    return {
        "cgroup_version": cg["cgroup_version"],
        "cgroup_path": cg["cgroup_path"],
        "memory_limit_bytes": cg["limit_bytes"],
        "memory_limit_scope": "tightest of this cgroup and its parents",
        "cpu_quota_cores": cg["cpu_quota_cores"],
        "memlock_soft_bytes": None if soft == unl else soft,
        "memlock_hard_bytes": None if hard == unl else hard,
        "docker": Path("/.dockerenv").exists(),
        "podman": Path("/run/.containerenv").exists(),
        "dmi_product": _read("/sys/class/dmi/id/product_name"),
        "dmi_vendor": _read("/sys/class/dmi/id/sys_vendor"),
        "is_root": os.geteuid() == 0,
        "can_drop_caches": os.access("/proc/sys/vm/drop_caches", os.W_OK),
    }


def _mount_for(path: Path) -> dict:
    best = None
    real = os.path.realpath(path)
    for line in (_read("/proc/self/mountinfo", "") or "").splitlines():
        left, _, right = line.partition(" - ")
        parts = left.split()
        if len(parts) < 5:
            continue
        mnt = parts[4].replace("\\040", " ")
        if real == mnt or real.startswith(mnt.rstrip("/") + "/") or mnt == "/":
            if best is None or len(mnt) > len(best[0]):
                fstype, source, *opts = right.split() + [""]
                best = (mnt, fstype, source, parts[5], opts[0] if opts else "")
    if not best:
        return {}
    return {"mount_point": best[0], "fs_type": best[1], "source": best[2], "mount_options": best[3]}


def storage_info(path) -> dict:
    """The block device and file system that hold ``path``."""
    path = Path(path)
    while not path.exists() and path != path.parent:
        path = path.parent
    st = os.stat(path)
    major, minor = os.major(st.st_dev), os.minor(st.st_dev)
    out = {"path": str(path), "device_number": f"{major}:{minor}", **_mount_for(path)}
    sysdev = Path(f"/sys/dev/block/{major}:{minor}")
    if not sysdev.exists():
        out["block_device"] = None
        out["note"] = "not on a block device (virtual or network file system)"
        return out
    dev = sysdev.resolve()
    disk = dev.parent if (dev / "partition").exists() else dev
    q = disk / "queue"
    sched = _read(q / "scheduler")
    if sched and "[" in sched:
        sched = sched[sched.index("[") + 1 : sched.index("]")]
    out.update(
        block_device=dev.name,
        disk=disk.name,
        model=_read(disk / "device" / "model"),
        rotational=_read(q / "rotational") == "1" if _read(q / "rotational") else None,
        scheduler=sched,
        read_ahead_kb=_int(_read(q / "read_ahead_kb")),
        logical_block_size=_int(_read(q / "logical_block_size")),
        max_sectors_kb=_int(_read(q / "max_sectors_kb")),
        nr_requests=_int(_read(q / "nr_requests")),
        size_bytes=(_int(_read(dev / "size")) or 0) * 512 or None,
    )
    return out


def gpu_info() -> dict:
    """GPU model, memory and PCIe link, from torch and nvidia-smi; ``available`` False without CUDA."""
    info: dict = {"available": False}
    try:
        import torch
    except ImportError:
        return {**info, "note": "torch not installed"}
    if not torch.cuda.is_available():
        return {**info, "note": "no CUDA device visible to torch"}
    props = torch.cuda.get_device_properties(0)
    info.update(
        available=True,
        count=torch.cuda.device_count(),
        name=props.name,
        memory_bytes=props.total_memory,
        compute_capability=f"{props.major}.{props.minor}",
        multiprocessors=props.multi_processor_count,
    )
    q = "driver_version,pcie.link.gen.current,pcie.link.gen.max,pcie.link.width.current,pcie.link.width.max"
    smi = _run(["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits", "-i", "0"])
    if smi:
        vals = [v.strip() for v in smi.splitlines()[0].split(",")]
        keys = ["driver", "pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max"]
        for k, v in zip(keys, vals, strict=False):
            info[k] = v if k == "driver" else _int(v)
    return info


#: Distributions whose versions every result records (None when not installed): everything a
#: chapter imports, so two runs can be compared library by library.
LIBRARIES = ("torch", "torchvision", "numpy", "pandas", "plotly", "papermill", "Pillow", "psutil", "tokenizers",
             "transformers", "mosaicml-streaming", "nvidia-ml-py", "jupyter-book", "spdl", "kvikio-cu12",
             "kvikio-cu13", "megatron-core")


def host_info() -> dict:
    """Which machine and which boot: a host name, a stable host id (a digest of /etc/machine-id, so
    the id itself is not published) and the boot id, so results can be told apart by machine and boot."""
    import hashlib

    machine_id = _read("/etc/machine-id") or _read("/var/lib/dbus/machine-id")
    return {
        "name": platform.node() or None,
        "id": hashlib.sha256(machine_id.encode()).hexdigest()[:12] if machine_id else None,
        "boot_id": _read("/proc/sys/kernel/random/boot_id"),
        "numa_nodes": len(list(Path("/sys/devices/system/node").glob("node[0-9]*"))) or None,
        "llc": _read("/sys/devices/system/cpu/cpu0/cache/index3/size"),
    }


def software_info() -> dict:
    from importlib import metadata

    vers = {"python": platform.python_version()}
    for dist in LIBRARIES:
        try:
            vers[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            vers[dist] = None
    if vers.get("torch") is None:  # a torch built from source or vendored in an image may lack metadata
        try:
            vers["torch"] = __import__("torch").__version__
        except ImportError:
            pass
    try:
        import torch

        vers["cuda"] = torch.version.cuda
        vers["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    except ImportError:
        vers["cuda"] = None
    from datajourney import __version__

    vers["datajourney"] = __version__
    vers["git_commit"] = git_commit()
    return vers


def git_commit() -> str | None:
    """The commit of this checkout's code (12 characters). A copy of the tree shipped to another host names its
    commit in the environment; that wins over whatever .git the copy may carry (it can be stale)."""
    from datajourney.core.paths import REPO_ROOT

    return os.environ.get("DATAJOURNEY_GIT_COMMIT") or _run(["git", "-C", str(REPO_ROOT), "rev-parse", "--short=12",
                                                              "HEAD"])


def fingerprint(data_dir=None, parameters: dict | None = None) -> dict:
    """The full fingerprint; ``data_dir`` picks the storage device that is described."""
    from datajourney.core.paths import default_data_dir

    storage = storage_info(data_dir or default_data_dir())
    source = data_dir_source(parameters or {})
    if source:
        storage["data_dir_from"] = source
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "os": {
            "kernel": platform.release(),
            "distribution": _os_release(),
        },
        "host": host_info(),
        "cpu": cpu_info(),
        "memory": memory_info(),
        "container": container_info(),
        "storage": storage,
        "gpu": gpu_info(),
        "software": software_info(),
        "parameters": parameters or {},
    }


def data_dir_source(parameters: dict) -> str | None:
    """Where a run's data sets went, by what chose the directory: "data_dir" (the parameter was set),
    ``DATAJOURNEY_DATA_DIR`` (the environment variable, the parameter unset) or "default"
    (``~/.cache/datajourney``); None for a chapter without a ``data_dir`` parameter. Recorded so the book can
    say which directory a run used without printing the machine's own path."""
    from datajourney.core.paths import DATA_DIR_ENV

    if "data_dir" not in parameters:
        return None
    if parameters["data_dir"] is not None:
        return "data_dir"
    return DATA_DIR_ENV if os.environ.get(DATA_DIR_ENV) else "default"


def _os_release():
    for line in (_read("/etc/os-release", "") or "").splitlines():
        if line.startswith("PRETTY_NAME="):
            return line.split("=", 1)[1].strip('"')
    return None


#: Characters of a commit id as the book prints it (git's own short form), whatever length a run recorded.
COMMIT_CHARS = 7


def short_commit(commit) -> str | None:
    """A commit id as the book prints it: its first :data:`COMMIT_CHARS` hex digits (runs record 12 or 40),
    anything that is not a hex id as it is; None stays None."""
    if not commit:
        return None
    c = str(commit).strip()
    return c[:COMMIT_CHARS] if re.fullmatch(r"[0-9a-fA-F]{7,40}", c) else c


def size_text(value) -> str | None:
    """A size as sysfs writes it ("307200K", "32M", "512") in the book's binary units ("300 MiB")."""
    from datajourney.core.units import size_label

    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)i?B?\s*", str(value or ""))
    if not m:
        return None if value in (None, "") else str(value)
    return size_label(int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)])


def _readahead(kb) -> str:
    """A device's readahead (sysfs's ``read_ahead_kb``) in the book's binary units: "8 MiB"; n/a where unknown."""
    return size_text(f"{kb}K") if isinstance(kb, int) or str(kb).isdigit() else "n/a"


def summary(fp: dict) -> dict:
    """A flat, human-sized view of a fingerprint for tables."""
    g, s, c, m, k = fp["gpu"], fp["storage"], fp["cpu"], fp["memory"], fp["container"]
    gib = lambda b: f"{b / 2**30:.0f} GiB" if b else "n/a"  # noqa: E731
    link = (
        f"PCIe {g.get('pcie_gen_max')}.0 x{g.get('pcie_width_max')} (trained at gen {g.get('pcie_gen_current')} "
        f"x{g.get('pcie_width_current')} when read; idle links may run slower)"
        if g.get("pcie_gen_max")
        else "n/a"
    )
    h = fp.get("host") or {}
    sw = fp["software"]
    libs = ", ".join(f"{k} {v}" for k, v in sw.items()
                     if v and k not in ("python", "torch", "cuda", "cudnn", "datajourney", "git_commit"))
    return {
        "Host (name · id · boot)": " · ".join(str(h.get(k) or "n/a") for k in ("name", "id", "boot_id"))
        if h else "not recorded",
        "GPU": f"{g['count']}x {g['name']}, {gib(g['memory_bytes'])}" if g.get("available") else "none",
        "PCIe link": link,
        "CPU": c.get("model"),
        "NUMA nodes / last-level cache": (f"{h.get('numa_nodes') or 'n/a'} / {size_text(h.get('llc')) or 'n/a'}"
                                          if h else "n/a"),
        "Cores (usable / logical)": f"{c.get('usable_cores')} / {c.get('logical_cores')}",
        "RAM": gib(m.get("total_bytes")),
        "Virtualised": "yes" if c.get("hypervisor") else "no",
        "Storage device": " ".join(
            str(x) for x in (s.get("disk"), s.get("model")) if x
        ) or s.get("note", "n/a"),
        "Scheduler / readahead": f"{s.get('scheduler')} / {_readahead(s.get('read_ahead_kb'))}",
        "File system": f"{s.get('fs_type')} on {s.get('mount_point')}",
        "Kernel": fp["os"]["kernel"],
        "cgroup memory limit (tightest up the tree)": (gib(k.get("memory_limit_bytes"))
                                                      if k.get("memory_limit_bytes") else "none"),
        "CPU quota": f"{k['cpu_quota_cores']:.1f} cores" if k.get("cpu_quota_cores") else "none",
        "Cache purge allowed": "drop_caches (root)" if k.get("can_drop_caches") else "fadvise only",
        "Python / torch / CUDA": (f"{sw['python']} / {sw.get('torch') or 'not installed'} / "
                                  f"{sw.get('cuda') or 'none (a CPU build of torch)'}"),
        "Libraries": libs or "n/a",
        "Code (git commit)": short_commit(sw.get("git_commit")) or "n/a",
        "Date (UTC)": fp["date_utc"],
    }
