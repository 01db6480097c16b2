"""TPU targets and topology names: ``"tpu:v5e"``, ``"tpu:v5e:2x4"``, ``"v6e:2x2"``.

A topology name is libtpu's: ``<generation>:<chips per dimension>`` (``v5e:2x4``: 8 chips;
``v5p:2x2x1``: 4). A target is a topology name or a generation, optionally prefixed with
``tpu:``; a bare generation means its default topology (``xlabridge.tpu._chips``). The syntax
and the generation are checked here; whether libtpu builds the topology is known only when the
worker asks it (``v5e:1x1`` passes here and libtpu refuses it), and that error also lists
``KNOWN_TOPOLOGIES``.
"""

from __future__ import annotations

import dataclasses
import re

from xlabridge.errors import UnknownTopologyError
from xlabridge.tpu._chips import CHIPS, ChipFacts

__all__ = ["KNOWN_TOPOLOGIES", "Topology", "resolve_target"]

KNOWN_TOPOLOGIES: tuple[str, ...] = (
    "v4:2x2x1", "v4:2x2x2",
    "v5e:2x2", "v5e:2x4", "v5e:4x4", "v5e:8x8", "v5e:16x16",
    "v5p:2x2x1", "v5p:2x2x2",
    "v6e:2x2", "v6e:2x4", "v6e:4x4", "v6e:16x16",
)
"""Names libtpu 0.0.23's compile-only client builds (checked on the development machine)."""

# Generations whose libtpu name differs from the short name used here.
_LIBTPU_GENERATIONS = {"v7": "tpu7x"}

_NAME = re.compile(r"^(?P<generation>v\d+[a-z]?):(?P<shape>\d+(?:x\d+){1,2})$")


@dataclasses.dataclass(frozen=True)
class Topology:
    """A TPU topology by libtpu's name, with its generation's facts."""

    name: str
    generation: str

    @property
    def chip(self) -> ChipFacts:
        return CHIPS[self.generation]

    @property
    def chips(self) -> int:
        """Chips in the whole topology."""
        count = 1
        for size in self.name.split(":")[1].split("x"):
            count *= int(size)
        return count

    @property
    def libtpu_name(self) -> str:
        """The name libtpu's compile-only client knows it by (``v7:2x2x1`` is ``tpu7x:2x2x1``)."""
        generation, _, shape = self.name.partition(":")
        return f"{_LIBTPU_GENERATIONS.get(generation, generation)}:{shape}"

    def __str__(self) -> str:
        return self.name


def resolve_target(target: str | Topology) -> Topology:
    """The topology meant by ``target`` (``"tpu:v5e"``, ``"tpu:v5e:2x4"``, ``"v6e:2x2"``, ``"v5p"``)."""
    if isinstance(target, Topology):
        return target
    if not isinstance(target, str):
        raise TypeError(f"target must be a string such as 'tpu:v5e' or 'v5e:2x4', got {type(target).__name__}")
    name = target.strip().lower()
    name = name.removeprefix("tpu:")
    if name in CHIPS:
        name = CHIPS[name].default_topology
    match = _NAME.match(name)
    if not match or match.group("generation") not in CHIPS:
        raise UnknownTopologyError(
            f"unknown TPU target {target!r}: use 'tpu:<generation>' (generations "
            f"{', '.join(CHIPS)}) or a topology name such as {', '.join(KNOWN_TOPOLOGIES)}"
        )
    return Topology(name=name, generation=match.group("generation"))
