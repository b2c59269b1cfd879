"""Parameter checks shared by every chapter.

Each check raises :class:`ParameterError` naming the parameter and the allowed range, so
that bad input fails before any data is generated or any timing starts.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path


class ParameterError(ValueError):
    """A parameter is outside its allowed range; the message names it."""

    def __init__(self, name: str, value, allowed: str):
        self.name = name
        self.value = value
        self.allowed = allowed
        super().__init__(f"parameter {name!r} = {value!r} is invalid: allowed {allowed}")


def positive_int(name: str, value, *, maximum: int | None = None) -> int:
    """An integer >= 1 (and <= maximum when given)."""
    allowed = f"an integer from 1 to {maximum:,}" if maximum else "an integer >= 1"
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ParameterError(name, value, allowed)
    if maximum is not None and value > maximum:
        raise ParameterError(name, value, allowed)
    return value


def choice(name: str, value, allowed: Sequence[str]) -> str:
    """One of a fixed set of strings."""
    if value not in allowed:
        raise ParameterError(name, value, "one of " + ", ".join(repr(a) for a in allowed))
    return value


def writable_dir(name: str, path, *, create: bool = True) -> Path:
    """A directory we can write to. Its parent must exist; it is created if missing.

    Race-free, so runs started together may check the same new directory: creating it accepts
    one another run made a moment earlier (``exist_ok``), and the probe that really writes (as
    ``os.access`` lies for root on read-only mounts) is a file of a unique name (``mkstemp``)."""
    if path is None or not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise ParameterError(name, path, "a directory path")
    p = Path(path).expanduser()
    if not p.exists():
        if not create or not p.parent.is_dir():
            raise ParameterError(name, str(path), "an existing directory (or one whose parent exists)")
        try:
            p.mkdir(exist_ok=True)
        except OSError as e:
            raise ParameterError(name, str(path), f"a writable directory ({e.strerror})") from None
    if not p.is_dir():
        raise ParameterError(name, str(path), "a directory, not a file")
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-probe-", dir=p)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        raise ParameterError(name, str(path), f"a writable directory ({e.strerror})") from None
    return p


def creatable_dir(name: str, path) -> Path:
    """A directory that exists and is writable, or could be created: its nearest existing
    ancestor is a writable directory. Nothing is created."""
    if path is None or not isinstance(path, (str, os.PathLike)) or str(path) == "":
        raise ParameterError(name, path, "a directory path")
    p = Path(path).expanduser().absolute()
    probe = p
    while not probe.exists():
        probe = probe.parent
    if not probe.is_dir():
        raise ParameterError(name, str(path), f"a directory path ({probe} is a file)")
    writable_dir(name, probe, create=False)
    return p


def free_space(name: str, path: Path, needed_bytes: int, *, margin: float = 0.05, inodes: int = 0,
               pending_bytes: int = 0, pending_inodes: int = 0) -> None:
    """Fail when the file system holding ``path`` has less free space than needed.

    The margin scales with what is written: ``margin`` of it, at least 1 MiB (a small data
    set fits a small disk). ``inodes``: files and directories to create, checked against the
    free inodes where the file system has a limit. ``pending_bytes``/``pending_inodes``: what
    other runs are still writing to the same file system; it is needed too.
    """
    want_bytes = needed_bytes + pending_bytes
    free = shutil.disk_usage(path).free
    want = want_bytes + max(int(want_bytes * margin), MIN_MARGIN_BYTES)
    if free < want:
        others = f", other runs are still writing {size_text(pending_bytes)}" if pending_bytes else ""
        raise ParameterError(
            name,
            str(path),
            f"a location with at least {size_text(want)} free "
            f"(the data set needs {size_text(needed_bytes)}{others}; {size_text(free)} free)",
        )
    if inodes or pending_inodes:
        try:
            st = os.statvfs(path)
        except OSError:
            return
        if st.f_files == 0:  # no inode limit (btrfs, some network file systems)
            return
        want_i = inodes + pending_inodes
        want_i += max(int(want_i * margin), 64)
        if st.f_favail < want_i:
            others = f", other runs are still creating {pending_inodes:,}" if pending_inodes else ""
            raise ParameterError(
                name, str(path),
                f"a file system with at least {want_i:,} free inodes (the data set needs {inodes:,} "
                f"files and directories{others}; {st.f_favail:,} free)")


#: The smallest free-space margin: room for the manifest, index and file-system metadata.
MIN_MARGIN_BYTES = 1 << 20
#: The most images a synthetic image data set may hold (the chapters' image counts are declared up to it).
MAX_IMAGES = 10_000_000


def size_text(n: float) -> str:
    """Bytes for people: '250 KiB', '20.0 MiB', '1.25 GiB'."""
    for unit, shift in (("TiB", 40), ("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:.2f} {unit}" if v < 10 else f"{v:.1f} {unit}" if v < 100 else f"{v:,.0f} {unit}"
    return f"{int(n)} bytes"


def boolean(name: str, value) -> bool:
    """A real boolean (YAML ``true``/``false``); strings such as 'maybe' or 'yes' are refused."""
    if not isinstance(value, bool):
        raise ParameterError(name, value, "true or false")
    return value


def requires(name: str, value, module: str, install: str) -> None:
    """Fail when the option ``name = value`` needs a library that cannot be imported here."""
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ParameterError(name, value, f"an option this machine can run ({value!r} needs {install})")


def available_memory() -> tuple[int, str]:
    """(bytes this process can still allocate, what limits it): the least of the machine's
    available memory (psutil), the room left under the tightest cgroup memory limit of this
    process's cgroup and its parents (a container's limit, which psutil does not see and which
    the out-of-memory killer enforces; :func:`~datajourney.book.fingerprint.cgroup_limits`), and
    the address space left under ``ulimit -v``."""
    import resource

    import psutil

    from datajourney.core.fingerprint import cgroup_limits

    out = [(psutil.virtual_memory().available, "available memory")]
    cg = cgroup_limits()
    if cg["limit_bytes"] is not None and cg["used_bytes"] is not None:
        out.append((max(0, cg["limit_bytes"] - cg["used_bytes"]),
                    f"the cgroup memory limit (tightest of {cg['cgroup_path']} and its parents)"))
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY:
        used = psutil.Process().memory_info().vms
        out.append((max(0, soft - used), "the address-space limit (ulimit -v)"))
    return min(out)


def memory(name: str, value, needed_bytes: int, *, what: str) -> None:
    """Fail when ``what`` needs more memory than this process can have (see :func:`available_memory`)."""
    available, limit = available_memory()
    if needed_bytes > available:
        raise ParameterError(name, value, f"a value for which {what} fits in memory "
                                          f"(needs {needed_bytes / 2**30:.1f} GiB, {available / 2**30:.1f} GiB "
                                          f"available under {limit})")


#: A reference host's name, a folder of data/reference/ (used with fullmatch: no trailing newline).
HOST_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")


def host_name(name: str, value) -> str:
    """``value`` as a reference host's name (a folder of data/reference/, existing or new)."""
    if not isinstance(value, str) or not HOST_NAME.fullmatch(value):
        raise ParameterError(name, value, "a plain host name: lower-case letters, digits, '_' and '-' (e.g. h200)")
    return value


