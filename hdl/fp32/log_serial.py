"""FP32 natural logarithm on one shared multiplier: the words of :class:`hdl.fp32.log.FP32Log`,
one operation every :data:`LOG_SERIAL_II` cycles (for the softmax's loss, once per row).

:class:`~hdl.fp32.log.FP32Log` spends a multiplier on each of its seven products (26
``MULT18X18D`` on the ECP5). Here the reduction's small ``24 x 12``-bit product has its own
multiplier and one ``29 x 34``-bit signed multiplier does the other six in seven steps
(``E * LN2`` takes two); the rest is the same datapath (the stage helpers of
:mod:`hdl.fp32.log`)::

    front   stage 0 unpack and leading-zero count, stage 1 normalising shift and table
            index j (log_front_split); INV[j] and LOGT[j] looked up from stage 1 into
            registers, a cycle before the take may use them
    k = 0   R = M * INV[j] - 2**RF                    (the take; LOGT[j] taken beside it)
    k = 1..4  h = H[k] + (R * h >> RF)                 (h = H[0] at k = 1; w after k = 4)
    k = 5   P = R * w
    k = 6   A = E * LN2_lo + LOGT[j]                  (LN2 = LN2_hi * 2**28 + LN2_lo)
    k = 7   A += (E * LN2_hi) << 28                   (into the hand-off registers)
    back    stages 8..11 (log_finish): the sum, the rounding to FP32, the specials

``E * LN2`` is cut in two because ``LN2`` (56 bits) is wider than the multiplier's port; the sum
of the two products is the same integer. The front holds one operation while the multiplier
works on the one before it; a new operation is taken in the cycle of the previous one's last
step (``k = 7``), so one enters every seven cycles.
"""
from __future__ import annotations

from amaranth.hdl import Array, Const, Module, Mux, Signal, signed

from ..registry import Block
from .div import StallPipeline
from .log import log_finish, log_front_split, log_lookups, log_register_widths
from .log_config import FP32LogConfig, log_constants
from .unit import FP32StreamUnit

__all__ = ["FP32LogSerial", "LOG_SERIAL_II", "LOG_SERIAL_LATENCY"]

#: Steps of the shared multiplier per operation (``k = 1..7``): the initiation interval.
LOG_SERIAL_II = 7
#: Cycles from an accepted operand to its result (unit idle, no stall): two front stages,
#: the table lookups' register, the take (``k = 0``), the seven shared steps, four back
#: stages.
LOG_SERIAL_LATENCY = 2 + 1 + 1 + LOG_SERIAL_II + 4
#: Where ``LN2`` is cut for the two ``E * LN2`` steps.
LN2_CUT = 28


