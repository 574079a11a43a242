"""Pipelined IEEE 754 binary32 adder/subtractor (round-to-nearest-even, exact subnormals)."""

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data

from ..formats import FP32
from ..registry import Block
from .config import FP32Config
from .round import (count_leading_zeros, round_finish, round_plan_lz, round_plan_pre,
                    round_prepare)
from .unit import FP32CutUnit
from .unpack import special_or_rounded, unpack_fp32

__all__ = ["FP32AddIn", "FP32Add"]

#: Width of the aligned significands: 24 bits + guard, round and sticky positions.
_ALIGN_W = 27


class FP32AddIn(data.Struct):
    """One operation of :class:`FP32Add`: ``a + b`` (``sub = 0``) or ``a - b`` (``sub = 1``)."""

    a: FP32
    b: FP32
    sub: 1


class FP32Add(FP32CutUnit):
    """Pipelined FP32 adder/subtractor, one operation per cycle.

    Computes ``a + b`` or ``a - b`` in IEEE 754 binary32 with round-to-nearest-even, bit-exact
    with numpy ``float32``: subnormal inputs and outputs are exact (no flush to zero), results
    that round past the largest finite value give ±Inf, an exact zero sum is ``+0`` unless both
    addends are ``-0`` (``x + (-x) = +0``, ``(-0) + (-0) = -0``). NaN inputs and ``Inf - Inf``
    give the quiet NaN ``0x7FC00000``.

    Datapath steps (each boundary a register or a wire, :class:`~hdl.fp32.config.FP32Config`):
    ``unpack`` (classify, order the operands by magnitude, exponent difference) | ``align``
    (shift the smaller significand right into a 27-bit frame, OR the shifted-out bits into the
    LSB) | ``add`` (28-bit add or subtract of magnitudes; exponent terms of the rounding,
    :func:`~hdl.fp32.round.round_plan_pre`) | ``lzc`` (leading-zero count) | ``normalize``
    (left shift; result exponent and subnormal shift amount:
    :func:`~hdl.fp32.round.round_plan_lz`) | ``round`` (subnormal right shift, guard and sticky
    bits: :func:`~hdl.fp32.round.round_prepare`) | nearest-even increment and packing
    (:func:`~hdl.fp32.round.round_finish`), special-value select.

    Parameters
    ----------
    config : FP32Config
        ``add_stages`` sets the latency.

    Attributes
    ----------
    latency : int
        Cycles from accepting an operation to its result being valid (``config.add_stages``),
        when the output is not stalled.

    Members
    -------
    i : In(stream.Signature(FP32AddIn))
        Operand pairs and the subtract bit.
    o : Out(stream.Signature(FP32))
        Results, in input order.
    """

    UNIT = "fp32_add"
    IN = FP32AddIn

    def elaborate(self, platform):
        m = Module()
        p = self.cut_pipeline(m, "add")

        # --- unpack: classify, order by magnitude, exponent difference -----------------------
        pay = self.i.payload
        a = unpack_fp32(m, pay.a.as_value(), name="add_a")
        b = unpack_fp32(m, pay.b.as_value(), name="add_b")
        b_sign = Signal(name="add_b_sign_eff")          # sign of the subtrahend after `sub`
        m.d.comb += b_sign.eq(b.sign ^ pay.sub)
        swap = Signal(name="add_swap")                  # |b| > |a|: b becomes the big operand
        m.d.comb += swap.eq(a.mag < b.mag)
        big_sig = Signal(24, name="add_big_sig")
        small_sig = Signal(24, name="add_small_sig")
        big_exp = Signal(signed(10), name="add_big_exp")
        big_sign = Signal(name="add_big_sign")
        shift = Signal(range(_ALIGN_W + 1), name="add_align_shift")
        m.d.comb += [
            big_sig.eq(Mux(swap, b.sig, a.sig)),
            small_sig.eq(Mux(swap, a.sig, b.sig)),
            big_exp.eq(Mux(swap, b.exp, a.exp)),
            big_sign.eq(Mux(swap, b_sign, a.sign)),
        ]
        # The alignment shift is min(big exponent - small exponent, 27), and that difference is
        # |a.exp - b.exp| for every input: ordering the magnitudes orders the exponent fields,
        # ``exp = max(efield, 1) - 150`` keeps that order, and equal exponents give 0 either
        # way. So both differences and their clamps are computed beside the 31-bit magnitude
        # compare, and the sign of one of them picks, instead of subtracting after ``swap``
        # (the unpack step was the critical path of the optimizer engine on the ECP5).
        d_ab = Signal(signed(11), name="add_exp_diff_ab")
        d_ba = Signal(signed(11), name="add_exp_diff_ba")
        m.d.comb += [d_ab.eq(a.exp - b.exp), d_ba.eq(b.exp - a.exp)]

        def clamp(d):               # d >= 0
            return Mux(d > _ALIGN_W, _ALIGN_W, d[:len(shift)])
        m.d.comb += shift.eq(Mux(d_ab[-1], clamp(d_ba), clamp(d_ab)))
        nan = Signal(name="add_nan")
        m.d.comb += nan.eq(a.nan | b.nan | (a.inf & b.inf & (a.sign != b_sign)))
        s = p.boundary(
            "unpack", big_sig=big_sig, small_sig=small_sig, big_exp=big_exp, big_sign=big_sign,
            shift=shift, sub_mag=a.sign != b_sign, zero_sign=a.sign & b_sign, nan=nan,
            inf=a.inf | b.inf, inf_sign=Mux(a.inf, a.sign, b_sign))

        # --- align: smaller significand right by the exponent difference, sticky jammed ------
        wide = Signal(2 * _ALIGN_W, name="add_align_wide")
        m.d.comb += wide.eq(Cat(Const(0, _ALIGN_W + 3), s.small_sig) >> s.shift)
        small_al = Signal(_ALIGN_W, name="add_small_aligned")
        m.d.comb += small_al.eq(Cat(wide[_ALIGN_W] | wide[:_ALIGN_W].any(), wide[_ALIGN_W + 1:]))
        s = p.boundary(
            "align", big=Cat(Const(0, 3), s.big_sig), small=small_al, big_exp=s.big_exp,
            big_sign=s.big_sign, sub_mag=s.sub_mag, zero_sign=s.zero_sign, nan=s.nan,
            inf=s.inf, inf_sign=s.inf_sign)

        # --- add: magnitudes (|big| >= |small|, so the difference is >= 0) --------------------
        total = Signal(_ALIGN_W + 1, name="add_sum")
        m.d.comb += total.eq(Mux(s.sub_mag, s.big - s.small, s.big + s.small))
        sum_exp = Signal(signed(12), name="add_sum_exp")   # weight of total's LSB
        m.d.comb += sum_exp.eq(s.big_exp - 3)
        pre = round_plan_pre(m, exp=sum_exp, width=_ALIGN_W + 1, name="add_rnd")
        s = p.boundary(
            "add", total=total, base_pre=pre.base_pre, ovf_lim=pre.ovf_lim, sign=s.big_sign,
            zero_sign=s.zero_sign, nan=s.nan, inf=s.inf, inf_sign=s.inf_sign)

        # --- leading-zero count ---------------------------------------------------------------
        lz = count_leading_zeros(m, s.total, name="add")
        s = p.boundary(
            "lzc", total=s.total, lz=lz, base_pre=s.base_pre, ovf_lim=s.ovf_lim, sign=s.sign,
            zero_sign=s.zero_sign, nan=s.nan, inf=s.inf, inf_sign=s.inf_sign)

        # --- normalize: left shift; result exponent and subnormal shift, in parallel ----------
        norm = Signal(_ALIGN_W + 1, name="add_norm")
        zero = Signal(name="add_is_zero")
        m.d.comb += [norm.eq(s.total << s.lz), zero.eq(s.lz == _ALIGN_W + 1)]
        plan = round_plan_lz(m, pre=s, lz=s.lz, width=len(norm), name="add_rnd")
        s = p.boundary(
            "normalize", norm=norm, shift=plan.shift, base=plan.base, ovf=plan.ovf, zero=zero,
            sign=s.sign, zero_sign=s.zero_sign, nan=s.nan, inf=s.inf, inf_sign=s.inf_sign)

        # --- round: subnormal shift, guard/sticky | nearest-even increment, specials ---------
        r = round_prepare(m, norm=s.norm, plan=s, name="add_rnd")
        s = p.boundary(
            "round", frame=r.frame, base=r.base, ovf=r.ovf, zero=s.zero, sign=s.sign,
            zero_sign=s.zero_sign, nan=s.nan, inf=s.inf, inf_sign=s.inf_sign)
        rounded = round_finish(m, sign=s.sign, frame=s.frame, base=s.base, ovf=s.ovf,
                               name="add_rnd")
        p.output(special_or_rounded(m, nan=s.nan, inf=s.inf, inf_sign=s.inf_sign, zero=s.zero,
                                    zero_sign=s.zero_sign, rounded=rounded, name="add"))
        return m


def _params(preset: str) -> dict:
    cfg = FP32Config.preset(preset)
    return {**cfg.to_dict(), "latency": cfg.latency("fp32_add"), "in_width": 65,
            "out_width": 32}


TESSERA_BLOCKS = [
    Block("fp32_add",
          build=lambda preset: FP32Add(config=FP32Config.preset(preset)),
          params=_params),
]
