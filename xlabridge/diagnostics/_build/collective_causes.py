"""The table of collective causes: what each collective XLA's SPMD partitioner inserted is for.

XLA's SPMD partitioner inserts a collective wherever the shardings of an op's operands and result
disagree. Some are the point of the sharding (an FSDP all-gather of a weight, the all-reduce of a
contracted sharded dimension, data-parallel gradient reduction); others cost a whole tensor per
step for a sharding that was left off or set on the wrong dimension or mesh axis. Each row says
which collectives it explains, whether they are usually avoidable, and what to change; the first
matching row wins, the last catches all.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable

from xlabridge.pod._collectives import Collective, CollectiveKind
from xlabridge.pod._graph import PartitionedGraph


_DIMS = re.compile(r"(?P<type>[a-z][a-z0-9]*)\[(?P<dims>[\d,]*)\]")


def _signature(shape: str) -> tuple[str, tuple[int, ...]] | None:
    """Element type and sorted dimensions: layouts and transposes aside, the same tensor."""
    match = _DIMS.search(shape)
    if not match:
        return None
    dims = tuple(sorted(int(d) for d in match.group("dims").split(",") if d))
    return match.group("type"), dims


def _gathers_input(collective: Collective, graph: PartitionedGraph) -> bool:
    return collective.kind is CollectiveKind.ALL_GATHER and collective.operand_origin == "parameter"


def _replicated_gradient(collective: Collective, graph: PartitionedGraph) -> bool:
    """An all-reduce the size of a fully replicated input, in a graph that shards other inputs."""
    if collective.kind is not CollectiveKind.ALL_REDUCE or not any(p.sharded for p in graph.parameters):
        return False
    signature = _signature(collective.shape)
    return signature is not None and signature[1] != () and any(
        p.replicated and _signature(p.shape) == signature for p in graph.parameters
    )


def _kind(kind: CollectiveKind) -> Callable[[Collective, PartitionedGraph], bool]:
    return lambda collective, graph: collective.kind is kind


@dataclasses.dataclass(frozen=True)
class CollectiveCause:
    """A known reason for a collective: its category, whether it is usually avoidable, a fix."""

    category: str
    avoidable: bool
    applies: Callable[[Collective, PartitionedGraph], bool] = dataclasses.field(repr=False, compare=False)
    suggestion: str


COLLECTIVE_CAUSES: tuple[CollectiveCause, ...] = (
    CollectiveCause(
        "input-all-gather",
        True,
        _gathers_input,
        "A graph input (a weight, or a batch) is gathered whole on every device each step. Under "
        "FSDP that is the design (weights sharded at rest, gathered per layer); otherwise its "
        "sharding conflicts with its use: shard it on the dimension its consumer keeps sharded "
        "(a row-parallel weight `(None, 'model')`, not `('model', None)`), or replicate it if it is small.",
    ),
    CollectiveCause(
        "replicated-weight-gradient",
        True,
        _replicated_gradient,
        "This all-reduce has the shape of an input left replicated while other inputs are "
        "sharded: most likely the gradient of a weight whose `mark_sharding` was left off, "
        "reduced whole on every device each step. Shard it like the other weights so its "
        "gradient is reduce-scattered and its optimizer state split.",
    ),
    CollectiveCause(
        "conflicting-sharding",
        True,
        _kind(CollectiveKind.ALL_GATHER),
        "An intermediate tensor sharded on one dimension is needed whole by its consumer (the "
        "op in `op_type`): the shardings of that op's operands disagree, typically a weight "
        "sharded on a dimension that does not match the activation's. Make them agree "
        "(`xs.mark_sharding` on the weight), or mark the intermediate where the layout should change.",
    ),
    CollectiveCause(
        "resharding",
        True,
        _kind(CollectiveKind.ALL_TO_ALL),
        "The sharded dimension moves to another dimension: a reshape, transpose or view across "
        "the sharded dimension, or a `mark_sharding` on a different dimension than the producer's. "
        "Keep the sharded dimension in place through reshapes (merge or split unsharded dimensions "
        "only), or shard the producer the way the consumer wants it.",
    ),
    CollectiveCause(
        "mesh-axis-mismatch",
        True,
        _kind(CollectiveKind.COLLECTIVE_PERMUTE),
        "Data moves between devices without changing its sharded dimension: two tensors of one "
        "op are sharded over different mesh axes (or device orders), such as a weight sharded over "
        "'data' used with an activation sharded over 'model'. Shard both over the same mesh axis.",
    ),
    CollectiveCause(
        "sharded-reduction",
        False,
        _kind(CollectiveKind.ALL_REDUCE),
        "A sum over a sharded dimension: a matmul contracting a sharded dimension (tensor "
        "parallelism), a loss averaged over the sharded batch, or data-parallel gradients. "
        "Expected in sharded training; its size is set by the tensor reduced.",
    ),
    CollectiveCause(
        "sharded-gradient",
        False,
        _kind(CollectiveKind.REDUCE_SCATTER),
        "Gradients reduced and left sharded (FSDP / ZeRO): the cheap form of gradient "
        "reduction. Expected.",
    ),
    CollectiveCause(
        "other",
        False,
        lambda collective, graph: True,
        "A collective the table does not know: see its op_type and source line.",
    ),
)


def classify_collective(collective: Collective, graph: PartitionedGraph) -> CollectiveCause:
    """The first cause of ``COLLECTIVE_CAUSES`` that applies to ``collective`` in ``graph``."""
    return next(cause for cause in COLLECTIVE_CAUSES if cause.applies(collective, graph))
