"""The layout XLA:TPU gives an array in HBM by default: which dimension is minor (the 128 lanes
of a tile), which is second-minor (its sublanes), and the order of the rest.

XLA:TPU does not keep arrays row-major. Entry parameters and results (what torch_xla and JAX hand
the compiler, with no layout of their own) take libtpu's default layout, which keeps as little
tile padding as it can: HBM holds arrays in tiles of ``rows x 128`` elements over the two
physical minor dimensions (``rows`` 8, or 1, 2 or 4 for a second-minor dimension that small and
an element that narrow: 8-bit elements tile in at least 4 rows, 16-bit in 2, 32-bit in 1), so an
array whose last dimension is 32 wide would waste three quarters of every tile row-major.
libtpu 0.0.23, measured with its compile-only client on v4, v5e, v5p and v6e for 480 shapes of
one to four dimensions (``tests/tpu/test_layout.py`` keeps checking it): the default layout is the
pair (minor, second-minor) of dimensions whose padded size is smallest, ties going to the pair
with the larger minor index, then the larger second-minor index; the other dimensions keep their
order, majormost first. A one-dimensional array is tiled in one dimension.

A kernel of one's own (a Mosaic ``tpu_custom_call``) reads and writes its operands row-major, so
where XLA's default layout of an operand or result is another one, XLA puts a copy (a relayout)
next to the kernel. ``default_minor_to_major`` predicts that layout without libtpu, so a kernel
can be built over the physical order instead (``xlabridge.mx._mosaic.rows`` does).
"""

from __future__ import annotations

import math

__all__ = ["default_minor_to_major", "padded_elements", "tile_rows"]

LANES = 128
"""Elements along the minor dimension of a tile."""


def tile_rows(second_minor: int, itemsize: int) -> int:
    """Rows of XLA:TPU's default HBM tile for a second-minor dimension of ``second_minor``
    elements of ``itemsize`` bytes: 8, or the smallest of 1, 2, 4 that holds the dimension and
    at least one 32-bit word of sublane packing (4 rows of 8-bit elements, 2 of 16-bit)."""
    for rows in (1, 2, 4):
        if second_minor <= rows and rows * itemsize >= 4:
            return rows
    return 8


def padded_elements(shape: tuple[int, ...], itemsize: int, minor: int, second_minor: int) -> int:
    """Elements an array of ``shape`` takes in HBM, padding included, with dimension ``minor``
    minor and ``second_minor`` second-minor in XLA:TPU's default tiles."""
    rows = shape[second_minor]
    others = math.prod(d for i, d in enumerate(shape) if i not in (minor, second_minor))
    return others * -(-rows // tile_rows(rows, itemsize)) * tile_rows(rows, itemsize) * -(-shape[minor] // LANES) * LANES


def default_minor_to_major(shape: tuple[int, ...], itemsize: int) -> tuple[int, ...]:
    """XLA:TPU's default layout of an array of ``shape`` with ``itemsize``-byte elements, as
    XLA writes it: dimension numbers from minor to major (``(1, 0)`` is row-major for 2-D)."""
    shape = tuple(int(d) for d in shape)
    if len(shape) <= 1:
        return tuple(range(len(shape)))
    pairs = [(m, s) for m in range(len(shape)) for s in range(len(shape)) if m != s]
    minor, second = min(pairs, key=lambda pair: (padded_elements(shape, itemsize, *pair), -pair[0], -pair[1]))
    rest = [d for d in reversed(range(len(shape))) if d not in (minor, second)]
    return (minor, second, *rest)
