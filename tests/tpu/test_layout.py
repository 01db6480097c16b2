"""``xlabridge.tpu._layout`` against libtpu: the default layout it predicts is the one XLA:TPU
gives an entry result, compiled for each generation (compiled for TPU, not run)."""

from __future__ import annotations

import random
import re

import pytest

from tests.tpu.conftest import requires_tpu_compiler
from xlabridge.tpu._layout import default_minor_to_major, tile_rows

GENERATIONS = ("v4", "v5e", "v5p", "v6e")
_SIZES = (1, 2, 3, 4, 5, 8, 9, 17, 31, 32, 33, 64, 96, 100, 127, 128, 129, 250, 256, 1000, 4099)


def _shapes(seed: int, count: int) -> list[tuple[int, ...]]:
    rng = random.Random(seed)
    return [tuple(rng.choice(_SIZES) for _ in range(rng.randint(1, 4))) for _ in range(count)]


def test_tile_rows():
    assert [tile_rows(s, 4) for s in (1, 2, 3, 4, 5, 100)] == [1, 2, 4, 4, 8, 8]
    assert [tile_rows(s, 2) for s in (1, 2, 3, 5)] == [2, 2, 4, 8]
    assert [tile_rows(s, 1) for s in (1, 2, 4, 5)] == [4, 4, 4, 8]


def test_row_major_where_nothing_is_gained():
    assert default_minor_to_major((64, 8192), 2) == (1, 0)
    assert default_minor_to_major((256, 32), 1) == (0, 1)  # 32 lanes of 128 would be wasted
    assert default_minor_to_major((4, 4), 1) == (1, 0)  # a tie stays row-major
    assert default_minor_to_major((1000, 3, 32), 2) == (0, 2, 1)


@requires_tpu_compiler
@pytest.mark.parametrize("generation", GENERATIONS)
def test_matches_libtpu(compiler, generation):
    """24 random shapes of 1 to 4 dimensions per generation, for 8-, 16- and 32-bit elements."""
    import jax

    from tests.tpu import _functions

    mismatches = []
    for shape in _shapes(GENERATIONS.index(generation), 24):
        for dtype, itemsize in (("uint8", 1), ("bfloat16", 2), ("float32", 4)):
            result = compiler.compile_jax(_functions.negate_bits, jax.ShapeDtypeStruct(shape, dtype), topology=f"tpu:{generation}")
            root = re.search(r"ROOT \S+ = \S+\{([\d,]*)", result.hlo)
            actual = tuple(int(d) for d in root.group(1).split(","))
            if actual != default_minor_to_major(shape, itemsize):
                mismatches.append((shape, dtype, actual, default_minor_to_major(shape, itemsize)))
    assert not mismatches, mismatches
