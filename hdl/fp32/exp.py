"""Pipelined FP32 ``exp`` approximation (for softmax), one operation per cycle.

Table + polynomial in 30-fraction-bit fixed point (``t = config.exp_table_bits``,
``N = 2**t``; constants from :func:`hdl.fp32.divsqrt_config.exp_constants`, computed exactly with
integers). The golden model :class:`sim.model.fp32_exp.FP32Exp` performs the same integer steps:

Every multiplication takes three stages: the partial products of DSP-sized slices of its
registered operands (:meth:`hdl.fp32.div.StallPipeline.partial_products`), registered (``pp``);
their sum, registered (``sum``); the additions that follow, whose register feeds the next
multiplication's DSPs. Latency 21:

======  ==========================================================================  ========
stage   operation                                                                   register
======  ==========================================================================  ========
0       unpack; ``X = trunc(|x| * 2**30)`` (barrel shift); specials                  ``mag``
1       ``Xs = ±X``                                                                  ``xs``
2..4    ``n = ((Xs >> 14) * CINV + 2**31) >> 32`` ~ ``round(x * N / ln2)``           ``n``
5..7    ``R = Xs - ((n * LN2N + 2**17) >> 18)``: ``r = x - n*ln2/N``                 ``red``
8..10   ``h1 = C2 + (R*C3 >> 30)``                                                   ``h1``
11..13  ``h2 = C1 + (R*h1 >> 30)``                                                   ``h2``
14..16  ``p = C0 + (R*h2 >> 30)`` (= e**r); ``T = TABLE[n mod N]`` (= 2**(j/N))       ``p, tab``
17, 18  ``P = T * p`` (62 bits, 60 fraction bits); in stage 17 the rounding plans    ``prod``,
        for ``P``'s leading one in bit 60 or 59 (``k = n >> t``,                    ``plan``
        :func:`~hdl.fp32.round.round_plan_top2`)
19      round ``P * 2**(k - 60)`` (= ``(P >> 28) * 2**(k - 32)``, sticky              ``frame``
        ``P mod 2**28 != 0``): one-bit normalize, jam to 27 bits, subnormal shift,
        guard/sticky (:func:`~hdl.fp32.round.round_prepare`)
20      nearest-even increment and packing (:func:`~hdl.fp32.round.round_finish`);   ``out``
        special override
======  ==========================================================================  ========

``2**59 <= P < 2**61`` for every argument (``P = T * p`` with ``T`` in ``[2**30, 2**31)`` and
``p ~ e**r``, ``|r| <~ 0.51 ln2 / N``); :func:`sim.model.fp32_exp.exp_product_bounds` proves it by
enumerating every reachable reduced argument, for every table size, and
``tests/test_fp32_exp_model.py`` runs it. The rounding therefore needs no leading-zero count.

Measured accuracy against float64 ``exp``: see ``docs/fp32_div_sqrt_exp.md`` (under 1 ulp).
"""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned

from ..lib.dspmul import sum_products
from ..registry import Block
from .div import StallPipeline
from .divsqrt_config import EXP_FRAC_BITS, FP32DivSqrtConfig, exp_constants
from .round import jam_sticky, round_finish, round_plan_select, round_plan_top2, round_prepare
from .unit import FP32StreamUnit
from .unpack import QNAN, special_top, special_word

__all__ = ["FP32Exp", "exp_register_widths"]

F = EXP_FRAC_BITS  # fraction bits of the fixed-point datapath
#: The normalised 61-bit product is compressed to 27 bits (24 + guard + round + jammed sticky).
_JAM_KEEP = 27
_JAM_DROP = 61 - _JAM_KEEP


def exp_register_widths(t: int) -> dict:
    """``{register: (bits, signed)}`` of the exp datapath for ``exp_table_bits = t`` (the
    golden model's intermediates must fit; ``tests/test_fp32_exp_model.py`` checks it)."""
    return {"x_fix": (39, True), "n": (t + 10, True), "red": (27, True), "h1": (32, True),
            "h2": (32, True), "p": (F + 1, False), "table": (F + 1, False),
            "prod": (2 * F + 2, False)}


