"""Pipelined IEEE 754 binary32 multiplier (round-to-nearest-even, exact subnormals)."""
from types import SimpleNamespace

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data

from ..formats import FP32
from ..lib.dspmul import registered_product
from ..registry import Block
from .config import FP32Config
from .round import (jam_sticky, round_finish, round_plan_select,
                    round_plan_top2, round_prepare, shift_left)
from .unit import FP32CutUnit
from .unpack import sig_leading_zeros, special_or_rounded, unpack_fp32

__all__ = ["FP32MulIn", "FP32Mul"]

#: The normalised 48-bit product is compressed to 27 bits (24 + guard + round + jammed sticky).
_JAM_KEEP = 27
_JAM_DROP = 48 - _JAM_KEEP


class FP32MulIn(data.Struct):
    """One operation of :class:`FP32Mul`: ``a * b``."""

    a: FP32
    b: FP32


class FP32Mul(FP32CutUnit):
    """Pipelined FP32 multiplier, one operation per cycle.

    Computes ``a * b`` in IEEE 754 binary32 with round-to-nearest-even, bit-exact with numpy
    ``float32``: subnormal inputs and outputs are exact, overflow gives ±Inf, underflow gives a
    subnormal or ±0 with the product's sign. NaN inputs and ``0 * Inf`` give the quiet NaN
    ``0x7FC00000``; ``Inf * finite non-zero`` gives ±Inf.

    Datapath steps (each boundary a register or a wire, :class:`~hdl.fp32.config.FP32Config`):
    ``lzc`` (classify; the significands' leading-zero counts; the exponent fields' sum) |
    ``unpack`` (normalise subnormal significands so both have bit 23 set; in parallel the
    product's LSB weight, the exponent fields' sum minus both shifts) | ``partial`` (four
    12 x 12-bit partial products: one ECP5 DSP each, holding the ``unpack`` and ``partial``
    registers when both are cuts, :class:`~hdl.lib.dspmul.RegisteredMul`; in parallel the
    result exponent for both positions of the product's leading one,
    :func:`~hdl.fp32.round.round_plan_top2`) | ``product`` (48-bit sum, leading one in bit
    47 or 46) | one-bit normalize, sticky compression to 27 bits, exponent and subnormal shift
    (:func:`~hdl.fp32.round.round_prepare`) | ``round``: nearest-even increment
    (:func:`~hdl.fp32.round.round_finish`) and special-value select.

    Parameters
    ----------
    config : FP32Config
        ``mul_stages`` sets the latency.

    Attributes
    ----------
    latency : int
        Cycles from accepting an operation to its result being valid (``config.mul_stages``).

    Members
    -------
    i : In(stream.Signature(FP32MulIn))
        Operand pairs.
    o : Out(stream.Signature(FP32))
        Products, in input order.
    """

    UNIT = "fp32_mul"
    IN = FP32MulIn

    def elaborate(self, platform):
        m = Module()
        p = self.cut_pipeline(m, "mul")

        # --- unpack: classify, normalise subnormals, exponent sum -----------------------------
        pay = self.i.payload
        a = unpack_fp32(m, pay.a.as_value(), name="mul_a")
        b = unpack_fp32(m, pay.b.as_value(), name="mul_b")
        # subnormal significands are normalised: the leading-zero counts (``lzc``; a boundary
        # that only deep pipelines cut), then the shifts and the counts' sum (``unpack``)
        a_lz = sig_leading_zeros(m, a, name="mul_a_sig")
        b_lz = sig_leading_zeros(m, b, name="mul_b_sig")
        exp_raw = Signal(signed(12), name="mul_exp_raw")
        nan = Signal(name="mul_nan")
        m.d.comb += [exp_raw.eq(a.exp_raw + b.exp_raw),
                     nan.eq(a.nan | b.nan | (a.inf & b.zero) | (a.zero & b.inf))]
        s = p.boundary(
            "lzc", a_raw=a.sig, b_raw=b.sig, a_lz=a_lz, b_lz=b_lz, exp_raw=exp_raw,
            sign=a.sign ^ b.sign, nan=nan, inf=a.inf | b.inf, zero=a.zero | b.zero)
        # the weight of the product's LSB, exp_raw - lz, beside the normalising shifts (its
        # two small adders are shorter than the shifters): the round plan of the next stage
        # starts from a register (that stage's shift plan was 12.98 ns routed in the
        # optimizer's multipliers of the S = 4 FPGA core at 4d67e27)
        lz = Signal(range(2 * 24 + 1), name="mul_lz")
        exp = Signal(signed(12), name="mul_exp")      # weight of the product's LSB
        m.d.comb += [lz.eq(s.a_lz + s.b_lz), exp.eq(s.exp_raw - lz)]
        a_sig, b_sig = shift_left(s.a_raw, s.a_lz), shift_left(s.b_raw, s.b_lz)
        # With both the unpack and the partial boundary registers, the partial products are
        # RegisteredMul blocks holding both (on an ECP5 inside the DSP block: no routing to
        # and from the multiplier in the cycle it computes); the same registers, loaded with
        # the pipeline's enable, and the same latency.
        in_dsp = p.is_cut("unpack") and p.is_cut("partial")
        s = p.boundary("unpack", exp=exp, sign=s.sign, nan=s.nan, inf=s.inf, zero=s.zero,
                       **({} if in_dsp else {"a_sig": a_sig, "b_sig": b_sig}))
        exp = s.exp
        if not in_dsp:
            a_sig, b_sig = s.a_sig, s.b_sig

        # --- partial products -------------------------------------------------------------------
        parts = {}
        for an, asl in (("l", a_sig[:12]), ("h", a_sig[12:])):
            for bn, bsl in (("l", b_sig[:12]), ("h", b_sig[12:])):
                pp = Signal(24, name=f"mul_pp_{an}{bn}")
                if in_dsp:
                    m.d.comb += pp.eq(registered_product(m, asl, bsl, ce_in=p.en,
                                                         ce_out=p.en, name=f"pp_{an}{bn}"))
                else:
                    m.d.comb += pp.eq(asl * bsl)
                parts[f"pp_{an}{bn}"] = pp
        # Exponent part of the rounding, for both positions of the product's leading one (bit
        # 47: LSB weight exp; bit 46: the product is shifted left by one, exp - 1), computed
        # here in parallel with the multipliers. `_JAM_DROP` low bits are jammed into one.
        plans = round_plan_top2(m, exp=exp + _JAM_DROP, width=_JAM_KEEP, name="mul_rnd")
        plan1, plan0 = plans.top, plans.low
        s = p.boundary("partial", registered=parts if in_dsp else None,
                       **({} if in_dsp else parts),
                       sign=s.sign, nan=s.nan, inf=s.inf, zero=s.zero,
                       shift1=plan1.shift, base1=plan1.base, ovf1=plan1.ovf,
                       shift0=plan0.shift, base0=plan0.base, ovf0=plan0.ovf)

        # --- product: sum of the partial products ------------------------------------------------
        prod = Signal(48, name="mul_product")
        mid = Signal(25, name="mul_mid")
        m.d.comb += [
            mid.eq(s.pp_lh + s.pp_hl),
            prod.eq(s.pp_ll + (mid << 12) + (s.pp_hh << 24)),
        ]
        s = p.boundary("product", prod=prod, sign=s.sign, nan=s.nan, inf=s.inf, zero=s.zero,
                       shift1=s.shift1, base1=s.base1, ovf1=s.ovf1,
                       shift0=s.shift0, base0=s.base0, ovf0=s.ovf0)

        # --- one-bit normalize, sticky compression, round (two halves), specials --------------
        top = s.prod[47]
        norm = Signal(48, name="mul_norm")
        m.d.comb += norm.eq(Mux(top, s.prod, s.prod << 1))
        jammed, dropped = jam_sticky(m, norm, _JAM_KEEP, name="mul")
        assert dropped == _JAM_DROP
        plan = round_plan_select(
            top, SimpleNamespace(shift=s.shift1, base=s.base1, ovf=s.ovf1),
            SimpleNamespace(shift=s.shift0, base=s.base0, ovf=s.ovf0))
        r = round_prepare(m, norm=jammed, plan=plan, name="mul_rnd")
        s = p.boundary("round", frame=r.frame, base=r.base, ovf=r.ovf, sign=s.sign, nan=s.nan,
                       inf=s.inf, zero=s.zero)
        rounded = round_finish(m, sign=s.sign, frame=s.frame, base=s.base, ovf=s.ovf,
                               name="mul_rnd")
        p.output(special_or_rounded(m, nan=s.nan, inf=s.inf, inf_sign=s.sign, zero=s.zero,
                                    zero_sign=s.sign, rounded=rounded, name="mul"))
        return m


def _params(preset: str) -> dict:
    cfg = FP32Config.preset(preset)
    return {**cfg.to_dict(), "latency": cfg.latency("fp32_mul"), "in_width": 64,
            "out_width": 32}


TESSERA_BLOCKS = [
    Block("fp32_mul",
          build=lambda preset: FP32Mul(config=FP32Config.preset(preset)),
          params=_params),
]
