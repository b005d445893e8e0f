"""Closed-form decode stretches for any step timer whose decode step is locally linear.

A decode-only stretch of ``k`` steps with ``n`` sequences starts at total context ``K``; step
``j`` sees ``K + n*j`` tokens. With the step time written as ``a + c*j`` (``a`` the first step's
time, ``c`` its growth per step), the stretch takes ``k*a + c*k*(k-1)/2`` and its inverse (steps
completed within a time) is the root of that quadratic. Timers supply ``(a, c)`` for ``(n, K)``;
the instance calls the stretch and its inverse with the same ``(n, K)``, so both agree.

:class:`LastCoefficients` keeps the last ``(n, K) -> (a, c)`` of a timer: one decode stretch asks
for its first step, the whole stretch and, when an arrival cuts it short, the inverse and the
shortened stretch, all at the same ``(n, K)`` (5,969 asks for 3,087 distinct pairs in the default
scenario), and a pair costs two or four table or roofline evaluations.

:class:`LinearDecodeStretches` gives a timer both stretch methods from its ``_decode_linear``.
"""

from __future__ import annotations

import math


class LastCoefficients:
    """One-entry memo of a timer's ``(a, c)``: exact, the timer's pair is a pure function of
    ``(n, K)`` (keys compared with ``==``)."""

    __slots__ = ("key", "value")

    def __init__(self) -> None:
        self.key: tuple[int, float] | None = None
        self.value: tuple[float, float] = (0.0, 0.0)

    def get(self, timer_linear, n_decode: int, context_tokens: float) -> tuple[float, float]:
        key = (n_decode, context_tokens)
        if key != self.key:
            self.value = timer_linear(n_decode, context_tokens)
            self.key = key
        return self.value


class LinearDecodeStretches:
    """The decode-stretch methods of a step timer whose decode step is locally linear.

    A timer inheriting this supplies ``_decode_linear(n_decode, context_tokens) -> (a, c)`` and
    a :class:`LastCoefficients` as ``_last``; both methods then read the same memoised pair."""

    __slots__ = ()

    def decode_stretch_s(self, n_decode: int, context_tokens: float, steps: int) -> float:
        """Time of ``steps`` decode-only steps; the context grows by ``n_decode`` tokens a step."""
        a, c = self._last.get(self._decode_linear, n_decode, context_tokens)
        return stretch_s(a, c, steps)

    def decode_steps_within(self, n_decode: int, context_tokens: float, elapsed_s: float) -> int:
        """Whole decode steps completed within ``elapsed_s`` (inverse of :meth:`decode_stretch_s`)."""
        a, c = self._last.get(self._decode_linear, n_decode, context_tokens)
        return steps_within(a, c, elapsed_s)


def stretch_s(a: float, c: float, steps: int) -> float:
    return steps * a + c * steps * (steps - 1) / 2.0


def steps_within(a: float, c: float, elapsed_s: float) -> int:
    """Largest ``k`` with ``stretch_s(a, c, k) <= elapsed_s``."""
    if elapsed_s <= 0 or a <= 0 and c <= 0:
        return 0
    q = c / 2.0
    lin = a - q
    if q <= 0:
        steps = int(elapsed_s // a) if a > 0 else 0
    else:
        steps = int(math.floor((-lin + math.sqrt(lin * lin + 4 * q * elapsed_s)) / (2 * q) + 1e-12))
    if steps < 0:
        steps = 0
    while steps > 0 and stretch_s(a, c, steps) > elapsed_s + 1e-12:
        steps -= 1
    while stretch_s(a, c, steps + 1) <= elapsed_s:
        steps += 1
    return steps
