"""Pipelined IEEE 754 binary32 multiplier (round-to-nearest-even, exact subnormals)."""
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..formats import FP32
from ..registry import Block
from .config import FP32Config
from .unpack import QNAN, CutPipeline, FlatStreams, jam_sticky, rounding_stage, unpack_fp32

__all__ = ["FP32MulIn", "FP32Mul"]


class FP32MulIn(data.Struct):
    """One operation of :class:`FP32Mul`: ``a * b``."""

    a: FP32
    b: FP32


class FP32Mul(wiring.Component):
    """Pipelined FP32 multiplier, one operation per cycle.

    Computes ``a * b`` in IEEE 754 binary32 with round-to-nearest-even, bit-exact with numpy
    ``float32``: subnormal inputs and outputs are exact, overflow gives ±Inf, underflow gives a
    subnormal or ±0 with the product's sign. NaN inputs and ``0 * Inf`` give the quiet NaN
    ``0x7FC00000``; ``Inf * finite non-zero`` gives ±Inf.

    Datapath steps (each boundary a register or a wire, :class:`~hdl.fp32.config.FP32Config`):
    ``unpack`` (classify; normalise subnormal significands so both have bit 23 set; exponent
    sum) | ``partial`` (four 12 x 12-bit partial products: one ECP5 DSP each) | ``product``
    (48-bit sum, leading one in bit 47 or 46) | one-bit normalize, sticky compression to 27 bits,
    round (:func:`~hdl.fp32.round.round_to_fp32`) and special-value select.

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

    def __init__(self, *, config: "FP32Config | None" = None):
        if config is None:
            config = FP32Config()
        if not isinstance(config, FP32Config):
            raise TypeError(f"config must be an FP32Config, not {type(config).__name__}")
        self.config = config
        self.latency = config.latency("fp32_mul")
        super().__init__({
            "i": In(stream.Signature(FP32MulIn)),
            "o": Out(stream.Signature(FP32)),
        })

    def elaborate(self, platform):
        m = Module()
        p = CutPipeline(m, i=self.i, o=self.o, cuts=self.config.cuts("fp32_mul"), name="mul")
        assert p.latency == self.latency

        # --- unpack: classify, normalise subnormals, exponent sum -----------------------------
        pay = self.i.payload
        a = unpack_fp32(m, pay.a.as_value(), name="mul_a", normalize=True)
        b = unpack_fp32(m, pay.b.as_value(), name="mul_b", normalize=True)
        exp = Signal(signed(12), name="mul_exp")      # weight of the product's LSB
        m.d.comb += exp.eq(a.exp + b.exp)
        nan = Signal(name="mul_nan")
        m.d.comb += nan.eq(a.nan | b.nan | (a.inf & b.zero) | (a.zero & b.inf))
        s = p.boundary(
            "unpack", a_sig=a.sig, b_sig=b.sig, exp=exp, sign=a.sign ^ b.sign, nan=nan,
            inf=a.inf | b.inf, zero=a.zero | b.zero)

        # --- partial products -------------------------------------------------------------------
        parts = {}
        for an, asl in (("l", s.a_sig[:12]), ("h", s.a_sig[12:])):
            for bn, bsl in (("l", s.b_sig[:12]), ("h", s.b_sig[12:])):
                pp = Signal(24, name=f"mul_pp_{an}{bn}")
                m.d.comb += pp.eq(asl * bsl)
                parts[f"pp_{an}{bn}"] = pp
        s = p.boundary("partial", **parts, exp=s.exp, sign=s.sign, nan=s.nan, inf=s.inf,
                       zero=s.zero)

        # --- product: sum of the partial products ------------------------------------------------
        prod = Signal(48, name="mul_product")
        mid = Signal(25, name="mul_mid")
        m.d.comb += [
            mid.eq(s.pp_lh + s.pp_hl),
            prod.eq(s.pp_ll + (mid << 12) + (s.pp_hh << 24)),
        ]
        s = p.boundary("product", prod=prod, exp=s.exp, sign=s.sign, nan=s.nan, inf=s.inf,
                       zero=s.zero)

        # --- one-bit normalize, sticky compression, round, specials -----------------------------
        top = s.prod[47]
        norm = Signal(48, name="mul_norm")
        norm_exp = Signal(signed(12), name="mul_norm_exp")
        m.d.comb += [
            norm.eq(Mux(top, s.prod, s.prod << 1)),
            norm_exp.eq(s.exp - ~top),
        ]
        jammed, dropped = jam_sticky(m, norm, 27, name="mul")
        rnd_exp = Signal(signed(12), name="mul_rnd_exp")
        m.d.comb += rnd_exp.eq(norm_exp + dropped)
        rounded = rounding_stage(m, sign=s.sign, exp=rnd_exp, norm=jammed, name="mul_rnd")
        result = Signal(32, name="mul_result")
        with m.If(s.nan):
            m.d.comb += result.eq(QNAN)
        with m.Elif(s.inf):
            m.d.comb += result.eq(Cat(Const(0, 23), Const(0xFF, 8), s.sign))
        with m.Elif(s.zero):
            m.d.comb += result.eq(Cat(Const(0, 31), s.sign))
        with m.Else():
            m.d.comb += result.eq(rounded)
        p.output(result)
        return m


def _params(preset: str) -> dict:
    cfg = FP32Config.preset(preset)
    return {**cfg.to_dict(), "latency": cfg.latency("fp32_mul"), "in_width": 64,
            "out_width": 32}


TESSERA_BLOCKS = [
    Block("fp32_mul",
          build=lambda preset: FlatStreams(FP32Mul(config=FP32Config.preset(preset))),
          params=_params),
]
