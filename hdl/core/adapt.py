"""``AdaptRule``: ADAPT's decision for one statistic slot per cycle, pipelined.

Golden model: :func:`sim.model.core.adapt_raises` (bit-exact): a slot's width is raised when
its statistic was seen and ``num * 2**16 > threshold * den`` (``r = num / den`` above the
threshold, unsigned Q16.16; :data:`hdl.core.isa.THRESH_FRAC_BITS`).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, Value
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..bfp.stat import stat_layout
from ..lib.delay import delay
from ..lib.dspmul import RegisteredMul, registered_partial_products
from ..lib.mustuse import check_config_type
from .config import CoreConfig
from .isa import THRESH_FRAC_BITS, THRESH_NEVER, stat_slots

__all__ = ["AdaptRule"]


class AdaptRule(wiring.Component):
    """The rule of ``ADAPT`` in :attr:`latency` register steps, one slot accepted per cycle.

    Steps (each a register): both operands' statistics as read, their written bits and the
    threshold (the operand select after the register: the statistic memories' read data
    through the written-bit and operand selects into the statistic's register was 60 end
    points at 11.55 ns in the S = 4 FPGA core, routed, at 5204923); the product
    ``threshold * den`` in :class:`~hdl.lib.dspmul.RegisteredMul` blocks, their operand
    registers and their partial products (on an ECP5 both inside the DSP blocks: between
    fabric registers the product was 13.5 ns routed, 4.78 ns to the DSP, 3.93 in it, 5.32
    back); the partial products' sum beside the scaled numerator and the slot's one-hot
    decode; the decision and the one-hot in registers, ``raise_slots`` their AND.

    Parameters
    ----------
    config : CoreConfig
        Its statistic layout (the matmul engine's BFP converters) and slot count
        (:func:`hdl.core.isa.stat_slots`).

    Attributes
    ----------
    latency : int
        5: ``raise_slots`` holds the decision on the slot given ``latency`` cycles before.

    Members
    -------
    valid : In(1)
        A slot is given this cycle.
    slot : In(range(stat_slots(config)))
        Bit 0 is the slot's operand: ``stat[slot[0]]`` is its statistic.
    stat : In(ArrayLayout(stat_layout(...), 2))
        The statistic as read for each operand of the slot's pair (``num``, ``den``, ``seen``;
        ``exp`` is not used).
    present : In(2)
        Per operand: the statistic was written (saved since its last clear); a slot whose
        bit is 0 counts as not seen, whatever ``stat`` holds.
    threshold : In(32)
        The slot's threshold as read (unsigned Q16.16).
    thr_present : In(1)
        The threshold was written: 0 stands for ``THRESH_NEVER`` (selected after the
        register, as the statistic's operand).
    raise_slots : Out(stat_slots(config))
        One-hot: the slot decided this cycle, if its width is to be raised; 0 otherwise (the
        AND of two registers).
    """

    latency = 1 + RegisteredMul.latency + 1 + 1

    def __init__(self, *, config: CoreConfig):
        check_config_type(self, config, CoreConfig)
        self.config = config
        self.n_slots = stat_slots(config)
        super().__init__({
            "valid": In(1),
            "slot": In(range(self.n_slots)),
            "stat": In(data.ArrayLayout(stat_layout(config.array.bfp(0)), 2)),
            "present": In(2),
            "threshold": In(32),
            "thr_present": In(1),
            "raise_slots": Out(self.n_slots),
        })

    def elaborate(self, platform):
        m = Module()
        n_slots = self.n_slots
        # step 1: both operands' statistics as read, their written bits, the threshold; the
        # slot's operand picked after the register
        p1_v = Signal(name="p1_valid")
        p1_k = Signal(range(n_slots), name="p1_slot")
        p1_stats = Signal.like(self.stat, name="p1_stats")
        p1_present = Signal(2, name="p1_present")
        p1_thr_read = Signal(32, name="p1_thr_read")
        p1_thr_present = Signal(name="p1_thr_present")
        m.d.sync += [p1_v.eq(self.valid), p1_k.eq(self.slot), p1_stats.eq(self.stat),
                     p1_present.eq(self.present), p1_thr_read.eq(self.threshold),
                     p1_thr_present.eq(self.thr_present)]
        p1_thr = Signal(32, name="p1_thr")
        m.d.comb += p1_thr.eq(Mux(p1_thr_present, p1_thr_read, THRESH_NEVER))
        op = p1_k[0]
        p1_stat = Signal.like(self.stat[0], name="p1_stat")
        m.d.comb += [p1_stat.eq(Mux(op, p1_stats[1], p1_stats[0])),
                     p1_stat.seen.eq(p1_present.bit_select(op, 1) & Mux(op, p1_stats[1].seen,
                                                                          p1_stats[0].seen))]
        # steps 2, 3: threshold * den in DSP blocks, cut at bit 17 of each operand: lo * lo
        # and hi * hi side by side, the two middle products
        pps = registered_partial_products(m, p1_thr, p1_stat.den, ce_in=1, ce_out=1,
                                          name="thr_den")
        (s_ll, ll), (s_lh, lh), (s_hl, hl), (s_hh, hh) = pps
        assert (s_ll, s_lh, s_hl, s_hh) == (0, 17, 17, 34) and len(ll) == 34
        # step 4: their sum, the numerator scaled, the seen bit and the slot's one-hot
        rhs = Signal(64, name="thr_den")
        m.d.sync += rhs.eq(Cat(ll, hh) + ((lh + hl) << 17))
        lag = 1 + RegisteredMul.latency          # step 1 to step 4
        v4 = delay(m, p1_v, lag, "valid")
        seen = delay(m, p1_stat.seen, lag, "seen")
        num = delay(m, Value.cast(p1_stat.num) << THRESH_FRAC_BITS, lag, "num_scaled",
                    reset_less=True)
        onehot = delay(m, Cat(*[p1_k == j for j in range(n_slots)]), lag, "slot_onehot")
        # step 5: the decision in one register beside the compare, the one-hot in another;
        # raise_slots is their AND (the decision's register in front of all the slots' bits
        # was the S = 4 FPGA core's routed critical path at f1e01fb, 14.00 ns: the compare,
        # then one 6.58 ns net across the die to the raise bits by the precision table)
        decide = Signal(name="raise")
        onehot_q = Signal.like(onehot, name="slot_onehot_q")
        m.d.sync += [decide.eq(v4 & seen & (num > rhs)), onehot_q.eq(onehot)]
        m.d.comb += self.raise_slots.eq(Mux(decide, onehot_q, 0))
        assert self.latency == 1 + lag + 1
        return m
