"""FP32 natural logarithm on one shared multiplier: the words of :class:`hdl.fp32.log.FP32Log`,
one operation every :data:`LOG_SERIAL_II` cycles (for the softmax's loss, once per row).

:class:`~hdl.fp32.log.FP32Log` spends a multiplier on each of its seven products (26
``MULT18X18D`` on the ECP5). Here the reduction's small ``24 x 12``-bit product has its own
multiplier, the first Horner step's ``R * H[0]`` (a constant) one of its own, and one
``29 x 34``-bit signed multiplier does the other five in six slots (``E * LN2`` takes
two); the rest is the same datapath (the stage helpers of :mod:`hdl.fp32.log`). Every product
takes three cycles from its operands: its four partial products (one ``MULT18X18D`` each) into
registers, their sum with an addend (carry-save, one carry chain), the sum's Horner bits into a
register (``R * H[0]``'s too). Cycles after the take (``d0``)::

    front   stage 0 unpack and leading-zero count, stage 1 normalising shift and table
            index j (log_front_split); INV[j] and LOGT[j] looked up from stage 1 into
            registers, a cycle before the take may use them
    d0      R = M * INV[j] - 2**RF                    (the take; LOGT[j], E beside it)
    d1, d2  h1 = H[1] + (R * H[0] >> RF)              (its own multiplier; registered)
    d3..d12 operands of the shared multiplier: R, h1 (d3) | R, h2 (d6) | E, LN2_lo (d7) |
            E, LN2_hi (d8) | R, h3 (d9) | R, w (d12); each sum two cycles later: h2 (d5),
            h3 (d8), A = E * LN2_lo + LOGT[j] (d9), E * LN2_hi (d10), w (d11), P = R * w (d14)
    d14     P and A + (E * LN2_hi << 28) into the hand-off registers
    back    four stages (log_finish): the sum, the rounding to FP32, the specials

with ``h(k+1) = H[k] + (R * h(k) >> RF)`` (``LN2 = LN2_hi * 2**28 + LN2_lo``). ``E * LN2`` is
cut in two because ``LN2`` (56 bits) is wider than the multiplier's port; the sum of the two
products is the same integer. The slots differ pairwise by 1 .. 6 and 9 cycles, so a new
operation may be taken at d7, d8 or from d10 of the one before it: one enters every seven
cycles back to back (the front holds one operation meanwhile), two are in flight at most.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed

from ..lib.dspmul import registered_product
from ..registry import Block
from .div import StallPipeline
from .log import log_finish, log_front_split, log_lookups, log_register_widths
from .log_config import FP32LogConfig, log_constants
from .unit import FP32StreamUnit

__all__ = ["FP32LogSerial", "LOG_SERIAL_II", "LOG_SERIAL_LATENCY"]

#: Cycles from one take to the next, back to back: the operation in flight blocks a take in
#: its ``d1 .. d6`` and :data:`TAKE_BLOCKED`: the initiation interval.
LOG_SERIAL_II = 7
#: The one cycle after ``d(LOG_SERIAL_II)`` that blocks a take: the shared multiplier's slots
#: (d3, d6, d7, d8, d9, d12) differ pairwise by 1 .. 6 and 9.
TAKE_BLOCKED = 9
#: Cycles from the take (``d0``) to the hand-off registers (``d14``): ``R * H[0]`` and its
#: register (2), the three Horner products and ``R * w`` three cycles apart (operands in d3,
#: d6, d9, d12), ``R * w``'s two.
LOG_SERIAL_STEPS = 14
#: Cycles from an accepted operand to its result (unit idle, no stall): two front stages,
#: the table lookups' register, the take, :data:`LOG_SERIAL_STEPS`, four back stages.
LOG_SERIAL_LATENCY = 2 + 1 + 1 + LOG_SERIAL_STEPS + 4
#: Where ``LN2`` is cut for the two ``E * LN2`` products.
LN2_CUT = 28
#: Width of a product's sum with its addend (two's complement): every sum fits, and a
#: Horner step's bits RF .. RF + 34 are in it.
SUM_BITS = 70
#: Where the multipliers' operands are split: each partial product fits a MULT18X18D.
SPLIT = 17


def _split(x):
    """``x`` (signed, at most 35 bits) as its unsigned low :data:`SPLIT` bits and its signed
    rest."""
    x = x.as_signed()
    return x[:SPLIT], x[SPLIT:].as_signed()


def _partial_products(m, en, a, b, *, name: str, loads=None) -> list:
    """The four partial products of ``a * b`` (signed; ``a`` and ``b`` at most 35 bits) split
    at bit :data:`SPLIT`, registered (loaded while ``en``): ``[lo*lo, lo*hi, hi*lo,
    hi*hi]`` with the low parts unsigned and the high parts signed, each one 18 x 18-bit
    multiplier's product.

    ``loads = (a_next, b_next, load)``: ``a`` and ``b`` are registers that load ``a_next``
    and ``b_next`` in the cycles ``load`` is high; each product is then a
    :class:`~hdl.lib.dspmul.RegisteredMul` holding copies of those registers (on an ECP5
    the DSP block's: no route to or from the multiplier in the cycle it computes)."""
    (a_lo, a_hi), (b_lo, b_hi) = _split(a), _split(b)
    pairs = (("ll", a_lo, b_lo), ("lh", a_lo, b_hi), ("hl", a_hi, b_lo), ("hh", a_hi, b_hi))
    out = []
    if loads is not None:
        a_next, b_next, load = loads
        (na_lo, na_hi), (nb_lo, nb_hi) = _split(a_next), _split(b_next)
        nexts = {"ll": (na_lo, nb_lo), "lh": (na_lo, nb_hi), "hl": (na_hi, nb_lo),
                 "hh": (na_hi, nb_hi)}
        return [registered_product(m, *nexts[tag], ce_in=load, ce_out=en,
                                   name=f"{name}_part_{tag}") for tag, _, _ in pairs]
    for tag, x, y in pairs:
        prod = x * y
        reg = Signal(prod.shape(), name=f"{name}_part_{tag}")
        with m.If(en):
            m.d.sync += reg.eq(prod)
        out.append(reg)
    return out


def _product_sum(m, parts, addend, *, name: str) -> Signal:
    """``a * b + addend`` from :func:`_partial_products`' registers: ``lo*lo`` and
    ``hi*hi`` side by side (they do not overlap), the two middle products, the addend; one
    carry-save 4:2 level (two 3:2 levels of XOR / majority) and one carry-propagate adder,
    :data:`SUM_BITS` wide (modulo ``2**SUM_BITS``; every value here fits, signed)."""
    ll, lh, hl, hh = parts
    terms = [Cat(ll, hh).as_signed(), lh << SPLIT, hl << SPLIT, addend]
    ext = []
    for i, t in enumerate(terms):
        x = Signal(signed(SUM_BITS), name=f"{name}_term{i}")
        m.d.comb += x.eq(t)
        ext.append(x.as_unsigned())

    def csa(x, y, z, tag):
        sm = Signal(SUM_BITS, name=f"{name}_{tag}_sum")
        cy = Signal(SUM_BITS, name=f"{name}_{tag}_carry")
        m.d.comb += [sm.eq(x ^ y ^ z), cy.eq(((x & y) | (x & z) | (y & z)) << 1)]
        return sm, cy

    s1, c1 = csa(ext[0], ext[1], ext[2], "csa0")
    s2, c2 = csa(s1, c1, ext[3], "csa1")
    total = Signal(signed(SUM_BITS), name=f"{name}_sum")
    m.d.comb += total.eq((s2 + c2)[:SUM_BITS])
    return total


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
        :data:`LOG_SERIAL_LATENCY` (22) cycles from an accepted operand to its result, with the
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

        # --- the multiplier: partial products registered, then summed, then registered ---------
        # Every product takes three cycles after its operands are loaded: the four partial
        # products of a 17-bit split (one MULT18X18D each) into registers, their sum with an
        # addend (a carry-save 4:2 level and one carry-propagate adder), the sum's Horner bits
        # into ``mul_h``. A Horner step is then three cycles, slot to slot (as two it was the
        # S = 4 FPGA core's routed path, 12.94 ns at 9de3820: the product registers through
        # the carry chain and the operand mux back into the DSPs' operand registers). The
        # shared multiplier's operands are loaded in slots d3, d6, d9, d12 (the Horner steps
        # and ``P``) and d7, d8 (``E * LN2``) after the take (d0); ``R * H[0]`` has a
        # multiplier of its own (d1) and its sum its own register (d2). The slots differ
        # pairwise by 1..6 or 9, so the next operation may be taken at d7, d8 or d10 on (not
        # d9): no two operations then load the operands, or sum, in one cycle. ``ph[i]`` is
        # high in cycle d(i + 1) of every operation in flight (at most two).
        ph = Signal(LOG_SERIAL_STEPS, name="mul_phase")
        busy = Signal(name="mul_busy")
        m.d.comb += [
            busy.eq(ph[:LOG_SERIAL_II - 1].any() | ph[TAKE_BLOCKED - 1]),
            take.eq(en & v1 & looked & ~busy),
        ]
        with m.If(en):
            m.d.sync += ph.eq(Cat(take, ph[:-1]))

        def d(i):
            """High in cycle ``d(i)`` after a take (``i >= 1``)."""
            return ph[i - 1]

        # the tables' words for stage 1's index, registered every cycle: the lookups are off
        # the take's path (they were the S = 8 FPGA core's slowest estimated path, 16.15 ns at
        # 73bcd20, the lookup ahead of the DSP); an operation that just entered stage 1 waits
        # a cycle for them (``looked``)
        inv_now, logt_look = log_lookups(m, c, w, j1, name="mul")
        inv = Signal.like(inv_now, name="mul_inv")
        logt_now = Signal.like(logt_look, name="mul_logt_looked_up")
        m.d.sync += [inv.eq(inv_now), logt_now.eq(logt_look), looked.eq(~move1)]

        # the take (d0): R, E, LOGT[j] and the specials of the operation; they hold through
        # d7 (the next take is at d7 at the earliest), the copies below from d8 on
        r_t = Signal(signed(w["red"][0]), name="take_r")
        e_t = Signal(signed(w["e"][0]), name="take_e")
        logt_t = Signal(w["logt"][0], name="take_logt")
        special_t = Signal(name="take_special")
        spec_val_t = Signal.like(spec_val1, name="take_special_val")
        with m.If(take):
            m.d.sync += [r_t.eq(mant1 * inv - (1 << c.RF)), e_t.eq(e1), logt_t.eq(logt_now),
                         special_t.eq(special1), spec_val_t.eq(spec_val1)]
        r_c = Signal.like(r_t, name="chain_r")                  # copies at d7: d8 .. d14
        e_c = Signal.like(e_t, name="chain_e")
        logt_c = Signal.like(logt_t, name="chain_logt")
        special_c = Signal(name="chain_special")
        spec_val_c = Signal.like(spec_val1, name="chain_special_val")
        with m.If(en & d(7)):
            m.d.sync += [r_c.eq(r_t), e_c.eq(e_t), logt_c.eq(logt_t),
                         special_c.eq(special_t), spec_val_c.eq(spec_val_t)]

        # R * H[0] (d1: partial products; d2: h1 = H[1] + (R * H[0] >> RF) into its register)
        wh = w["h"][0]
        h0 = Const(c.H[0], signed(wh))
        h0_parts = _partial_products(m, en, r_t, h0, name="h0")
        h1_sum = _product_sum(m, h0_parts, Const(c.H[1] << c.RF, signed(SUM_BITS)), name="h0")
        h1 = Signal(signed(wh), name="h0_h1")
        with m.If(en):
            m.d.sync += h1.eq(h1_sum[c.RF:c.RF + wh])

        # the shared multiplier: operand registers, partial products, sum, Horner register
        a_op = Signal(signed(w["red"][0]), name="mul_a")
        b_op = Signal(signed(wh), name="mul_b")
        a_next = Signal.like(a_op, name="mul_a_next")      # what the slots below load
        b_next = Signal.like(b_op, name="mul_b_next")
        op_load = Signal(name="mul_operands_load")
        parts = _partial_products(m, en, a_op, b_op, name="mul",
                                  loads=(a_next, b_next, op_load))
        addend = Signal(signed(SUM_BITS), name="mul_addend")
        m.d.comb += addend.eq(Mux(d(5), c.H[2] << c.RF, 0) | Mux(d(8), c.H[3] << c.RF, 0)
                              | Mux(d(11), c.H[4] << c.RF, 0) | Mux(d(9), logt_c, 0))
        total = _product_sum(m, parts, addend, name="mul")
        h = Signal(signed(wh), name="mul_h")                   # the last sum's Horner bits
        with m.If(en):
            m.d.sync += h.eq(total[c.RF:c.RF + wh])

        big = Signal(signed(w["big"][0]), name="mul_big")      # E * LN2_lo + LOGT[j] (d9)
        ehi = Signal(signed(w["big"][0]), name="mul_e_hi")     # E * LN2_hi (d10)
        lo, hi = c.LN2 & ((1 << LN2_CUT) - 1), c.LN2 >> LN2_CUT
        # the operands each slot loads for the next cycle (the multiplier's operand registers
        # load them, a copy inside each DSP block on an ECP5: _partial_products); the sums
        # come two cycles after the slot: h2 (d5), A (d9), E * LN2_hi (d10), h3 (d8), w (d11),
        # P (d14)
        operand_slots = {3: (r_t, h1),                         # R, h1
                         6: (r_t, h),                          # R, h2
                         7: (e_t, lo),                         # E, LN2_lo
                         8: (e_c, hi),                         # E, LN2_hi
                         9: (r_c, h),                          # R, h3
                         12: (r_c, h)}                         # R, w
        m.d.comb += [a_next.eq(a_op), b_next.eq(b_op),
                     op_load.eq(en & Cat(*[d(i) for i in operand_slots]).any())]
        for i, (a_val, b_val) in operand_slots.items():
            with m.If(d(i)):
                m.d.comb += [a_next.eq(a_val), b_next.eq(b_val)]
        with m.If(op_load):
            m.d.sync += [a_op.eq(a_next), b_op.eq(b_next)]
        with m.If(en):
            with m.If(d(9)):
                m.d.sync += big.eq(total)
            with m.If(d(10)):
                m.d.sync += ehi.eq(total)
            # d14: P = R * w into the hand-off registers

        # --- hand-off registers (d14), then the back stages -------------------------------------
        p = StallPipeline(m, en)
        v7 = p.valid(d(LOG_SERIAL_STEPS), "s7_valid")
        prod7 = p.reg(total, "s7_prod", signed(w["prod"][0]))
        big7 = p.reg(big + (ehi << LN2_CUT), "s7_big", signed(w["big"][0]))
        special7 = p.reg(special_c, "s7_special")
        spec_val7 = p.reg(spec_val_c, "s7_special_val")
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