def run_options(params: dict) -> dict:
    """The options the runner gives every notebook, checked: ``is_reference_run`` (a boolean),
    ``reference_host`` (None or a host with committed reference results; in a reference run, the host
    being recorded, which may be new: a plain name) and ``run_dir`` (a directory that can be created).
    Returns those present, checked."""
    out = {}
    if "is_reference_run" in params:
        out["is_reference_run"] = boolean("is_reference_run", params["is_reference_run"])
    if out.get("is_reference_run") and params.get("reference_host") is not None:
        host_name("reference_host", params["reference_host"])
    elif params.get("reference_host") is not None:
        from datajourney.core.paths import reference_hosts

        hosts = reference_hosts()
        if params["reference_host"] not in hosts:
            raise ParameterError("reference_host", params["reference_host"],
                                 "None or a host under data/reference/: " + (", ".join(hosts) or "none committed"))
    if params.get("run_dir") not in (None, ""):
        out["run_dir"] = creatable_dir("run_dir", params["run_dir"])
    return out


#: Options every notebook takes that belong to the book, not to an experiment: where results go,
#: which reference to compare with, whether this run becomes the reference, a run to render again.
BOOK_OPTIONS = ("run_dir", "reference_host", "is_reference_run", "replay")


# ----------------------------------------------------------------------------- declared parameters
#: The kinds of value a parameter declared with :func:`param` takes, and how each is checked.
KINDS = ("int", "float", "bool", "str", "choice", "int_list", "float_list", "str_list", "path", "any")


