"""Pipelined IEEE 754 binary32 comparison with max/min."""
from amaranth.hdl import Module, Mux, Signal
from amaranth.lib import data

from ..formats import FP32
from ..registry import Block
from .config import FP32Config
from .unit import FP32CutUnit
from .unpack import QNAN, unpack_fp32

__all__ = ["FP32CompareIn", "FP32CompareOut", "FP32Compare"]


class FP32CompareIn(data.Struct):
    """One comparison of :class:`FP32Compare`."""

    a: FP32
    b: FP32


class FP32CompareOut(data.Struct):
    """Result of :class:`FP32Compare` (``max`` in the low bits)."""

    max: FP32
    min: FP32
    less: 1
    equal: 1
    less_equal: 1
    unordered: 1


class FP32Compare(FP32CutUnit):
    """Pipelined FP32 comparator, one comparison per cycle.

    Flags (IEEE 754 quiet comparisons, numpy's ``<``, ``==``, ``<=``): ``less = a < b``,
    ``equal = a == b``, ``less_equal = a <= b``; ``-0 == +0``; all three are 0 when either
    operand is a NaN, and then ``unordered = 1``. (``a > b`` is ``~less_equal & ~unordered``,
    ``a >= b`` is ``~less & ~unordered``.)

    ``max``/``min``: the quiet NaN ``0x7FC00000`` if either operand is a NaN (NaN-propagating
    like ``np.maximum``/``np.minimum``, not IEEE ``maxNum``); otherwise the larger / smaller
    operand. Operands that compare equal: with ``config.cmp_zero_order == "numpy"`` both results
    are ``b`` (bit-exact with ``np.maximum(a, b)``, so ``max(+0, -0) = -0``); with ``"ieee"``
    (IEEE 754-2019 ``maximum``/``minimum``) ``-0 < +0`` (``max(+0, -0) = +0``, ``min = -0``).

    Datapath steps: ``magnitude`` (classify, 31-bit magnitude comparison) | flags and max/min
    select.

    Parameters
    ----------
    config : FP32Config
        ``cmp_stages`` sets the latency, ``cmp_zero_order`` the max/min rule for equal operands.

    Attributes
    ----------
    latency : int
        Cycles from accepting a comparison to its result being valid (``config.cmp_stages``).

    Members
    -------
    i : In(stream.Signature(FP32CompareIn))
        Operand pairs.
    o : Out(stream.Signature(FP32CompareOut))
        Flags and max/min, in input order.
    """

    UNIT = "fp32_compare"
    IN = FP32CompareIn
    OUT = FP32CompareOut

    def elaborate(self, platform):
        m = Module()
        p = self.cut_pipeline(m, "cmp")

        # --- magnitude: classify, compare magnitudes -------------------------------------------
        a_bits = self.i.payload.a.as_value()
        b_bits = self.i.payload.b.as_value()
        a = unpack_fp32(m, a_bits, name="cmp_a")
        b = unpack_fp32(m, b_bits, name="cmp_b")
        mag_lt = Signal(name="cmp_mag_lt")
        mag_eq = Signal(name="cmp_mag_eq")
        m.d.comb += [mag_lt.eq(a.mag < b.mag), mag_eq.eq(a.mag == b.mag)]
        s = p.boundary(
            "magnitude", a=a_bits, b=b_bits, a_sign=a.sign, b_sign=b.sign, mag_lt=mag_lt,
            mag_eq=mag_eq, both_zero=a.zero & b.zero, unord=a.nan | b.nan)

        # --- flags, max/min ----------------------------------------------------------------------
        eq = Signal(name="cmp_eq")
        lt = Signal(name="cmp_lt")
        gt = Signal(name="cmp_gt")
        m.d.comb += [
            eq.eq(~s.unord & (s.both_zero | ((s.a_sign == s.b_sign) & s.mag_eq))),
            # a < b: a negative and b positive (not both zero: eq), or same sign and the
            # magnitudes ordered (reversed for negatives).
            lt.eq(~s.unord & ~eq & Mux(s.a_sign != s.b_sign, s.a_sign,
                                       Mux(s.a_sign, ~s.mag_lt & ~s.mag_eq, s.mag_lt))),
            gt.eq(~s.unord & ~eq & ~lt),
        ]
        mx = Signal(32, name="cmp_max")
        mn = Signal(32, name="cmp_min")
        with m.If(s.unord):
            m.d.comb += [mx.eq(QNAN), mn.eq(QNAN)]
        if self.config.cmp_zero_order == "ieee":
            with m.Elif(s.both_zero):
                m.d.comb += [mx.eq(s.a & s.b), mn.eq(s.a | s.b)]   # -0 < +0
        with m.Else():
            m.d.comb += [mx.eq(Mux(gt, s.a, s.b)), mn.eq(Mux(lt, s.a, s.b))]
        out = Signal(FP32CompareOut, name="cmp_out")
        m.d.comb += [
            out.max.eq(mx), out.min.eq(mn), out.less.eq(lt), out.equal.eq(eq),
            out.less_equal.eq(lt | eq), out.unordered.eq(s.unord),
        ]
        p.output(out)
        return m


def _params(preset: str) -> dict:
    cfg = FP32Config.preset(preset)
    return {**cfg.to_dict(), "latency": cfg.latency("fp32_compare"), "in_width": 64,
            "out_width": 68}


TESSERA_BLOCKS = [
    Block("fp32_compare",
          build=lambda preset: FP32Compare(config=FP32Config.preset(preset)),
          params=_params),
]
