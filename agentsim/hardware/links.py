"""Links with processor-sharing bandwidth and per-transfer setup latency (SimPy processes).

A :class:`Link` (NVLink, NVLink-C2C host<->device, NVMe, network) serves every active transfer
at ``bandwidth_bytes_per_s / n_active`` (fair sharing, the fluid model of TCP/DMA engines sharing
a pipe), after a fixed ``latency_s`` setup that does not consume bandwidth. Two equal transfers
started together therefore finish together, after about twice the time one alone takes.

Accounting per link: ``bytes_total`` (bytes delivered, equal to the bytes requested once every
transfer finished: conservation is tested), ``busy_s`` (time with at least one transfer moving
data) and ``transfers``. Utilisation = ``busy_s / elapsed``.

Implementation: one event per transfer start/finish (not per byte). When the set of active
transfers changes, everybody's remaining bytes are advanced by the elapsed share, and a single
timer is armed for the earliest finisher.

A start and a timer each run as a SimPy process started at that instant would (an urgent event
now, then a timeout), but as callbacks on those two events: a process adds its generator and a
completion event nobody waits for (a lone transfer is five events instead of seven). The events
that remain are scheduled at the same points in the same order, so every result is the one the
process version gave.
"""

from __future__ import annotations

from functools import partial
from operator import attrgetter

import simpy
from simpy.events import URGENT


class _Transfer:
    __slots__ = ("remaining_bytes", "size_bytes", "done", "transfer_id")

    def __init__(self, size_bytes: float, done: simpy.Event, transfer_id: int):
        self.size_bytes = size_bytes
        self.remaining_bytes = size_bytes
        self.done = done
        self.transfer_id = transfer_id


_remaining_of = attrgetter("remaining_bytes")
_size_of = attrgetter("size_bytes")


#: The columns of a run's link table: one row a link, its :meth:`Link.stats` after its name.
LINK_TABLE_COLUMNS = ["link", "kind", "bandwidth_bytes_per_s", "bytes", "transfers", "busy_s", "utilisation"]


def link_rows(links, elapsed_s: float) -> list[dict]:
    """One plain row a link of ``links`` (in their order): its name and :meth:`Link.stats`. A run
    reads these before it lets go of its links, and builds the table (:func:`link_frame`) after."""
    return [{"link": link.name, **link.stats(elapsed_s)} for link in links]


def link_frame(rows: list[dict]):
    """The link table of :func:`link_rows`' rows (the columns even with no row)."""
    import pandas as pd

    return pd.DataFrame(rows, columns=LINK_TABLE_COLUMNS)