@dataclasses.dataclass(frozen=True)
class Spec:
    """One parameter, declared once (as fio declares an option): its kind, range, choices, unit and help.
    The generic validator (:meth:`ChapterParams.checked`), the notebook's parameters cell
    (:func:`parameters_cell`) and the Parameters table read it; nothing else holds a default."""

    kind: str
    help: str
    minimum: float | None = None
    maximum: float | None = None
    choices: tuple = ()
    unit: str = ""
    #: also accepts None ("off", "auto-detect") besides the declared kind
    optional: bool = False
    #: a further value of another kind it accepts, e.g. "auto" for a number chosen by the run
    also: tuple = ()

    def allowed(self) -> str:
        """The allowed values in words, for a one-line error."""
        lo = "" if self.minimum is None else f"{self.minimum:,g}"
        hi = "" if self.maximum is None else f"{self.maximum:,g}"
        rng = f" from {lo} to {hi}" if lo and hi else f" >= {lo}" if lo else f" <= {hi}" if hi else ""
        base = {"int": f"an integer{rng}", "float": f"a number{rng}", "bool": "true or false",
                "str": "a text", "path": "a directory path",
                "choice": "one of " + ", ".join(repr(c) for c in self.choices),
                "int_list": f"a list of integers{rng}", "float_list": f"a list of numbers{rng}",
                "str_list": "a list drawn from " + ", ".join(repr(c) for c in self.choices) if self.choices
                else "a list of texts", "any": "any value"}[self.kind]
        extra = [repr(a) for a in self.also] + (["null"] if self.optional else [])
        return base + (" or " + " or ".join(extra) if extra else "")

    def check(self, name: str, value):
        """``value`` checked against this declaration (lists: order kept, duplicates dropped); a
        :class:`ParameterError` naming ``name`` otherwise."""
        if value is None and self.optional:
            return None
        if self.also and isinstance(value, str) and value in self.also:
            return value
        bad = ParameterError(name, value, self.allowed())

        def in_range(v) -> bool:
            return (self.minimum is None or v >= self.minimum) and (self.maximum is None or v <= self.maximum)

        def scalar(kind, v):
            if kind == "int":
                if isinstance(v, bool) or not isinstance(v, int) or not in_range(v):
                    raise bad
            elif kind == "float":
                import math
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not in_range(v):
                    raise bad
                v = float(v)
            elif kind == "str":
                if not isinstance(v, str) or (self.choices and v not in self.choices):
                    raise bad
            return v

        k = self.kind
        if k == "any":
            return value
        if k == "bool":
            if not isinstance(value, bool):
                raise bad
            return value
        if k == "choice":
            if value not in self.choices:
                raise bad
            return value
        if k == "path":
            if not isinstance(value, (str, os.PathLike)) or str(value) == "" or "\x00" in str(value):
                raise bad
            return str(value)
        if k.endswith("_list"):
            if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
                raise bad
            out = list(dict.fromkeys(scalar(k.removesuffix("_list"), v) for v in value))
            if not out and self.minimum is not None and k != "str_list":
                raise bad
            return out
        return scalar(k, value)


def param(default, help: str, *, kind: str | None = None, minimum: float | None = None,
          maximum: float | None = None, choices=(), unit: str = "", optional: bool = False, also=()):
    """A dataclass field of a chapter's ``Params`` declared with everything known about it (see
    :class:`Spec`). ``kind`` is inferred from the default where it can be."""
    if kind is None:
        kind = ("bool" if isinstance(default, bool) else "int" if isinstance(default, int)
                else "float" if isinstance(default, float) else "choice" if choices and isinstance(default, str)
                else "str" if isinstance(default, str)
                else "int_list" if isinstance(default, list) and all(isinstance(v, int) for v in default) and default
                else "str_list" if isinstance(default, list) else "any")
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {KINDS}")
    spec = Spec(kind, help, minimum, maximum, tuple(choices), unit, optional or default is None, tuple(also))
    if isinstance(default, (list, dict)):
        import copy
        return dataclasses.field(default_factory=lambda: copy.deepcopy(default), metadata={"spec": spec})
    return dataclasses.field(default=default, metadata={"spec": spec})


def spec_of(field: dataclasses.Field) -> Spec | None:
    """The :class:`Spec` a field was declared with (None for a field not declared with :func:`param`)."""
    return field.metadata.get("spec")


