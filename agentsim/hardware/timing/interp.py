"""Interpolation of step-time tables on logarithmic grids.

The tables hold a step time (seconds) at grid points that are spaced geometrically (tokens,
batch sizes, context lengths span four to six decades). Between points the time is
interpolated linearly in ``log(x + 1)`` (and ``log(y + 1)``), which is exact for the power
laws that GEMM and attention costs follow over most of their range.

Hand-written rather than :class:`scipy.interpolate.RegularGridInterpolator`: the simulator
evaluates a table several times per batch iteration, and scipy's per-call overhead (tens of
microseconds for one point) would dominate the event loop; these functions take about a
microsecond. Queries outside the grid are clamped to its edge for the lower end and
extrapolated linearly (in the same coordinates) beyond the upper end.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from dataclasses import dataclass
from typing import Sequence


def _coords(points: Sequence[float]) -> list[float]:
    return [math.log(p + 1.0) for p in points]


def _cell(coords: list[float], u: float) -> tuple[int, float]:
    """(index i, weight w) with u = (1 - w) * coords[i] + w * coords[i + 1]."""
    last = len(coords) - 2
    i = bisect_right(coords, u) - 1
    if i < 0:
        return 0, 0.0
    if i > last:
        i = last
    lo = coords[i]
    return i, (u - lo) / (coords[i + 1] - lo)


@dataclass
class Table1D:
    """``f(x)`` tabulated at ``xs`` (strictly increasing, at least two points)."""

    xs: list[float]
    values: list[float]

    def __post_init__(self) -> None:
        self._u = _coords(self.xs)

    def __call__(self, x: float) -> float:
        i, w = _cell(self._u, math.log(x + 1.0))
        v = self.values
        return v[i] + w * (v[i + 1] - v[i])


@dataclass
class Table2D:
    """``f(x, y)`` tabulated on the grid ``xs`` x ``ys``; ``values[i][j] = f(xs[i], ys[j])``."""

    xs: list[float]
    ys: list[float]
    values: list[list[float]]

    def __post_init__(self) -> None:
        self._u = _coords(self.xs)
        self._v = _coords(self.ys)

    def __call__(self, x: float, y: float) -> float:
        i, wx = _cell(self._u, math.log(x + 1.0))
        j, wy = _cell(self._v, math.log(y + 1.0))
        row0, row1 = self.values[i], self.values[i + 1]
        a = row0[j] + wy * (row0[j + 1] - row0[j])
        b = row1[j] + wy * (row1[j + 1] - row1[j])
        return a + wx * (b - a)


def geometric_grid(low: int, high: int, per_octave: int) -> list[int]:
    """Integers from ``low`` to ``high`` (both included), ``per_octave`` points per doubling."""
    out = {low, high}
    x = float(max(low, 1))
    step = 2.0 ** (1.0 / per_octave)
    while x < high:
        out.add(int(round(x)))
        x *= step
    return sorted(v for v in out if low <= v <= high)
