"""Four nested run-time counters: the loop nest of the matmul engine's line generators."""
from __future__ import annotations

from amaranth.hdl import Const, Mux, Signal, Value, signed

from .config import BWD_DATA, BWD_WEIGHT

__all__ = ["NestedLoops", "LineWalk", "mode_flags", "tile_loop_limits"]


def mode_flags(mode):
    """``(BWD_DATA, BWD_WEIGHT)`` tests of a pass mode."""
    return mode == BWD_DATA, mode == BWD_WEIGHT


def tile_loop_limits(bwd, bww, shape):
    """The three outer loop limits both line generators share, from the mode flags and a
    shape (``MT``, ``KT``, ``NT``): BWD_WEIGHT ``MT`` else 1, then ``(NT, KT)`` in
    BWD_DATA, else ``(KT, NT)``."""
    return [Mux(bww, shape["MT"], 1), Mux(bwd, shape["NT"], shape["KT"]),
            Mux(bwd, shape["KT"], shape["NT"])]


class NestedLoops:
    """Four nested counters ``c[0]`` (outer) .. ``c[3]`` (inner) with run-time limits.

    Not a component: it adds its logic to the module of the component using it.

    ``last[j]`` (``c[j] == limits[j] - 1``) is a register, kept with the counters: a step
    that moves ``c[j]`` to ``c[j] + 1`` sets it to ``c[j] == limits[j] - 2``, one that wraps
    ``c[j]`` to 0 to ``limits[j] == 1``, and :meth:`load` to the latter for the limits the
    nest will have. ``limits[j] - 2`` and ``limits[j] == 1`` are registers too, loaded by
    :meth:`load` (an equality compare of the counter with a register, no adder and no
    limit select before it: 10 LUT levels into ``last`` at S = 8 by the estimate before).
    So no compare with a limit lies between the counters and a step's enables (or a
    request's ``last`` flag). The limits must hold still while the nest runs (``done`` low).

    Parameters
    ----------
    m : Module
    name : str
        Prefix of the signal names.
    bits : int
        Counter width.

    The iteration counts (``>= 1``) of the four loops are given to :meth:`load`.

    Attributes
    ----------
    c : list of 4 Signals
        The counters.
    last : list of 4 Signals
        ``c[j] == limits[j] - 1`` (registers).
    done : Signal, reset 1
        The nest has run out (set by the last :meth:`step`; its user clears it to start the
        nest after a :meth:`load`).
    """

    def __init__(self, m, name, bits):
        self.c = [Signal(bits, name=f"{name}_c{j}") for j in range(4)]
        # limits[j] - 2 (-1 or less never equals a counter) and limits[j] == 1, from load
        self.lim_m2 = [Signal(signed(bits + 2), name=f"{name}_limit_m2_{j}") for j in range(4)]
        self.lim_one = [Signal(name=f"{name}_limit_one{j}") for j in range(4)]
        self.last = [Signal(name=f"{name}_last{j}") for j in range(4)]
        self.done = Signal(name=f"{name}_done", init=1)
        self.m = m
        self.walks = []

    def load(self, limits):
        """Sync statements: all counters to 0, ``last`` and the limit registers for
        ``limits`` (the iteration counts the nest runs with once launched); ``done``
        unchanged. A generator loads these every cycle while :attr:`done` and clears
        ``done`` on its launch (which comes only while done: an idle engine, or this
        generator finished the running pass), so the launch reaches one register, not every
        counter's, walk's and shape register's input select (the control's launch into
        generator 1's walk registers was the S = 4 FPGA core's routed critical path at
        827b689, 14.99 ns, 12.81 of them routing)."""
        return ([c.eq(0) for c in self.c]
                + [last.eq(lim == 1) for last, lim in zip(self.last, limits)]
                + [r.eq(lim - 2) for r, lim in zip(self.lim_m2, limits)]
                + [r.eq(lim == 1) for r, lim in zip(self.lim_one, limits)])

    def step(self):
        """Add the statements of one step (innermost first) to the current control block."""
        m = self.m
        c, last = self.c, self.last

        def wrap(j):
            return [c[j].eq(0), last[j].eq(self.lim_one[j])]

        def inc(j):
            return ([c[j].eq(c[j] + 1), last[j].eq(c[j] == self.lim_m2[j])]
                    + [s for w in self.walks for s in w.inc(j)])

        with m.If(last[3]):
            m.d.sync += wrap(3)
            with m.If(last[2]):
                m.d.sync += wrap(2)
                with m.If(last[1]):
                    m.d.sync += wrap(1)
                    with m.If(last[0]):
                        m.d.sync += [*wrap(0), self.done.eq(1)]
                    with m.Else():
                        m.d.sync += inc(0)
                with m.Else():
                    m.d.sync += inc(1)
            with m.Else():
                m.d.sync += inc(2)
        with m.Else():
            m.d.sync += inc(3)


class LineWalk:
    """``base + sum(c[j] * weights[j])`` of a :class:`NestedLoops` nest, kept in registers
    and stepped with it: a line address without a multiplier between the counters and the
    request.

    ``p[j]`` holds the sum over the levels ``0..j`` (``p[3]``, :attr:`addr`, the whole sum).
    A step that increments level ``j`` wraps every level inside it, so every ``p[i]`` with
    ``i >= j`` becomes ``p[j] + weights[j]`` and the outer ones hold: one adder per level
    beside the counters, and the address is a register. Exact modulo ``2**width``, like the
    product form it replaces. Not a component: its logic goes into the nest's module.

    Parameters
    ----------
    loops : NestedLoops
        The nest; its :meth:`~NestedLoops.step` steps this walk too.
    name : str
        Prefix of the signal names.
    width : int
        Address width.
    weights : list of 4 Values
        Each level's stride (0 for a level the address does not depend on). They must hold
        still between restarts, like the nest's limits (registers loaded with them).

    Attributes
    ----------
    addr : Signal(width)
        The current sum: ``base + sum(c[j] * weights[j])``.
    """

    def __init__(self, loops: NestedLoops, name: str, width: int, weights):
        self.width = width
        self.p = [Signal(width, name=f"{name}_p{j}") for j in range(4)]
        self.weights = weights
        self.addr = self.p[3]
        self.tracked = []
        loops.walks.append(self)

    def track(self, fn, shape, name: str) -> Signal:
        """A register holding ``fn(addr)``: loaded with ``fn`` of the value :attr:`addr` takes
        at every restart and step, so the logic of ``fn`` is ahead of the register, not behind
        :attr:`addr` (``fn`` gets a ``width``-bit unsigned value)."""
        reg = Signal(shape, name=name)
        self.tracked.append((reg, fn))
        return reg

    def _loads(self, value):
        # the statements for a new addr: the registers tracking it take fn of its new value
        # (value cut or extended to ``width`` bits as the assignment to addr does)
        fitted = (Value.cast(value) + Const(0, self.width))[:self.width]
        return [reg.eq(fn(fitted)) for reg, fn in self.tracked]

    def restart(self, base):
        """Sync statements: every partial sum to ``base`` (with the nest's restart)."""
        return [p.eq(base) for p in self.p] + self._loads(base)

    def inc(self, j):
        """Sync statements of a step that increments level ``j`` (used by the nest)."""
        nxt = self.p[j] + self.weights[j]
        return [self.p[i].eq(nxt) for i in range(j, 4)] + self._loads(nxt)
