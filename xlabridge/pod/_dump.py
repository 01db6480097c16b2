"""Modules XLA compiled, as text and proto: from an ``--xla_dump_to`` directory or a worker.

``XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text --xla_dump_hlo_as_proto"`` (read once,
when XLA starts) makes XLA write every module it compiles, after its passes: for an SPMD graph
the partitioned program each device runs, with its collectives: exactly what the run executed.
It costs the file writes at each compilation (XLA:CPU adds its LLVM IR and object files), and
nothing per step. The reader takes the user's own dump options as they come: a timestamp prefix
(``--xla_dump_include_timestamp``), gzipped protos (``--xla_dump_compress_protos``), long text
(``--xla_dump_hlo_as_long_text``) and per-pass files (``--xla_dump_hlo_pass_re``, not read); and
a directory that holds files of earlier runs (``snapshot`` before the run, ``since=`` after).
"""

from __future__ import annotations

import dataclasses
import gzip
import re
from collections.abc import Mapping
from pathlib import Path

from xlabridge.pod._graph import PartitionedGraph, analyze

__all__ = ["CompiledModule", "read_dump", "snapshot"]

_OPTIMIZED = re.compile(
    r"^(?P<stamp>\d+\.)?module_(?P<id>\d+)\.(?P<name>.+)\.(?:\w+_)?after_optimizations\.txt$"
)
_PROTO_SUFFIXES = (".hlo.pb", ".hlo.pb.gz")

Snapshot = Mapping[str, tuple[int, int]]
"""A dump directory's files as they were: name → (modification time in ns, size)."""


def snapshot(directory: str | Path) -> dict[str, tuple[int, int]]:
    """The files ``directory`` holds now (none if it does not exist), to tell a later run's apart."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    found = {}
    for path in directory.iterdir():
        stat = path.stat()
        found[path.name] = (stat.st_mtime_ns, stat.st_size)
    return found


def _proto(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if path.name.endswith(".gz") else data


@dataclasses.dataclass(frozen=True)
class CompiledModule:
    """One module as XLA compiled it: the optimized text and, where written, its proto."""

    name: str
    text: str
    proto: bytes | None = None
    module_id: int = 0
    """XLA's id of the module in its dump (compilation order within one process)."""
    path: Path | None = None
    """The optimized text's file, where the module was read from a dump."""

    def before_optimizations(self) -> bytes | None:
        """The proto of the module as XLA received it (pre-partition, with its shardings), where dumped."""
        if self.path is None:
            return None
        match = _OPTIMIZED.match(self.path.name)
        if match is None:
            return None
        stem = f"{match.group('stamp') or ''}module_{match.group('id')}.{match.group('name')}"
        for suffix in _PROTO_SUFFIXES:
            candidate = self.path.with_name(f"{stem}.before_optimizations{suffix}")
            if candidate.exists():
                return _proto(candidate)
        return None

    def analyze(self) -> PartitionedGraph:
        """Its collectives and input shardings (with Python stacks when the proto is here)."""
        return analyze(self.text, proto=self.proto)


def read_dump(directory: str | Path, *, since: Snapshot | None = None) -> list[CompiledModule]:
    """Every optimized module of an XLA dump directory, in compilation order.

    ``since``: the directory's ``snapshot`` taken before the run; files it holds unchanged are an
    earlier run's, and are not read.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no XLA dump directory at {directory} (was --xla_dump_to set before XLA started?)")
    before = since or {}
    modules = []
    for path in directory.iterdir():
        match = _OPTIMIZED.match(path.name)
        if not match:
            continue
        stat = path.stat()
        if before.get(path.name) == (stat.st_mtime_ns, stat.st_size):
            continue
        proto = next((candidate for candidate in (path.with_name(path.name[: -len(".txt")] + suffix)
                                                  for suffix in _PROTO_SUFFIXES) if candidate.exists()), None)
        modules.append(
            CompiledModule(
                name=match.group("name"),
                text=path.read_text(),
                proto=_proto(proto) if proto is not None else None,
                module_id=int(match.group("id")),
                path=path,
            )
        )
    return sorted(modules, key=lambda module: module.module_id)
