"""torch_xla's save-tensors file (``XLA_SAVE_TENSORS_FILE``, ``XLA_SAVE_TENSORS_FMT=hlo``) as graphs.

For every graph it syncs (lazily at ``torch_xla.sync()`` or a host read, or when the Dynamo
bridge compiles an FX graph) torch_xla appends::

    [ScheduleSyncTensorsGraph]            (or [dynamo], ...: who asked)
    TensorsGraphInfo:
      sync (/.../torch_xla/torch_xla.py:87)        <- frames, innermost first
      <module> (/tmp/train.py:25)

    Root Hashes: (...)

    ## BEGIN_GRAPH
    HloModule IrToHlo.106, ...                     <- the HLO
    Graph Hash: b27d7182916ec612e76a82ca66ca0a2
    ## END_GRAPH

    #OUTPUT_SHARDING_BEGIN                         <- SPMD only: each output's sharding
    f32[32,8] {devices=[1,4]0,1,2,3}
    #OUTPUT_SHARDING_END

The HLO is the graph torch_xla built (before XLA's passes) unless ``XLA_DUMP_POST_OPTIMIZATIONS=1``
is set too, in which case it is the optimized module XLA compiled, partitioned under SPMD: the
collectives the run executes. torch_xla appends the ordinal of the device to the file name
(``F.0``). Checked against torch_xla 2.8 and 2.9.
"""

from __future__ import annotations

import dataclasses
import re

from xlabridge.diagnostics.events import Frame

__all__ = ["SavedGraph", "parse_save_file"]

_TAG = re.compile(r"^\[(?P<tag>[^\]]+)\]\s*$")
_FRAME = re.compile(r"^\s+(?P<function>\S+) \((?P<file>.*):(?P<line>\d+)\)\s*$")
_HASH = re.compile(r"^Graph Hash: (?P<hash>\w+)\s*$")


@dataclasses.dataclass(frozen=True)
class SavedGraph:
    tag: str
    """Who synced it: ``ScheduleSyncTensorsGraph`` (lazy tracing), ``dynamo``..."""
    frames: tuple[Frame, ...]
    """The Python stack that triggered it, outermost first."""
    graph_hash: str
    hlo: str
    output_shardings: tuple[str, ...]


def parse_save_file(text: str) -> list[SavedGraph]:
    """The graphs of a save-tensors file, in the order they were synced."""
    graphs: list[SavedGraph] = []
    tag, frames, hlo, graph_hash, shardings = "", [], [], "", []
    state = "outside"

    def flush() -> None:
        nonlocal tag, frames, hlo, graph_hash, shardings
        if hlo:
            graphs.append(SavedGraph(tag, tuple(reversed(frames)), graph_hash, "\n".join(hlo), tuple(shardings)))
        tag, frames, hlo, graph_hash, shardings = "", [], [], "", []

    for line in text.splitlines():
        if state == "graph":
            if line.startswith("## END_GRAPH"):
                state = "outside"
            elif (match := _HASH.match(line)) is not None:
                graph_hash = match.group("hash")
            else:
                hlo.append(line)
        elif state == "shardings":
            if line.startswith("#OUTPUT_SHARDING_END"):
                state = "outside"
            elif line.strip():
                shardings.append(line.strip())
        elif (match := _TAG.match(line)) is not None:
            flush()
            tag, state = match.group("tag"), "frames"
        elif line.startswith("## BEGIN_GRAPH"):
            state = "graph"
        elif line.startswith("#OUTPUT_SHARDING_BEGIN"):
            state = "shardings"
        elif state == "frames" and (match := _FRAME.match(line)) is not None:
            frames.append(Frame(match.group("file"), int(match.group("line")), match.group("function")))
    flush()
    return graphs
