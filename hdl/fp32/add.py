"""Pipelined IEEE 754 binary32 adder/subtractor (round-to-nearest-even, exact subnormals)."""

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data

from ..formats import FP32
from ..lib.mustuse import used_if_rejected
from ..registry import Block
from .config import FP32Config
from .round import count_leading_zeros, round_finish, round_plan_pre, round_prepare
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
    :func:`~hdl.fp32.round.round_plan_pre`, and the one-hot limit of the left shift) | ``lzc``
    (leading-zero count of the sum ORed with the limit: the shift stops at the smallest normal
    exponent) | ``normalize`` (left shift; biased exponent minus one, 0 for a subnormal result,
    and overflow) | ``round`` (guard and sticky bits: :func:`~hdl.fp32.round.round_prepare`
    with shift 0) | nearest-even increment and packing (:func:`~hdl.fp32.round.round_finish`),
    special-value select. A subnormal sum is exact (both addends are multiples of
    ``2**-149``), so it never needs the right shift onto the subnormal grid that a multiplier
    or divider does: stopping the normalising shift early gives the same frame.

    Parameters
    ----------
    config : FP32Config
        ``add_stages`` sets the latency.
    same_sign : bool
        Effective additions only (keyword-only, default ``False``): the caller guarantees that
        for every operation with no NaN operand, ``a`` and ``b`` (its sign flipped when
        ``sub``) have the same sign, as in a sum of non-negative values (the softmax
        denominator, sums of squares). The magnitudes are then always added, so the sum's
        leading one is at bit 27 or 26 of the frame (or the shift limit stops at 26 below the
        normal range): the leading-zero count and the normalising barrel shift become one
        bit and a 2:1 select, and the subtract path goes. Same latency, and for such inputs
        the same words as the general adder (IEEE 754 RNE). Operands of opposite signs give
        ``+-(|a| + |b|)`` rounded (the sign of the larger magnitude), not their difference.

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

    def __init__(self, *, config=None, same_sign: bool = False):
        with used_if_rejected(self):
            if not isinstance(same_sign, bool):
                raise TypeError(f"same_sign must be a bool, not {type(same_sign).__name__}")
        self.same_sign = same_sign
        super().__init__(config=config)

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
        # The differences come from the fields, ``max(efield, 1)`` (the ``- 150`` of ``exp``
        # cancels): one carry chain each, not the exponents' chains and then theirs (the
        # unpack step into ``shift`` was the S = 4 FPGA core's routed critical path, 12.97 ns
        # at 9de3820, in the softmax's row-sum tree).
        f_a = Signal(signed(9), name="add_a_field1")     # max(efield, 1): a zero field has
        f_b = Signal(signed(9), name="add_b_field1")     # no bit set, so set bit 0
        m.d.comb += [f.eq(Cat(x.efield[0] | ~x.efield.any(), x.efield[1:]))
                     for f, x in ((f_a, a), (f_b, b))]
        d_ab = Signal(signed(11), name="add_exp_diff_ab")
        d_ba = Signal(signed(11), name="add_exp_diff_ba")
        m.d.comb += [d_ab.eq(f_a - f_b), d_ba.eq(f_b - f_a)]
        # same_sign: a sum needs only the larger exponent first (equal exponents: shift 0, either
        # order gives the same sum and the same base_pre), so the 31-bit magnitude compare goes.
        m.d.comb += swap.eq(d_ab[-1] if self.same_sign else a.mag < b.mag)

        def clamp(d):               # d >= 0; d > _ALIGN_W from its bits, no comparator chain
            k = len(shift)
            over = d[k:].any() | d[:k].matches(*[f"{v:0{k}b}" for v in range(_ALIGN_W + 1, 2**k)])
            return Mux(over, _ALIGN_W, d[:k])
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
        if self.same_sign:
            m.d.comb += total.eq(s.big + s.small)
        else:
            # One carry chain for both: with c = sub_mag, (2 big + c) + (2 (small ^ c..c) + c),
            # bit 0 dropped, is big + small (c = 0) or big + ~small + 1 = big - small + 2**27
            # (c = 1: the carry out is dropped).
            flip = s.small ^ s.sub_mag.replicate(_ALIGN_W)
            both = Signal(_ALIGN_W + 2, name="add_sum_carry")
            m.d.comb += [both.eq(Cat(s.sub_mag, s.big) + Cat(s.sub_mag, flip)),
                         total.eq(Cat(both[1:_ALIGN_W + 1], both[_ALIGN_W + 1] & ~s.sub_mag))]
        sum_exp = Signal(signed(12), name="add_sum_exp")   # weight of total's LSB
        m.d.comb += sum_exp.eq(s.big_exp - 3)
        pre = round_plan_pre(m, exp=sum_exp, width=_ALIGN_W + 1, name="add_rnd")
        # A sum of two multiples of 2**-149 below the normal range is exact, so instead of
        # normalising fully and shifting a subnormal result back right (round_plan_lz +
        # round_prepare's shifter), the left shift stops at the smallest normal exponent:
        # lz = min(leading zeros, base_pre), where base_pre = max(big exponent field, 1) >= 1
        # is the biased exponent the leading one would have at bit 27. A one in ``limit`` at
        # bit 27 - base_pre (when base_pre <= 27) makes the leading-zero count stop there.
        # same_sign: a normal big operand has its leading one at bit 26, and the sum's is at
        # 27 or 26; a subnormal one has base_pre = 1, so the limit is at bit 26. Either way
        # lz = 1 - total[27], and no limit is needed.
        extra = {}
        if not self.same_sign:
            limit = extra["limit"] = Signal(_ALIGN_W + 1, name="add_lz_limit")
            for k in range(_ALIGN_W + 1):
                m.d.comb += limit[k].eq(pre.base_pre == _ALIGN_W - k)
        s = p.boundary(
            "add", total=total, base_pre=pre.base_pre, ovf_lim=pre.ovf_lim, sign=s.big_sign,
            zero_sign=s.zero_sign, nan=s.nan, inf=s.inf, inf_sign=s.inf_sign, **extra)

        # --- leading-zero count, clamped at the smallest normal exponent ----------------------
        if self.same_sign:
            lz = Signal(1, name="add_lz")
            m.d.comb += lz.eq(~s.total[_ALIGN_W])
        else:
            lz = count_leading_zeros(m, s.total | s.limit, name="add")
        zero = Signal(name="add_is_zero")
        m.d.comb += zero.eq(s.total == 0)
        s = p.boundary(
            "lzc", total=s.total, lz=lz, zero=zero, base_pre=s.base_pre, ovf_lim=s.ovf_lim,
            sign=s.sign, zero_sign=s.zero_sign, nan=s.nan, inf=s.inf, inf_sign=s.inf_sign)

        # --- normalize: left shift; biased exponent minus one (0: subnormal), overflow --------
        norm = Signal(_ALIGN_W + 1, name="add_norm")
        base = Signal(8, name="add_rnd_base")
        ovf = Signal(name="add_rnd_ovf")
        if self.same_sign:       # lz is 0 or 1: a 2:1 select instead of the barrel shifter
            m.d.comb += norm.eq(Mux(s.lz[0], s.total << 1, s.total))
        else:
            m.d.comb += norm.eq(s.total << s.lz)
        m.d.comb += [base.eq(s.base_pre - s.lz), ovf.eq(s.lz <= s.ovf_lim)]
        s = p.boundary(
            "normalize", norm=norm, base=base, ovf=ovf, zero=s.zero, sign=s.sign,
            zero_sign=s.zero_sign, nan=s.nan, inf=s.inf, inf_sign=s.inf_sign)

        # --- round: guard/sticky (no subnormal shift: shift 0) | nearest-even, specials -------
        plan = SimpleNamespace(shift=Const(0, range(_ALIGN_W + 2)), base=s.base, ovf=s.ovf)
        r = round_prepare(m, norm=s.norm, plan=plan, name="add_rnd")
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
