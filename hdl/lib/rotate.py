"""Barrel rotation of equal-width lanes by a run-time amount."""
from __future__ import annotations

from amaranth.hdl import Cat, Mux, Value

__all__ = ["rotate_lanes"]


def rotate_lanes(lanes, amount, *, left: bool) -> Value:
    """``lanes`` (a list of equal-width values, lane 0 first) rotated by ``amount`` lanes.

    ``left`` moves lane ``j`` to lane ``(j + amount) mod n``, otherwise to ``(j - amount)
    mod n`` (``n = len(lanes)``). A barrel of one 2:1 multiplexer level per bit of
    ``amount``; level ``i`` rotates by ``2**i mod n`` lanes, so any ``n`` works for
    ``amount < n``. Combinational; returns the rotated lanes concatenated, lane 0 in the
    low bits.
    """
    n = len(lanes)
    width = len(Value.cast(lanes[0]))
    x = Cat(*lanes)
    for i in range(len(Value.cast(amount))):
        step = ((1 << i) % n) * width
        if step:
            x = Mux(amount[i], x.rotate_left(step) if left else x.rotate_right(step), x)
    return x