class FP32Exp(FP32StreamUnit):
    """FP32 ``exp(x)`` approximation, fully pipelined, bit-exact with its golden model.

    Input and output are IEEE 754 binary32. The result is the round-to-nearest-even FP32
    value of a fixed-point approximation whose relative error is below ``2**-26``, so the
    error against the exact ``exp`` stays below one ulp (measured: see the docs). Specials:
    NaN -> ``0x7FC00000``; ``+Inf`` and ``x >= 128`` -> ``+Inf``; ``-Inf`` and ``x <= -128`` ->
    ``+0``; results overflow to ``+Inf`` above ``x ~ 88.7228`` and underflow through the
    subnormals to ``+0`` below ``x ~ -103.97``; zeros and subnormal inputs give ``1.0``.

    Parameters
    ----------
    config : FP32DivSqrtConfig
        ``exp_table_bits`` = ``t``: a ``2**t``-entry table of ``2**(j/2**t)``.

    Attributes
    ----------
    latency : int
        ``config.exp_latency`` (21) cycles from an accepted operand to its result (no stall).
        One operation per cycle.

    Members
    -------
    i : In(stream.Signature(FP32))
        Arguments ``a``.
    o : Out(stream.Signature(FP32))
        Results ``exp(a)``, in input order. Whole-pipeline stall while ``o.valid & ~o.ready``;
        ``i.ready = ~o.valid | o.ready``.
    """

    CONFIG = FP32DivSqrtConfig
    LATENCY_ATTR = "exp_latency"

    def elaborate(self, platform):
        m = Module()
        t = self.config.exp_table_bits
        c = exp_constants(t)
        w = exp_register_widths(t)
        nw = w["n"][0]                                # |n| <= 128 * 2**t / ln2 + 1

        en = self.stall_enable(m)
        p = StallPipeline(m, en)

        # --- stage 0: unpack, fixed-point magnitude, specials-----------------------------------
        bits = self.i.payload.as_value()
        frac, efield, sign = bits[0:23], bits[23:31], bits[31]
        nan = (efield == 0xFF) & (frac != 0)
        big = (efield >= 134) & ~nan                  # |x| >= 128, Inf included
        m24 = Signal(24, name="m24")
        x_fix = Signal(37, name="x_fix")
        m.d.comb += [
            m24.eq(Cat(frac, efield != 0)),
            # (m24 << 13) >> (133 - efield) == (m24 << 135) >> (255 - efield): the shift
            # amount is ~efield, no subtraction in front of the barrel shifter
            x_fix.eq(Mux(efield <= 133, (Cat(Const(0, 135), m24) >> ~efield)[:37], 0)),
        ]
        special_val = Mux(nan, QNAN, Mux(sign, 0, 0x7F800000))
        valid = p.valid(self.i.valid, "s0_valid")
        mag = p.reg(x_fix, "s0_mag")
        neg = p.reg(sign, "s0_sign")
        special = p.reg(nan | big, "s0_special")
        spec_val = p.reg(special_top(special_val), "s0_special_val")

        # --- stage 1: signed fixed point -----------------------------------------------------
        valid = p.valid(valid, "s1_valid")
        xs_next = Signal(signed(w["x_fix"][0]), name="s1_xs_next")
        m.d.comb += xs_next.eq(Mux(neg, -mag, mag))
        xs = p.reg(xs_next, "s1_xs")
        # the first product's operand in a register of its own (on an ECP5 the DSP blocks')
        xs_top = p.reg(xs_next >> 14, "s1_xs_top")
        special = p.reg(special, "s1_special")
        spec_val = p.reg(spec_val, "s1_special_val")

        def carry(stage, *regs):
            return [p.reg(r, f"s{stage}_{r.name.split('_', 1)[1]}") for r in regs]

        # Every multiplication takes three stages: DSP partial products of registered
        # operands (StallPipeline.partial_products) | their sum (sum_products) | the additions
        # that follow it, whose register is the next multiplication's operand.
        def multiply(stage, a, b, name, carried):
            """Stages ``stage`` (partial products) and ``stage + 1`` (sum, registered as
            ``s{stage+1}_{name}_sum``); returns the sum register, the valid bit and the carried
            registers after ``stage + 1``."""
            nonlocal valid
            valid = p.valid(valid, f"s{stage}_valid")
            pps = p.partial_products(a, b, f"s{stage}_{name}")
            carried = carry(stage, *carried)
            valid = p.valid(valid, f"s{stage + 1}_valid")
            total = p.reg(sum_products(pps), f"s{stage + 1}_{name}_sum")
            return total, carry(stage + 1, *carried)

        # --- stages 2..4: n = round(x * N / ln2) ------------------------------------------------
        n_sum, (xs, special, spec_val) = multiply(2, xs_top, c.CINV, "n", (xs, special, spec_val))
        valid = p.valid(valid, "s4_valid")
        n = p.reg((n_sum + (1 << 31)) >> 32, "s4_n", signed(nw))
        xs, special, spec_val = carry(4, xs, special, spec_val)

        # --- stages 5..7: reduced argument -------------------------------------------------------
        red_sum, (xs, n, special, spec_val) = multiply(5, n, c.LN2N, "red",
                                                       (xs, n, special, spec_val))
        valid = p.valid(valid, "s7_valid")
        red = p.reg(xs - ((red_sum + (1 << 17)) >> 18), "s7_red", signed(w["red"][0]))
        n, special, spec_val = carry(7, n, special, spec_val)

        # --- stages 8..16: Horner, degree 3; table ----------------------------------------------
        h1_sum, (red, n, special, spec_val) = multiply(8, red, c.C3, "h1",
                                                       (red, n, special, spec_val))
        valid = p.valid(valid, "s10_valid")
        h1 = p.reg(c.C2 + (h1_sum >> F), "s10_h1", signed(w["h1"][0]))
        red, n, special, spec_val = carry(10, red, n, special, spec_val)

        h2_sum, (red, n, special, spec_val) = multiply(11, red, h1, "h2",
                                                       (red, n, special, spec_val))
        valid = p.valid(valid, "s13_valid")
        h2 = p.reg(c.C1 + (h2_sum >> F), "s13_h2", signed(w["h2"][0]))
        red, n, special, spec_val = carry(13, red, n, special, spec_val)

        p_sum, (n, special, spec_val) = multiply(14, red, h2, "p", (n, special, spec_val))
        table = Signal(w["table"][0], name="s16_table_lookup")
        m.d.comb += table.eq(Array(Const(v, w["table"][0]) for v in c.TABLE)[n[:t]])
        valid = p.valid(valid, "s16_valid")
        poly = p.reg((c.C0 + (p_sum >> F))[:w["p"][0]], "s16_p", unsigned(w["p"][0]))
        tab = p.reg(table, "s16_tab")
        n, special, spec_val = carry(16, n, special, spec_val)

        # --- stages 17, 18: table x polynomial; rounding plans ---------------------------------
        # The value is P * 2**(k - 60) with P's leading one in bit 60 or 59. Normalised to 61
        # bits and jammed to 27 (34 bits dropped), its LSB weighs 2**(k - 26) (bit 60 set) or
        # 2**(k - 27) (bit 59: shifted left by one).
        k = Signal(signed(nw - t + 1), name="s17_k")
        m.d.comb += k.eq(n >> t)
        plans = round_plan_top2(m, exp=k - (60 - _JAM_DROP), width=_JAM_KEEP, name="exp_rnd")
        plan_top = p.reg_plan(plans.top, "s17_plan_top1")
        plan_low = p.reg_plan(plans.low, "s17_plan_top0")
        prod, (special, spec_val) = multiply(17, tab, poly, "prod", (special, spec_val))
        plan_top = p.reg_plan(plan_top, "s18_plan_top1")
        plan_low = p.reg_plan(plan_low, "s18_plan_top0")
        prod = prod[:w["prod"][0]]

        # --- stage 19: one-bit normalize, sticky compression, subnormal shift, guard/sticky --
        top = prod[60]
        norm = Signal(61, name="s19_norm")
        m.d.comb += norm.eq(Mux(top, prod[:61], prod[:61] << 1))
        jammed, dropped = jam_sticky(m, norm, _JAM_KEEP, name="s19")
        assert dropped == _JAM_DROP
        r = round_prepare(m, norm=jammed, plan=round_plan_select(top, plan_top, plan_low),
                          name="exp_rnd")
        valid = p.valid(valid, "s19_valid")
        frame = p.reg(r.frame, "s19_frame")
        base = p.reg(r.base, "s19_base")
        ovf = p.reg(r.ovf, "s19_ovf")
        special, spec_val = carry(19, special, spec_val)

        # --- stage 20: nearest-even increment and packing, specials ---------------------------
        rounded = round_finish(m, sign=Const(0, 1), frame=frame, base=base, ovf=ovf,
                               name="exp_rnd")
        out_valid = p.valid(valid, "out_valid")
        out = p.reg(Mux(special, special_word(spec_val), rounded), "out_r", unsigned(32))
        m.d.comb += [
            self.o.valid.eq(out_valid),
            self.o.payload.eq(out),
        ]
        return m


def _params(preset: str) -> dict:
    cfg = FP32DivSqrtConfig.preset(preset)
    return {**cfg.to_dict(), "latency": cfg.exp_latency, "in_fields": [["a", 32]],
            "out_fields": [["r", 32]], "ops_per_cycle": 1, "frac_bits": F}


TESSERA_BLOCKS = [
    Block("fp32_exp", build=lambda preset: FP32Exp(config=FP32DivSqrtConfig.preset(preset)),
          params=_params),
]
