"""``delay``: a value through a chain of registers (no enable, no stall); ``delay_stages``:
the same chain with every stage."""
from __future__ import annotations

from amaranth.hdl import Signal

__all__ = ["delay", "delay_stages"]


def delay(m, value, stages: int, name: str, *, reset_less: bool = False):
    """``value`` ``stages`` cycles later: ``stages`` registers in ``m``'s ``sync`` domain,
    named ``<name>_d0`` .. (``stages = 0``: the value itself). ``reset_less`` for data that
    needs no reset (its valid bit is delayed beside it)."""
    return delay_stages(m, value, stages, name, reset_less=reset_less)[-1]


def delay_stages(m, value, stages: int, name: str, *, reset_less: bool = False) -> list:
    """``[value, value 1 cycle later, ..., value stages cycles later]``: the chain of
    :func:`delay` with every stage kept (for "anything in flight" checks), registers named
    ``<name>_d0`` ..; the last element is ``delay(m, value, stages, name)``."""
    chain = [value]
    for k in range(stages):
        reg = Signal.like(value, name=f"{name}_d{k}", reset_less=reset_less)
        m.d.sync += reg.eq(chain[-1])
        chain.append(reg)
    return chain
