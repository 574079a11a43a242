"""Array-edge converter: exact integer partial sum with a power-of-two exponent -> FP32.

A systolic-array partial-sum chain is an exact integer ``value`` whose LSB weighs ``2**exp``
(DESIGN-NOTES §3). This block turns ``value * 2**exp`` into IEEE 754 binary32 with
round-to-nearest-even, exact subnormal results, overflow to ±Inf and ``value == 0 -> +0.0``.
Golden model: :func:`sim.edge.edge_to_fp32`, bit-exact. See ``docs/fmac.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out
from amaranth.utils import bits_for

from .config import PresetMixin, check_int
from .registry import Block

__all__ = ["EdgeConfig", "EdgeConverter", "edge_input_layout"]


@dataclass(frozen=True)
class EdgeConfig(PresetMixin):
    """Array-edge converter parameters.

    Parameters
    ----------
    int_bits : int
        Width of the signed integer ``value`` (two's complement), 2..64. The default matches
        :class:`hdl.config.FMACConfig`'s ``acc_bits`` (32; ``tiny``: 24).
    exp_bits : int
        Width of the signed exponent ``exp`` (weight of ``value``'s LSB), 2..16. 10 bits hold the
        sum of two BFP exponents minus the mantissa offsets (about -314..254).
    """

    int_bits: int = 32
    exp_bits: int = 10

    PRESETS: ClassVar[dict[str, dict]] = {"tiny": {"int_bits": 24}, "default": {}}

    def __post_init__(self):
        check_int("EdgeConfig", "int_bits", self.int_bits, lo=2, hi=64)
        check_int("EdgeConfig", "exp_bits", self.exp_bits, lo=2, hi=16)


def edge_input_layout(config: EdgeConfig) -> data.StructLayout:
    """Payload of :class:`EdgeConverter`'s ``i``: ``value`` (low bits) | ``exp``."""
    return data.StructLayout({"value": signed(config.int_bits), "exp": signed(config.exp_bits)})


#: significand bits handed to the rounding stage: 24 result bits + guard; the rest is sticky
_SIG = 25


def _leading_zeros_tree(m, value, *, name: str):
    """Leading zeros of ``value`` as a log-depth tree (value 0: don't care, returns a count
    with every bit of the padded width). The width is padded at the LSB end to a power of two."""
    width = len(value)
    size = 1 << max(0, (width - 1).bit_length())
    padded = Cat(Const(0, size - width), value) if size > width else value

    def rec(v, path):
        n = len(v)
        if n == 1:
            return ~v[0], v[0]                    # (count of leading zeros, any one)
        hi, lo = v[n // 2:], v[:n // 2]
        c_hi, a_hi = rec(hi, path + "h")
        c_lo, a_lo = rec(lo, path + "l")
        count = Signal(range(n + 1), name=f"{name}_lz_{path or 'top'}")
        m.d.comb += count.eq(Mux(a_hi, c_hi, (n // 2) + c_lo))
        return count, a_hi | a_lo

    count, _ = rec(padded, "")
    return count


class EdgeConverter(wiring.Component):
    """Pipelined ``int * 2**exp -> FP32`` converter (stream in, stream out).

    Number format: input ``value`` is a two's complement integer of ``int_bits`` bits, ``exp``
    a two's complement exponent of ``exp_bits`` bits; the output is the IEEE 754 binary32 bit
    pattern of ``value * 2**exp`` rounded to nearest, ties to even. Subnormal results are exact
    (correctly rounded, no flush to zero); results of magnitude ``>= 2**128`` after rounding are
    ±Inf; a zero value gives ``+0.0``; a non-zero value that rounds to zero gives a signed zero.

    Pipeline (``latency = 6`` register stages; one conversion per cycle; a bubble-collapsing
    valid/ready chain, so each stage holds its data while the next one is full):

    1. ``|value|`` and sign;
    2. leading-zero count of ``|value|`` (log-depth tree);
    3. normalise: the leading one to bit 24 of a 25-bit significand (24 result bits + guard),
       the lower bits OR-ed into a sticky bit, the exponent of the significand's LSB;
    4. classify: normal (keep 24 bits), subnormal (LSB at ``2**-149``: alignment shift
       ``-149 - exp``, clamped at 26), certain overflow (leading one above ``2**127``), zero;
    5. align: the 24-bit truncated significand, the guard bit and the OR of everything below;
    6. round to nearest even (carry into the next binade, subnormal to smallest normal),
       pack, overflow to ±Inf, into the output register.

    Stages 4-6 are the rounding of :func:`hdl.fp32.round.round_to_fp32` specialised to a
    normalised significand and cut into three short stages (the combinational
    ``round_to_fp32`` after stage 3 placed at about 27 MHz on ECP5); both are bit-exact with
    :func:`sim.fp32_round.round_to_fp32`, which the golden model :func:`sim.edge.edge_to_fp32`
    calls.

    A transfer on ``i`` in cycle ``t`` appears on ``o`` (``o.valid``) in cycle ``t + latency``
    when ``o`` is not backpressured. ``o.valid`` is a register; ``i.ready`` is 1 when some
    stage can move (it may depend on ``o.ready`` combinationally, never on ``i.valid``).

    Parameters
    ----------
    config : EdgeConfig

    Payloads are plain bit vectors (so every bit is a Verilog port): ``i`` holds the layout
    :func:`edge_input_layout`, ``o`` the :class:`hdl.formats.FP32` bits.

    Members
    -------
    i : In(stream.Signature(unsigned(int_bits + exp_bits)))
        ``value`` (signed ``int_bits``, low bits) and ``exp`` (signed ``exp_bits``, high bits).
    o : Out(stream.Signature(unsigned(32)))
        FP32 result bits (``hdl.formats.FP32``; bit-compatible with ``numpy.float32``).
    """

    LATENCY = 6

    def __init__(self, *, config: EdgeConfig | None = None):
        config = EdgeConfig() if config is None else config
        if not isinstance(config, EdgeConfig):
            self._MustUse__silence = True        # no "never used" warning for a rejected object
            raise TypeError(f"EdgeConverter.config must be an EdgeConfig, not {config!r}")
        self.config = config
        self.latency = self.LATENCY
        super().__init__({
            "i": In(stream.Signature(unsigned(edge_input_layout(config).size))),
            "o": Out(stream.Signature(unsigned(32))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        w = cfg.int_bits
        ew = max(cfg.exp_bits, bits_for(w + _SIG)) + 2     # exponent after normalisation

        # ---- valid/ready chain -----------------------------------------------------------------
        n = self.LATENCY
        valid = [Signal(name=f"s{k}_valid") for k in range(1, n)] + [self.o.valid]
        move = [Signal(name=f"s{k}_move") for k in range(1, n + 1)]   # stage k loads this cycle
        m.d.comb += move[n - 1].eq(~valid[n - 1] | self.o.ready)
        for k in range(n - 2, -1, -1):
            m.d.comb += move[k].eq(~valid[k] | move[k + 1])
        m.d.comb += self.i.ready.eq(move[0])
        incoming = [self.i.valid] + valid[:-1]
        for k in range(n):
            with m.If(move[k]):
                m.d.sync += valid[k].eq(incoming[k])

        # ---- stage 1: sign and magnitude ------------------------------------------------------
        s1_sign = Signal(name="s1_sign")
        s1_mag = Signal(w, name="s1_mag")
        s1_exp = Signal(signed(cfg.exp_bits), name="s1_exp")
        payload = data.View(edge_input_layout(cfg), self.i.payload)
        value = payload.value
        with m.If(move[0]):
            m.d.sync += [
                s1_sign.eq(value < 0),
                s1_mag.eq(Mux(value < 0, -value, value)),
                s1_exp.eq(payload.exp),
            ]

        # ---- stage 2: leading zeros ----------------------------------------------------------
        lz = _leading_zeros_tree(m, s1_mag, name="s2")
        s2_sign = Signal(name="s2_sign")
        s2_mag = Signal(w, name="s2_mag")
        s2_exp = Signal(signed(cfg.exp_bits), name="s2_exp")
        s2_lz = Signal(range(w + 1), name="s2_lz_r")
        with m.If(move[1]):
            m.d.sync += [s2_sign.eq(s1_sign), s2_mag.eq(s1_mag), s2_exp.eq(s1_exp),
                         s2_lz.eq(lz)]

        # ---- stage 3: normalise to a 25-bit significand + sticky ------------------------------
        norm = Signal(w, name="s3_norm")
        m.d.comb += norm.eq(s2_mag << s2_lz)
        if w >= _SIG:
            top = norm[w - _SIG:]
            low_any = norm[:w - _SIG].any() if w > _SIG else Const(0, 1)
        else:
            top = Cat(Const(0, _SIG - w), norm)
            low_any = Const(0, 1)
        s3_sign = Signal(name="s3_sign")
        s3_sig = Signal(_SIG, name="s3_sig")
        s3_sticky = Signal(name="s3_sticky")
        s3_exp = Signal(signed(ew), name="s3_exp")
        with m.If(move[2]):
            m.d.sync += [
                s3_sign.eq(s2_sign),
                s3_sig.eq(top),
                s3_sticky.eq(low_any),
                # the leading one (weight exp + w-1-lz) sits at bit _SIG-1 of the significand
                s3_exp.eq(s2_exp + (w - _SIG) - s2_lz),
            ]

        # ---- stage 4: classify (normal / subnormal / overflow) and the alignment shift -------
        # lead = s3_exp + 24 is the weight of the leading one. A normal result keeps 24 bits
        # (shift 1: the guard is sig[0]); a subnormal one has its LSB at 2**-149, so the shift
        # is -149 - s3_exp, clamped at 26 (everything below the guard then only feeds sticky).
        s4_sign = Signal(name="s4_sign")
        s4_sig = Signal(_SIG, name="s4_sig")
        s4_sticky = Signal(name="s4_sticky")
        s4_sm1 = Signal(range(_SIG + 1), name="s4_shift_m1")   # alignment shift - 1
        s4_biased = Signal(9, name="s4_biased")            # lead + 127 for normal results
        s4_subnormal = Signal(name="s4_subnormal")
        s4_huge = Signal(name="s4_huge")                   # lead > 127: Inf whatever rounding
        sub_sm1 = Signal(signed(ew + 1), name="s4_sub_shift_m1")
        m.d.comb += sub_sm1.eq(-150 - s3_exp)
        lead = s3_exp + (_SIG - 1)
        with m.If(move[3]):
            m.d.sync += [
                s4_sign.eq(s3_sign), s4_sig.eq(s3_sig), s4_sticky.eq(s3_sticky),
                # a zero significand (value 0) takes the subnormal path: q = 0 -> +-0
                s4_subnormal.eq((lead < -126) | ~s3_sig[_SIG - 1]),
                s4_huge.eq((lead > 127) & s3_sig[_SIG - 1]),
                s4_biased.eq(lead + 127),
                s4_sm1.eq(Mux(lead >= -126, 0, Mux(sub_sm1 > _SIG, _SIG, sub_sm1))),
            ]

        # ---- stage 5: align -> 24-bit q, guard, rest ------------------------------------------
        # shift = sm1 + 1: q = sig >> shift, guard = sig bit sm1, rest = bits below sm1 | sticky
        x = Signal(_SIG + 1, name="s5_x")
        m.d.comb += x.eq(s4_sig)
        sm1 = s4_sm1
        below = Signal(_SIG + 1, name="s5_below")          # bits under the guard
        m.d.comb += below.eq(Cat(*[sm1 > k for k in range(_SIG + 1)]))   # no carry chain
        s5_q = Signal(24, name="s5_q")
        s5_guard = Signal(name="s5_guard")
        s5_rest = Signal(name="s5_rest")
        s5_sign = Signal(name="s5_sign")
        s5_biased = Signal(9, name="s5_biased")
        s5_subnormal = Signal(name="s5_subnormal")
        s5_huge = Signal(name="s5_huge")
        with m.If(move[4]):
            m.d.sync += [
                s5_q.eq(x[1:] >> sm1),
                s5_guard.eq((x >> sm1)[0]),
                s5_rest.eq(s4_sticky | (x & below).any()),
                s5_sign.eq(s4_sign), s5_biased.eq(s4_biased),
                s5_subnormal.eq(s4_subnormal), s5_huge.eq(s4_huge),
            ]

        # ---- stage 6: round to nearest even, pack, overflow to Inf ----------------------------
        rounded = Signal(25, name="s6_rounded")
        m.d.comb += rounded.eq(s5_q + (s5_guard & (s5_rest | s5_q[0])))
        frac = Signal(23, name="s6_frac")
        biased = Signal(10, name="s6_biased")
        with m.If(s5_subnormal):
            # a subnormal that rounds up to 2**-126 becomes the smallest normal (biased 1)
            m.d.comb += [frac.eq(rounded[:23]), biased.eq(rounded[23])]
        with m.Elif(rounded[24]):                          # carried into the next binade
            m.d.comb += [frac.eq(rounded[1:24]), biased.eq(s5_biased + 1)]
        with m.Else():
            m.d.comb += [frac.eq(rounded[:23]), biased.eq(s5_biased)]
        bits = Signal(32, name="s6_bits")
        with m.If(s5_huge | (~s5_subnormal & (biased >= 255))):
            m.d.comb += bits.eq(Cat(Const(0, 23), Const(0xFF, 8), s5_sign))
        with m.Else():
            m.d.comb += bits.eq(Cat(frac, biased[:8], s5_sign))
        with m.If(move[5]):
            m.d.sync += self.o.payload.eq(bits)
        return m


def _edge_params(preset: str) -> dict:
    cfg = EdgeConfig.preset(preset)
    lay = edge_input_layout(cfg)
    return {
        **cfg.to_dict(),
        "latency": EdgeConverter.LATENCY,
        "i_payload_bits": lay.size,
        "i_layout": {name: [f.offset, f.width] for name, f in lay},
        "o_payload_bits": 32,
        "throughput": 1,
    }


TESSERA_BLOCKS = [
    Block(name="edge_converter",
          build=lambda preset: EdgeConverter(config=EdgeConfig.preset(preset)),
          params=_edge_params),
]
