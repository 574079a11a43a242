"""Streaming FP32 sum (optionally of squares) with a fixed, documented summation order.

An FP32 adder with latency ``La`` cannot close a one-cycle accumulation loop, so the sum keeps
``lanes`` interleaved partial sums (``lanes > La``): element ``i`` (counted from the start of
the reduction) is added into lane ``i mod lanes``; after the last element the partials are
combined in order, ``((p0 + p1) + p2) + ...``. Partials start at +0. Golden model:
:func:`sim.model.optim.lane_sum` (same order, bit-exact).

Used by the optimizer engine (sum of squares of the gradients) and the core's vector unit.
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..config import check_int
from ..fp32.config import FP32Config
from .dataflow import operands, result
from .mustuse import used_if_rejected

__all__ = ["LaneSum", "LANESUM_IN_LAYOUT", "LANESUM_OUT_LAYOUT"]

LANESUM_IN_LAYOUT = data.StructLayout({"x": 32, "last": 1})
LANESUM_OUT_LAYOUT = data.StructLayout({"r": 32})


class LaneSum(wiring.Component):
    """Sum of a stream of FP32 values (or of their squares), RNE, fixed order.

    Parameters
    ----------
    lanes : int
        Interleaved partial sums, a power of two 2..64; must exceed the FP32 adder latency.
    config : object with an int attribute ``lanes``, optional
        Instead of ``lanes``: take it from a block's config (e.g.
        ``GradConfig``). Without either, 8 lanes.
    square : bool
        Sum ``x*x`` (one FP32 multiply per element, before the lanes) instead of ``x``.
    nonnegative : bool
        The caller guarantees every ``x`` is ``>= +0`` or NaN (e.g. squares formed upstream);
        implied by ``square``. The adder is then :class:`~hdl.fp32.add.FP32Add` with
        ``same_sign`` (about a third smaller, the same words).
    fp32_config : FP32Config
        Adder/multiplier pipelines; the adder latency must be below ``lanes``.

    Attributes
    ----------
    latency : int
        Cycles from accepting the ``last`` element to ``o.valid`` (the flush: in-flight adds,
        then ``lanes - 1`` dependent adds).

    Members
    -------
    i : In(stream.Signature(LANESUM_IN_LAYOUT))
        ``x`` (FP32) and ``last`` (ends the reduction). One element per cycle; ``ready`` is low
        from the ``last`` element until the result has been taken.
    o : Out(stream.Signature(LANESUM_OUT_LAYOUT))
        The sum ``r`` (FP32), held until taken.
    """

    def __init__(self, *, lanes: int | None = None, config=None, square: bool = False,
                 nonnegative: bool = False, fp32_config: FP32Config | None = None):
        with used_if_rejected(self):
            if lanes is not None and config is not None:
                raise TypeError("LaneSum takes lanes or config, not both")
            owner = "LaneSum"
            if config is not None:
                owner = f"{type(config).__name__}"
                lanes = getattr(config, "lanes", None)
            elif lanes is None:
                lanes = 8
            check_int(owner, "lanes", lanes, lo=2, hi=64)
            if lanes & (lanes - 1):
                raise ValueError(f"{owner}.lanes must be a power of two, not {lanes!r}")
            self.fp32_config = fp32_config or FP32Config()
            la = self.fp32_config.latency("fp32_add")
            if la >= lanes:
                raise ValueError(f"{owner}.lanes ({lanes}) must exceed the FP32 adder "
                                 f"latency ({la})")
        self.lanes = lanes
        self.square = bool(square)
        self.nonnegative = self.square or bool(nonnegative)
        self.lm = self.fp32_config.latency("fp32_mul") if self.square else 0
        self.la = la
        # last accepted at c: WAIT until c+lm+la+1, then (lanes-1) adds of la+1 cycles, OUT.
        self.latency = self.lm + la + 2 + (lanes - 1) * (la + 1) + 1
        super().__init__({
            "i": In(stream.Signature(LANESUM_IN_LAYOUT)),
            "o": Out(stream.Signature(LANESUM_OUT_LAYOUT)),
        })

    def elaborate(self, platform):
        from ..fp32.add import FP32Add
        from ..fp32.mul import FP32Mul

        m = Module()
        lanes, la, lm = self.lanes, self.la, self.lm
        m.submodules.add = add = FP32Add(config=self.fp32_config, same_sign=self.nonnegative)
        m.d.comb += add.o.ready.eq(1)

        part = Array(Signal(32, name=f"lane_{j}") for j in range(lanes))
        lane = Signal(range(lanes), name="lane_idx")
        total = Signal(32, name="total")
        k = Signal(range(lanes + 1), name="drain_k")
        pending = Signal(name="drain_pending")
        wait = Signal(range(lm + la + 2), name="flush_wait")
        draining = Signal(name="draining")

        flush_done = Signal(name="flush_done")      # FLUSH -> DRAIN this cycle
        drain_issue = Signal(name="drain_issue")    # DRAIN issues total + part[k] this cycle
        out_fire = Signal(name="out_fire")          # the sum is taken: partials clear
        accept = Signal(name="accept")
        m.d.comb += accept.eq(self.i.valid & self.i.ready)

        # Optional square stage: fixed latency lm (the multiplier never stalls: o.ready = 1).
        if self.square:
            m.submodules.sq = mul = FP32Mul(config=self.fp32_config)
            m.d.comb += [
                mul.o.ready.eq(1),
                mul.i.valid.eq(accept),
                operands(mul.i.payload).eq(Cat(self.i.payload.x, self.i.payload.x)),
            ]
            x_valid, x = mul.o.valid, result(mul.o.payload)
        else:
            x_valid, x = accept, self.i.payload.x

        # Lane of each add in flight, delayed to the adder's output.
        tags = [lane]
        for d in range(la):
            t = Signal(range(lanes), name=f"lane_tag_{d + 1}", reset_less=True)
            m.d.sync += t.eq(tags[-1])
            tags.append(t)

        with m.FSM(name="lanesum"):
            with m.State("ACC"):
                m.d.comb += self.i.ready.eq(1)
                with m.If(accept & self.i.payload.last):
                    m.d.sync += wait.eq(lm + la)
                    m.next = "FLUSH"
            with m.State("FLUSH"):
                with m.If(wait == 0):
                    m.d.comb += flush_done.eq(1)
                    m.d.sync += [total.eq(part[0]), k.eq(1), pending.eq(0), draining.eq(1)]
                    m.next = "DRAIN"
                with m.Else():
                    m.d.sync += wait.eq(wait - 1)
            with m.State("DRAIN"):
                with m.If(~pending):
                    with m.If(k == lanes):
                        m.next = "OUT"
                    with m.Else():
                        m.d.comb += [add.i.valid.eq(1), drain_issue.eq(1)]
                        m.d.sync += [pending.eq(1), k.eq(k + 1)]
                with m.If(add.o.valid):
                    m.d.sync += [total.eq(result(add.o.payload)), pending.eq(0)]
            with m.State("OUT"):
                m.d.comb += [self.o.valid.eq(1), self.o.payload.r.eq(total)]
                with m.If(self.o.ready):
                    m.d.comb += out_fire.eq(1)
                    m.d.sync += [p.eq(0) for p in part]
                    m.d.sync += [lane.eq(0), draining.eq(0)]
                    m.next = "ACC"

        # Accumulate (ACC and FLUSH): element -> lane, in arrival order.
        part_we = Signal(name="part_we")
        m.d.comb += part_we.eq(add.o.valid & ~draining)
        with m.If(x_valid):
            m.d.comb += add.i.valid.eq(1)
            m.d.sync += lane.eq(lane + 1)       # wraps: lanes is a power of two
        with m.If(part_we):
            m.d.sync += part[tags[la]].eq(result(add.o.payload))

        # The adder's operands come from registers: a partial picked by a lane index through an
        # ``lanes``:1 mux in front of the adder's own first step was the optimizer engine's
        # critical path on the ECP5. Each operand register is loaded one cycle early with the
        # value the partial will hold in the cycle it is used (the write and the clear of that
        # cycle's edge applied), so the adder sees exactly the operands it saw before:
        # accumulate ``part[lane] + x``, drain ``total + part[k]``.
        def part_next(j):
            """``part[j]`` after this cycle's edge."""
            return Mux(out_fire, 0,
                       Mux(part_we & (tags[la] == j), result(add.o.payload), part[j]))

        # The clear (``out_fire``, behind the consumer's ready) selects +0 last, after the
        # lane select: in OUT nothing accumulates (the flush is over), so part_next(lane_next)
        # is +0 when it fires and part[lane] otherwise (the consumer's ready through the
        # lane select into this register: the optimizer's sum of squares, 12.36 ns routed in
        # the S = 4 FPGA core at 56dc8c9)
        lane_next = Signal.like(lane, name="lane_next_unless_cleared")
        m.d.comb += lane_next.eq(Mux(x_valid, lane + 1, lane))
        acc_a = Signal(32, name="acc_operand")          # part[lane]
        drain_b = Signal(32, name="drain_operand")      # part[k] (k < lanes), while draining
        m.d.sync += acc_a.eq(Mux(out_fire, 0, Mux(part_we & (tags[la] == lane_next),
                                                   result(add.o.payload), part[lane_next])))
        # The partials hold still while draining (no accumulate writes; the clear comes in
        # OUT), so the drain operand is loaded only when k moves: part[1] (through this
        # cycle's last write) as DRAIN starts, part[k + 1] when an add issues; it holds
        # otherwise. No select by the next k behind the state machine's issue decision (the
        # optimizer's sum of squares, 14.9 ns estimated at 210e109).
        with m.If(flush_done):
            m.d.sync += drain_b.eq(part_next(1))
        with m.Elif(drain_issue):
            m.d.sync += drain_b.eq(part[(k + 1)[:len(lane)]])
        m.d.comb += operands(add.i.payload).eq(
            Mux(draining, Cat(total, drain_b, Const(0, 1)), Cat(acc_a, x, Const(0, 1))))
        return m