class FP32LogSerial(FP32StreamUnit):
    """FP32 natural logarithm on one multiplier, bit-exact with :class:`~hdl.fp32.log.FP32Log`
    (and its golden model :class:`sim.model.fp32_log.FP32Log`).

    Input and output are IEEE 754 binary32; results, accuracy and specials are those of
    :class:`~hdl.fp32.log.FP32Log`.

    Parameters
    ----------
    config : FP32LogConfig
        ``table_bits`` = ``t``: ``2**t + 1`` reciprocal / log table entries.

    Attributes
    ----------
    latency : int
        :data:`LOG_SERIAL_LATENCY` (15) cycles from an accepted operand to its result, with the
        unit idle and no stall.
    ii : int
        :data:`LOG_SERIAL_II` (7): operations back to back are accepted every ``ii`` cycles
        (after the first two, which fill the front).

    Members
    -------
    i : In(stream.Signature(FP32))
        Arguments ``a``. ``i.ready`` is high while the front has room and the output is not
        stalled.
    o : Out(stream.Signature(FP32))
        Results ``log(a)``, in input order. The whole unit stalls while
        ``o.valid & ~o.ready``.
    """

    CONFIG = FP32LogConfig

    @classmethod
    def latency_of(cls, config) -> int:
        return LOG_SERIAL_LATENCY

    def __init__(self, *, config=None):
        super().__init__(config=config)
        self.ii = LOG_SERIAL_II

    def elaborate(self, platform):
        m = Module()
        t = self.config.table_bits
        c = log_constants(t)
        w = log_register_widths(t)
        assert len(c.H) == 5 and c.LN2 >> (2 * LN2_CUT) == 0
        en = Signal(name="en")                   # the whole unit advances (output not stalled)
        m.d.comb += en.eq(~self.o.valid | self.o.ready)

        # --- front: stage 0 (unpack) and stage 1 (table index), one operation each ----------
        v0 = Signal(name="s0_valid")
        v1 = Signal(name="s1_valid")
        take = Signal(name="mul_take")            # the multiplier takes stage 1's operation
        looked = Signal(name="s1_looked_up")      # the lookup registers hold stage 1's j's
        move1 = Signal(name="s1_load")
        move0 = Signal(name="s0_load")
        m.d.comb += [
            move1.eq(en & v0 & (~v1 | take)),
            move0.eq(en & (~v0 | move1)),
            self.i.ready.eq(move0),
        ]
        mant1, e1, special1, spec_val1, j1 = log_front_split(
            m, StallPipeline(m, move0), StallPipeline(m, move1), self.i.payload.as_value(), t, w)
        with m.If(move0):
            m.d.sync += v0.eq(self.i.valid)
        with m.If(move1):
            m.d.sync += v1.eq(1)
        with m.Elif(take):
            m.d.sync += v1.eq(0)

        # --- the multiplier and its eight steps --------------------------------------------
        busy = Signal(name="mul_busy")
        k = Signal(range(LOG_SERIAL_II + 1), name="mul_step")
        last = Signal(name="mul_last")           # k = 7: the next operation may be taken
        prod = Signal(signed(w["prod"][0]), name="mul_prod")
        big = Signal(signed(w["big"][0]), name="mul_big")
        e = Signal(signed(w["e"][0]), name="mul_e")
        logt = Signal(w["logt"][0], name="mul_logt")
        special = Signal(name="mul_special")
        spec_val = Signal.like(spec_val1, name="mul_special_val")
        # the tables' words for stage 1's index, registered every cycle: the lookups are off
        # the take's path into the multiplier (they were the S = 8 FPGA core's slowest
        # estimated path, 16.15 ns at 73bcd20, the lookup ahead of the DSP); an operation
        # that just entered stage 1 waits a cycle for them (``looked``)
        inv_now, logt_look = log_lookups(m, c, w, j1, name="mul")
        inv = Signal.like(inv_now, name="mul_inv")
        logt_now = Signal.like(logt_look, name="mul_logt_looked_up")
        m.d.sync += [inv.eq(inv_now), logt_now.eq(logt_look), looked.eq(~move1)]
        # The multiplier's operands are registers loaded with the next step's pair (no select
        # in front of it): R and h for k = 1..5 (h, the Horner value, lives in ``b``), then
        # E and LN2_lo, E and LN2_hi.
        a_op = Signal(signed(w["red"][0]), name="mul_a")
        b_op = Signal(signed(w["h"][0]), name="mul_b")
        product = Signal(signed(w["red"][0] + w["h"][0]), name="mul_p")
        lo, hi = c.LN2 & ((1 << LN2_CUT) - 1), c.LN2 >> LN2_CUT
        m.d.comb += [
            last.eq(busy & (k == LOG_SERIAL_II)),
            take.eq(en & v1 & looked & (~busy | last)),
            product.eq(a_op * b_op),
        ]
        coef = Array(Const(v, signed(w["h"][0])) for v in (0, *c.H[1:], 0, 0, 0))
        with m.If(en):
            with m.If(take):                                       # k = 0
                m.d.sync += [busy.eq(1), k.eq(1),
                             a_op.eq(mant1 * inv - (1 << c.RF)), b_op.eq(c.H[0]),
                             e.eq(e1), logt.eq(logt_now), special.eq(special1),
                             spec_val.eq(spec_val1)]
            with m.Elif(busy):
                m.d.sync += k.eq(k + 1)
                with m.If(last):
                    m.d.sync += busy.eq(0)
                with m.If((k >= 1) & (k <= 4)):
                    m.d.sync += b_op.eq(coef[k] + (product >> c.RF))
                with m.If(k == 5):
                    m.d.sync += [prod.eq(product), a_op.eq(e), b_op.eq(lo)]
                with m.If(k == 6):
                    m.d.sync += [big.eq(product + logt), b_op.eq(hi)]

        # --- hand-off registers, then the back stages -----------------------------------------
        p = StallPipeline(m, en)
        v7 = p.valid(last, "s7_valid")
        prod7 = p.reg(prod, "s7_prod")
        big7 = p.reg(big + (product << LN2_CUT), "s7_big", signed(w["big"][0]))
        special7 = p.reg(special, "s7_special")
        spec_val7 = p.reg(spec_val, "s7_special_val")
        out_valid, out = log_finish(m, p, v7, prod7, big7, special7, spec_val7, c, w)
        m.d.comb += [self.o.valid.eq(out_valid), self.o.payload.eq(out)]
        return m


def _params(preset: str) -> dict:
    """The block's parameters: the config, the latency and initiation interval, the ports.

    ``ops_per_cycle`` is the steady-state rate, one operation every :data:`LOG_SERIAL_II`
    cycles (the first ones enter faster while the front fills).
    """
    cfg = FP32LogConfig.preset(preset)
    c = log_constants(cfg.table_bits)
    return {**cfg.to_dict(), "latency": LOG_SERIAL_LATENCY, "ii": LOG_SERIAL_II,
            "in_fields": [["a", 32]], "out_fields": [["r", 32]],
            "ops_per_cycle": 1 / LOG_SERIAL_II, "frac_bits": c.F}


TESSERA_BLOCKS = [
    Block("fp32_log_serial",
          build=lambda preset: FP32LogSerial(config=FP32LogConfig.preset(preset)),
          params=_params),
]