def parameters_cell(params_cls) -> str:
    """The source of a notebook's cell tagged ``parameters``, generated from ``params_cls``: every
    parameter as a reader types it, with its help (and unit) as a comment. A test keeps each committed
    notebook's cell equal to this; ``python -m datajourney.book.cells`` rewrites them."""
    lines = ["# Parameters (papermill): generated from the chapter's Params; every knob, its default and what it sets."]
    for f in dataclasses.fields(params_cls):
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        spec = spec_of(f)
        doc = spec.help + (f" ({spec.unit})" if spec and spec.unit else "") if spec else ""
        lines.append(f"{f.name} = {default!r}" + (f"  # {doc}" if doc else ""))
    lines += [f"{name} = {value!r}  # {doc}" for name, (value, doc) in BOOK_OPTION_DOCS.items()]
    return "\n".join(lines)


#: The book's options as every parameters cell ends with them: (default, what it sets).
BOOK_OPTION_DOCS = {
    "reference_host": (None, "whose committed reference run to compare with (None: the book's reference host)"),
    "is_reference_run": (False, "set by the runner when this run becomes the reference"),
    "run_dir": (None, "this run's directory (None: results/interactive)"),
    "replay": (None, "a finished run directory to render instead of measuring again"),
}


class ChapterParams:
    """Base of every chapter's ``Params`` dataclass (``datajourney.chapters.cNN_*.params``).

    A chapter's dataclass declares each parameter once with :func:`param` (default, kind, range,
    choices, unit, help); the notebook's parameters cell, the profiles and ``run()`` all start from it,
    and :meth:`checked` is the one generic validator."""

    def checked(self):
        """A copy with every declared field checked against its :class:`Spec` (lists de-duplicated);
        the first bad one raises :class:`ParameterError` naming it. Cross-field checks (free space,
        memory, libraries) stay in the chapter's ``preflight``."""
        out = {}
        for f in dataclasses.fields(self):
            spec = spec_of(f)
            v = getattr(self, f.name)
            out[f.name] = spec.check(f.name, v) if spec is not None else v
        return dataclasses.replace(self, **out)

    @classmethod
    def specs(cls) -> dict[str, Spec]:
        """Every declared parameter's :class:`Spec`, by name."""
        return {f.name: spec_of(f) for f in dataclasses.fields(cls) if spec_of(f) is not None}

    @classmethod
    def coerce(cls, params):
        """``params`` as this class: an instance as it is, a mapping of names (the runner's, a profile's)
        with unknown names refused."""
        if isinstance(params, cls):
            return params
        return cls().replace(**{k: v for k, v in dict(params).items() if k not in BOOK_OPTIONS})

    @classmethod
    def names(cls) -> list[str]:
        """The parameter names, in the order the dataclass declares them."""
        return [f.name for f in dataclasses.fields(cls)]

    @classmethod
    def defaults(cls) -> dict:
        """Every parameter's default value (fresh copies of list defaults)."""
        return dataclasses.asdict(cls())

    @classmethod
    def value_of(cls, result, name: str):
        """The value of parameter ``name`` that the run of ``result`` used: as the result stored it, else its one
        declared default (a result written before the parameter existed ran with it). ``result`` is a result or
        its parameters (a mapping); a name this class does not declare is a KeyError, never a silent default."""
        if name not in cls.names():
            raise KeyError(f"{cls.__module__}.{cls.__name__} declares no parameter {name!r}")
        stored = result if isinstance(result, Mapping) else (getattr(result, "parameters", None) or {})
        return stored[name] if name in stored else cls.defaults()[name]

    @classmethod
    def from_namespace(cls, namespace: Mapping):
        """The parameters as a notebook holds them: its parameters cell's names, picked from
        ``namespace`` (e.g. ``globals()``); a name it lacks keeps its default."""
        return cls(**{n: namespace[n] for n in cls.names() if n in namespace})

    def replace(self, **changes):
        """A copy with ``changes``; an unknown name is a :class:`ParameterError` naming it."""
        for name in changes:
            if name not in self.names():
                import difflib

                near = difflib.get_close_matches(name, self.names(), n=1)
                hint = f"did you mean {near[0]!r}? (parameters of this chapter: " if near else \
                    "a parameter of this chapter: "
                raise ParameterError(name, changes[name], hint + ", ".join(self.names()) + (")" if near else ""))
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict:
        """The parameters as a plain dict (what result files record)."""
        return dataclasses.asdict(self)
