"""Capturing what a sharded run compiled and executed, from outside the process.

torch_xla and XLA read their debug switches once, when they start, so a capture is set up in
the environment of the process before it starts (``xlabridge report`` controls its child's
environment). The ways, and what each costs (``tools/bench/pod_capture_overhead.py`` measures
them on a sharded training step against an A/A control of two plain runs; every way but the
last stays within the control's spread):

``DEBUG_FILE`` (``PT_XLA_DEBUG_LEVEL=2``, ``PT_XLA_DEBUG_FILE``)
    Every compilation and execution: cause, graph hash, triggering frames. Per-step cost in
    the noise. The backbone of ``LazyTrace``.
``HLO_DUMP`` (``XLA_FLAGS=--xla_dump_to=... --xla_dump_hlo_as_text --xla_dump_hlo_as_proto``)
    Every module XLA compiles, optimized and partitioned: the collectives the run executes.
    Costs file writes per compilation, nothing per step.
``SOURCE_LINES`` (``XLA_HLO_DEBUG=1``)
    torch_xla records each instruction's Python stack (in the proto) and innermost source line
    (in the text): where each collective comes from. Costs at tracing.
``SAVED_GRAPHS`` (``XLA_SAVE_TENSORS_FILE``, ``XLA_SAVE_TENSORS_FMT=hlo``)
    torch_xla's HLO of every *synced* graph with its hash and full stack. It lowers the graph
    to HLO text at every sync, cached or not (within the noise on the benchmark's MLP; it grows
    with the graph).
``SAVED_PARTITIONED`` (adds ``XLA_DUMP_POST_OPTIMIZATIONS=1``)
    The saved HLO is the optimized, partitioned module, joined to the graph hash exactly; but
    torch_xla runs XLA's optimization passes again at every sync to print it, several times the
    step time of the benchmark's MLP. For short diagnostic runs only.

``DEFAULT`` (debug file, HLO dump, source lines) costs nothing per step beyond source lines
and gives collectives per graph; ``read_capture`` joins each graph of the debug file to the
module XLA compiled for it (by compilation order and argument/result counts). In the user's
own process, without any of this, ``xlabridge.pod.partition_hlo`` partitions a graph's
pre-partition proto in a worker (a second or two, after the steps).

A process whose ``XLA_FLAGS`` already dump to a directory of the user's keeps that dump
(``plan_capture``): XLA goes on writing there with every dump option the user gave, the capture
reads the modules from there (only the files this run wrote: an earlier run's are left alone,
and nothing is deleted), and what the capture must add or lift is said in ``CapturePlan.notes``:
the text or proto format the user did not ask for, a module filter or limit, or metadata turned
off. The other variables the capture sets replace a user's own value only with a note too.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path

from xlabridge import _env
from xlabridge.errors import DiagnosticsWarning
from xlabridge.pod._hlo_text import parse_module, split_top_level
from xlabridge.pod._dump import CompiledModule, read_dump, snapshot
from xlabridge.pod._lazy import LazyGraph, LazyTrace, read_lazy_trace

__all__ = ["DEFAULT", "Capture", "CapturePlan", "CaptureWay", "capture_environment", "plan_capture", "read_capture"]

_DEBUG_FILE = "pt_xla_debug.txt"
_SAVE_FILE = "saved_graphs.txt"
_DUMP_DIR = "xla_dump"
_DUMP_RECORD = "xla_dump.json"
"""Where the capture's dump went, and that directory's files before the run (``read_capture``)."""

_DUMP_TO = "xla_dump_to"
_AS_TEXT = "xla_dump_hlo_as_text"
_AS_PROTO = "xla_dump_hlo_as_proto"
_OTHER_FORMATS = ("xla_dump_hlo_as_dot", "xla_dump_hlo_as_html", "xla_dump_hlo_as_url", "xla_dump_hlo_snapshots")
"""With any of these (or the proto) and no ``--xla_dump_hlo_as_text``, XLA writes no text."""
_NOT_A_DIRECTORY = ("", "-", "sponge", "test_undeclared_outputs_dir")
"""``--xla_dump_to`` values that are not a directory: stdout (``-``, or a format without a
directory), the test outputs directory of Bazel (``sponge``)."""


def _flags(text: str) -> list[tuple[str, str | None, str]]:
    """``XLA_FLAGS`` as (name, value or None for a bare flag, token), in order (XLA splits on spaces)."""
    parsed = []
    for token in text.split():
        name, equals, value = token.lstrip("-").partition("=")
        parsed.append((name, value if equals else None, token))
    return parsed


def _true(value: str | None) -> bool:
    return value is None or value.lower() in ("true", "1")


def _last(flags: list[tuple[str, str | None, str]], name: str) -> tuple[bool, str | None]:
    """(given, value) of the last ``--name`` (XLA keeps the last)."""
    for flag, value, _ in reversed(flags):
        if flag == name:
            return True, value
    return False, None


# Options of the user's dump that would hide modules or metadata from the capture: lifted, with a note.
# name: (whether its value hides something, what lifting it means for the user's directory)
_LIFTED = {
    "xla_dump_hlo_module_re": (lambda value: bool(value), "{dump} also holds the modules it leaves out"),
    "xla_dump_max_hlo_modules": (lambda value: value is not None and value.lstrip("-").isdigit() and int(value) > 0,
                                 "{dump} may hold more modules"),
    "xla_dump_disable_metadata": (_true, "the text files hold each instruction's metadata (op, source line)"),
    "xla_detailed_logging_and_dumping": (lambda value: not _true(value), "XLA dumps (and logs in detail)"),
}


def _user_environment(names: Iterable[str], environ: Mapping[str, str] | None = None) -> dict[str, str | None]:
    """The values of ``names`` as the user set them: a parent process's capture (recorded in
    ``XLABRIDGE_POD_SET``) undone where this process inherited it unchanged. ``environ``: the
    variables to read (this process's by default)."""
    read = _env.get if environ is None else environ.get
    values = {name: read(name) for name in names}
    try:
        inherited = json.loads(read(_env.POD_SET) or "{}")
    except ValueError:
        inherited = {}
    for name, (user, set_value) in inherited.items():
        current = values.get(name)
        if name not in values or current is None:
            continue
        if current == set_value:
            values[name] = user
        elif name == _env.XLA_FLAGS and current.startswith(set_value):  # the parent program added flags
            values[name] = f"{user or ''} {current[len(set_value):]}".strip()
    return values


def without_capture(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with a capture's variables back at the user's values, for a helper process that
    must not write into the capture (XLA's dump numbers modules per process: a second process in one
    dump directory writes a second ``module_0000``; torch_xla appends to the debug file)."""
    try:
        captured = list(json.loads(environ.get(_env.POD_SET) or "{}"))
    except ValueError:
        captured = []
    env = dict(environ)
    for name, value in _user_environment(captured, environ).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    env.pop(_env.POD_SET, None)
    return env


@dataclasses.dataclass(frozen=True)
class CapturePlan:
    """What a process about to start needs in its environment to be captured, and what differs
    from what the user configured (``notes``, in words; empty when nothing does)."""

    environment: dict[str, str]
    dump: Path
    """Where XLA dumps the modules: the user's own ``--xla_dump_to`` directory where there is one."""
    notes: tuple[str, ...] = ()


class CaptureWay(enum.Flag):
    DEBUG_FILE = enum.auto()
    HLO_DUMP = enum.auto()
    SOURCE_LINES = enum.auto()
    SAVED_GRAPHS = enum.auto()
    SAVED_PARTITIONED = enum.auto()


DEFAULT = CaptureWay.DEBUG_FILE | CaptureWay.HLO_DUMP | CaptureWay.SOURCE_LINES


def _hides(flag: str, value: str | None) -> bool:
    return flag in _LIFTED and _LIFTED[flag][0](value)


def _lifted_notes(flags: list[tuple[str, str | None, str]], dump: Path, names: Iterable[str]) -> list[str]:
    notes = []
    for flag in names:
        given, value = _last(flags, flag)
        if given and _hides(flag, value):
            shown = f"--{flag}" + (f"={value}" if value is not None else "")
            notes.append(f"XLA_FLAGS {shown} is lifted (the capture reads every module XLA compiles): "
                         + _LIFTED[flag][1].format(dump=dump))
    return notes


def _dump_flags(flags: list[tuple[str, str | None, str]], ours: Path,
                subdirectory: str | None) -> tuple[list[str], Path, list[str]]:
    """XLA_FLAGS tokens that dump every module as text and proto, the dump directory, and notes."""
    given, dump_to = _last(flags, _DUMP_TO)
    formats = any(_true(value) for flag, value, _ in flags if flag in (_AS_TEXT, _AS_PROTO, *_OTHER_FORMATS))
    if not given or (dump_to or "").lower() in _NOT_A_DIRECTORY:
        # No directory of the user's: the capture's own, with its options only.
        tokens = [token for flag, value, token in flags if not flag.startswith("xla_dump") and not _hides(flag, value)]
        notes = _lifted_notes(flags, ours, [flag for flag in _LIFTED if not flag.startswith("xla_dump")])
        if given or formats:
            where = f"--xla_dump_to={dump_to}" if dump_to not in (None, "", "-") else "stdout"
            notes.append(f"XLA_FLAGS dump XLA's modules to {where}: under --pod they go to {ours} instead")
        return [*tokens, f"--{_DUMP_TO}={ours}", f"--{_AS_TEXT}", f"--{_AS_PROTO}"], ours, notes
    # The user's directory: every option of theirs stays, but those that hide modules or metadata.
    user_dump = Path(dump_to).absolute()  # XLA's relative path is the process's working directory's
    dump = user_dump / subdirectory if subdirectory else user_dump
    tokens = [token for flag, value, token in flags
              if not _hides(flag, value)
              and not (flag in (_AS_TEXT, _AS_PROTO) and not _true(value))
              and not (flag == _DUMP_TO and subdirectory)]
    notes = _lifted_notes(flags, dump, _LIFTED)
    if subdirectory:
        tokens.append(f"--{_DUMP_TO}={dump}")
        notes.append(f"the processes of this run share --xla_dump_to={user_dump}, where XLA would write their "
                     f"modules over each other's (it numbers them per process): this process dumps to {dump}")
    for flag, files in ((_AS_TEXT, "the modules' text (.txt)"), (_AS_PROTO, "each module's proto (.hlo.pb)")):
        given_flag, value = _last(flags, flag)
        if given_flag and _true(value):
            continue
        tokens.append(f"--{flag}")
        if flag == _AS_PROTO or given_flag or formats:  # text is XLA's default when no format is given
            notes.append(f"XLA_FLAGS gets --{flag} (the capture reads it): {dump} also holds {files}")
    return tokens, dump, notes


DEBUG_MAX_FRAMES = 128
"""Python frames torch_xla keeps per execution in the debug file (its default, 8, stops inside
torch_xla's Dynamo bridge or ``torch.nn``, before the user's line)."""


def plan_capture(
    directory: str | Path, ways: CaptureWay = DEFAULT, *, xla_flags: str | None = None,
    subdirectory: str | None = None,
) -> CapturePlan:
    """What makes a process about to start write a capture to ``directory``, keeping the user's own dump.

    ``xla_flags`` is the process's own ``XLA_FLAGS`` (default: this process's, less what a parent
    process's capture added). Where they dump to a directory, XLA keeps dumping there with every
    option given, and the capture reads it; ``subdirectory`` (for one of several processes that
    share that directory) moves this process's dump into it. Each process needs a ``directory``
    of its own: XLA numbers dumped modules per process, and torch_xla appends to its debug file.
    """
    if not isinstance(ways, CaptureWay):
        raise TypeError(f"ways must be a CaptureWay (e.g. xlabridge.pod.DEFAULT), got {ways!r}")
    if subdirectory is not None and (not subdirectory or Path(subdirectory).name != subdirectory):
        raise ValueError(f"subdirectory must be one directory name, got {subdirectory!r}")
    directory = Path(directory).resolve()
    env: dict[str, str] = {}
    notes: list[str] = []
    dump = directory / _DUMP_DIR
    if CaptureWay.DEBUG_FILE in ways:
        env[_env.PT_XLA_DEBUG_LEVEL] = "2"
        env[_env.PT_XLA_DEBUG_FILE] = str(directory / _DEBUG_FILE)
    if CaptureWay.SOURCE_LINES in ways:
        env[_env.XLA_HLO_DEBUG] = "1"
    if ways & (CaptureWay.SAVED_GRAPHS | CaptureWay.SAVED_PARTITIONED):
        env[_env.XLA_SAVE_TENSORS_FILE] = str(directory / _SAVE_FILE)
        env[_env.XLA_SAVE_TENSORS_FMT] = "hlo"
    if CaptureWay.SAVED_PARTITIONED in ways:
        env[_env.XLA_DUMP_POST_OPTIMIZATIONS] = "1"
    if CaptureWay.DEBUG_FILE in ways:
        # deep enough to reach the user's line from inside the bridge, autograd or a model library
        # (a depth the user set is kept)
        depth = _env.PT_XLA_DEBUG_MAX_FRAME
        if _user_environment((depth,))[depth] is None:
            env[depth] = str(DEBUG_MAX_FRAMES)
    user = _user_environment((*env, _env.XLA_FLAGS))
    for name, value in env.items():
        if user[name] is not None and user[name] != value:
            notes.append(f"{name}={user[name]} is replaced by {value} while --pod captures")
    if CaptureWay.HLO_DUMP in ways:
        own = (user[_env.XLA_FLAGS] or "") if xla_flags is None else xla_flags
        tokens, dump, dump_notes = _dump_flags(_flags(own), dump, subdirectory)
        env[_env.XLA_FLAGS] = " ".join(tokens)
        notes += dump_notes
        user[_env.XLA_FLAGS] = own
    env[_env.POD_SET] = json.dumps({name: [user[name], value] for name, value in env.items()})
    directory.mkdir(parents=True, exist_ok=True)
    if CaptureWay.HLO_DUMP in ways:
        external = dump.parent != directory
        record = {"dump": str(dump), "before": snapshot(dump) if external else {}}
        (directory / _DUMP_RECORD).write_text(json.dumps(record), encoding="utf-8")
    return CapturePlan(environment=env, dump=dump, notes=tuple(notes))


def capture_environment(
    directory: str | Path, ways: CaptureWay = DEFAULT, *, xla_flags: str | None = None
) -> dict[str, str]:
    """Environment variables that make a process about to start write a capture to ``directory``.

    ``xla_flags`` is the process's own ``XLA_FLAGS``, kept with the dump flags appended (default:
    this process's); a dump of the user's own stays where it is (``plan_capture``), and what the
    capture changes in it is said in one ``DiagnosticsWarning``. Each process needs a directory
    of its own: XLA numbers dumped modules per process, and torch_xla appends to its debug file.
    """
    plan = plan_capture(directory, ways, xla_flags=xla_flags)
    if plan.notes:
        warnings.warn("xlabridge.pod capture: " + "; ".join(plan.notes), DiagnosticsWarning, stacklevel=2)
    return plan.environment


def dump_directory(directory: str | Path) -> tuple[Path, dict[str, tuple[int, int]]]:
    """Where the capture in ``directory`` had XLA dump, and that directory's files before the run."""
    directory = Path(directory)
    record = directory / _DUMP_RECORD
    if not record.exists():  # a capture made before the record was kept
        return directory / _DUMP_DIR, {}
    data = json.loads(record.read_text(encoding="utf-8"))
    return Path(data["dump"]), {name: (mtime, size) for name, (mtime, size) in data.get("before", {}).items()}


def _arity(module: CompiledModule) -> tuple[int, int]:
    """(entry parameters, top-level results) of a module."""
    parsed = parse_module(module.text)
    entry = parsed.computations[parsed.entry]
    parameters = sum(1 for instruction in entry.instructions if instruction.opcode == "parameter")
    root = next((instruction for instruction in entry.instructions if instruction.is_root), None)
    if root is None or not root.shape.startswith("("):
        return parameters, 1
    return parameters, len(split_top_level(root.shape[1:-1]))


@dataclasses.dataclass(frozen=True)
class Capture:
    """What one process's capture holds: its lazy trace and the modules XLA compiled."""

    trace: LazyTrace | None
    modules: tuple[CompiledModule, ...]
    compiled: dict[str, CompiledModule]
    """Graph hash → the module XLA compiled for it (graphs the debug file saw compiled)."""
    dump: Path | None = None
    """Where XLA dumped the modules (the user's own directory where they had one)."""

    def module_of(self, graph: LazyGraph) -> CompiledModule | None:
        return self.compiled.get(graph.graph_hash)


def _join(trace: LazyTrace, modules: list[CompiledModule]) -> dict[str, CompiledModule]:
    """Each compiled graph's module: the next dumped module, in compilation order, whose
    argument and result counts are the graph's (the Dynamo bridge compiles a graph more than
    once, and other XLA users of the process dump modules too, so counts disambiguate)."""
    arities = [_arity(module) for module in modules]
    joined, position = {}, 0
    for graph in trace.graphs:
        if not graph.compiles:
            continue
        for index in range(position, len(modules)):
            if arities[index] == (graph.inputs, graph.outputs):
                joined[graph.graph_hash] = modules[index]
                position = index + 1
                break
    return joined


def read_capture(directory: str | Path, *, modules: bool = True) -> Capture:
    """Read the capture a process wrote to ``directory`` (see ``capture_environment``).

    Of a dump directory that was the user's, only the files this run wrote are read.
    ``modules=False`` reads no module (where the dump cannot be told apart from another process's).
    """
    directory = Path(directory)
    debug_file = directory / _DEBUG_FILE
    save_files = sorted(directory.glob(_SAVE_FILE + "*"))
    trace = None
    if debug_file.exists() or save_files:
        trace = read_lazy_trace(
            debug_file if debug_file.exists() else None,
            save_files[0] if save_files else None,
        )
    dump, before = dump_directory(directory)
    found = read_dump(dump, since=before) if modules and dump.is_dir() else []
    return Capture(trace=trace, modules=tuple(found), compiled=_join(trace, found) if trace else {}, dump=dump)
