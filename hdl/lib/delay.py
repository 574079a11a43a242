"""``delay``: a value through a chain of registers (no enable, no stall)."""
from __future__ import annotations

from amaranth.hdl import Signal

__all__ = ["delay"]


def delay(m, value, stages: int, name: str, *, reset_less: bool = False):
    """``value`` ``stages`` cycles later: ``stages`` registers in ``m``'s ``sync`` domain,
    named ``<name>_d0`` .. (``stages = 0``: the value itself). ``reset_less`` for data that
    needs no reset (its valid bit is delayed beside it)."""
    for k in range(stages):
        reg = Signal.like(value, name=f"{name}_d{k}", reset_less=reset_less)
        m.d.sync += reg.eq(value)
        value = reg
    return value