class Link:
    """A shared pipe of ``bandwidth_bytes_per_s`` with ``latency_s`` setup per transfer."""

    def __init__(self, env: simpy.Environment, name: str, bandwidth_bytes_per_s: float, latency_s: float = 0.0,
                 kind: str = "link"):
        if bandwidth_bytes_per_s <= 0:
            raise ValueError(f"link {name}: bandwidth must be positive")
        self.env = env
        self.name = name
        self.kind = kind
        self.bandwidth_bytes_per_s = float(bandwidth_bytes_per_s)
        self.latency_s = float(latency_s)
        self.active: list[_Transfer] = []
        self.bytes_total = 0.0
        self.bytes_requested = 0.0
        self.busy_s = 0.0
        self.transfers = 0
        self._last_s = env.now
        self._timer_token = 0
        self._next_id = 0

    # --- public API ------------------------------------------------------------------------
    def transfer(self, size_bytes: float) -> simpy.Event:
        """Start moving ``size_bytes``; the returned event fires when the last byte arrived."""
        done = self.env.event()
        self.transfers += 1
        self.bytes_requested += size_bytes
        if size_bytes <= 0:
            done.succeed()
            return done
        self._begin(size_bytes, done)
        return done

    def estimate_s(self, size_bytes: float, extra_sharers: int = 0) -> float:
        """Time for a new transfer if the current sharers stayed active (for load-vs-recompute)."""
        sharers = len(self.active) + 1 + extra_sharers
        return self.latency_s + size_bytes * sharers / self.bandwidth_bytes_per_s

    def utilisation(self, elapsed_s: float) -> float:
        self._advance()
        return self.busy_s / elapsed_s if elapsed_s > 0 else 0.0

    def stats(self, elapsed_s: float) -> dict:
        self._advance()
        return {
            "kind": self.kind,
            "bandwidth_bytes_per_s": self.bandwidth_bytes_per_s,
            "bytes": self.bytes_total,
            "transfers": self.transfers,
            "busy_s": self.busy_s,
            "utilisation": self.busy_s / elapsed_s if elapsed_s > 0 else 0.0,
        }

    # --- fluid model ---------------------------------------------------------------------
    def _soon(self, callback) -> None:
        """Call ``callback(event)`` at this instant as a process started now would run: from an
        urgent event, before the instant's ordinary events and after the urgent ones already
        scheduled (SimPy's ``Initialize``)."""
        event = simpy.Event(self.env)
        event._ok = True
        event._value = None
        event.callbacks.append(callback)
        self.env.schedule(event, URGENT)

    def _begin(self, size_bytes: float, done: simpy.Event) -> None:
        """Start a transfer's setup at this instant (module docstring: as a process would)."""
        self._soon(partial(self._started, size_bytes, done))

    def _started(self, size_bytes: float, done: simpy.Event, _event=None) -> None:
        """A transfer's setup begins: it joins the pipe after ``latency_s``."""
        if self.latency_s > 0:
            self.env.timeout(self.latency_s).callbacks.append(partial(self._join, size_bytes, done))
        else:
            self._join(size_bytes, done)

    def _join(self, size_bytes: float, done: simpy.Event, _event=None) -> None:
        self._advance()
        self.active.append(_Transfer(size_bytes, done, self._next_id))
        self._next_id += 1
        self._rearm()

    def _advance(self) -> None:
        """Deliver the bytes moved since the last change to every active transfer."""
        now = self.env.now
        elapsed = now - self._last_s
        self._last_s = now
        if elapsed <= 0 or not self.active:
            return
        share = self.bandwidth_bytes_per_s * elapsed / len(self.active)
        for tr in self.active:
            moved = min(share, tr.remaining_bytes)
            tr.remaining_bytes -= moved
            self.bytes_total += moved
        self.busy_s += elapsed

    def _rearm(self) -> None:
        # Finish everything that is (numerically) done, then arm one timer for the next finisher.
        # A transfer is done when what is left would take less than the clock can resolve
        # (float round-off of the fluid model must not spin zero-length timers).
        active = self.active
        n = len(active)
        if not n:
            self._timer_token += 1
            return
        tiny_s = 1e-12 * max(1.0, self.env.now)
        shortest = min(map(_remaining_of, active))
        # Every transfer has at least ``shortest`` left, so none is done unless the shortest
        # could be: only then is each one's own threshold checked (a link shared by a fleet's
        # instances has hundreds of transfers, and most changes finish none).
        if (shortest <= 1.0 or shortest * n / self.bandwidth_bytes_per_s <= tiny_s
                or shortest <= 1e-9 * max(map(_size_of, active))):
            finished = [tr for tr in active
                        if tr.remaining_bytes <= max(1e-9 * tr.size_bytes, 1.0)
                        or tr.remaining_bytes * n / self.bandwidth_bytes_per_s <= tiny_s]
        else:
            finished = None
        if finished:
            for tr in finished:
                self.bytes_total += tr.remaining_bytes
                tr.remaining_bytes = 0.0
                tr.done.succeed()
            self.active = [tr for tr in self.active if tr.remaining_bytes > 0]
            if self.active:
                shortest = min(map(_remaining_of, self.active))
        self._timer_token += 1
        if not self.active:
            return
        self._start_timer(shortest * len(self.active) / self.bandwidth_bytes_per_s, self._timer_token)

    def _start_timer(self, delay_s: float, token: int) -> None:
        """Arm the timer for the next finisher, ``delay_s`` from now (superseded once the token
        moves on)."""
        self._soon(partial(self._arm, delay_s, token))

    def _arm(self, delay_s: float, token: int, _event=None) -> None:
        self.env.timeout(delay_s).callbacks.append(partial(self._fire, token))

    def _fire(self, token: int, _event=None) -> None:
        if token != self._timer_token:
            return  # superseded by a later start or finish
        self._advance()
        self._rearm()
