"""Four nested run-time counters: the loop nest of the matmul engine's line generators."""
from __future__ import annotations

from amaranth.hdl import Signal

__all__ = ["NestedLoops"]


class NestedLoops:
    """Four nested counters ``c[0]`` (outer) .. ``c[3]`` (inner) with run-time limits.

    Not a component: it adds its logic to the module of the component using it.

    Parameters
    ----------
    m : Module
    name : str
        Prefix of the signal names.
    bits : int
        Counter width.
    limits : list of 4 Values
        Iteration counts (``>= 1``) of the four loops.

    Attributes
    ----------
    c : list of 4 Signals
        The counters.
    last : list of 4 Signals
        ``c[j] == limits[j] - 1``.
    done : Signal, reset 1
        The nest has run out (set by the last :meth:`step`, cleared by :meth:`restart`).
    """

    def __init__(self, m, name, bits, limits):
        self.c = [Signal(bits, name=f"{name}_c{j}") for j in range(4)]
        self.limits = limits
        self.last = [Signal(name=f"{name}_last{j}") for j in range(4)]
        self.done = Signal(name=f"{name}_done", init=1)
        for j in range(4):
            m.d.comb += self.last[j].eq(self.c[j] == self.limits[j] - 1)
        self.m = m

    def restart(self):
        """Sync statements: all counters to 0, ``done`` to 0."""
        return [c.eq(0) for c in self.c] + [self.done.eq(0)]

    def step(self):
        """Add the statements of one step (innermost first) to the current control block."""
        m = self.m
        with m.If(self.last[3]):
            m.d.sync += self.c[3].eq(0)
            with m.If(self.last[2]):
                m.d.sync += self.c[2].eq(0)
                with m.If(self.last[1]):
                    m.d.sync += self.c[1].eq(0)
                    with m.If(self.last[0]):
                        m.d.sync += [self.c[0].eq(0), self.done.eq(1)]
                    with m.Else():
                        m.d.sync += self.c[0].eq(self.c[0] + 1)
                with m.Else():
                    m.d.sync += self.c[1].eq(self.c[1] + 1)
            with m.Else():
                m.d.sync += self.c[2].eq(self.c[2] + 1)
        with m.Else():
            m.d.sync += self.c[3].eq(self.c[3] + 1)
