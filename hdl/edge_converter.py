"""Array-edge converter: exact integer partial sum with a power-of-two exponent -> FP32.

A systolic-array partial-sum chain is an exact integer ``value`` whose LSB weighs ``2**exp``
(docs/array.md). This block turns ``value * 2**exp`` into IEEE 754 binary32 with
round-to-nearest-even, exact subnormal results, overflow to ±Inf and ``value == 0 -> +0.0``.
Golden model: :func:`sim.model.edge.edge_to_fp32`, bit-exact. See ``docs/fmac.md``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .config import PresetMixin, check_int
from .fp32.round import (MIN_NORM_WIDTH, count_leading_zeros, jam_sticky, round_finish,
                         round_plan_lz, round_plan_pre, round_prepare, shift_left)
from .registry import Block

__all__ = ["EdgeConfig", "EdgeConverter", "edge_input_layout", "edge_value_shape",
           "to_magnitude"]


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


def edge_value_shape(int_bits: int, magnitude: bool = False):
    """Shape of an exact integer ``value`` of ``int_bits`` bits as the converter takes it: two's
    complement (``signed(int_bits)``), or with ``magnitude`` its magnitude and sign apart,
    ``mag`` (unsigned ``int_bits``: ``|value| <= 2**(int_bits - 1)``) | ``sign`` (1: negative;
    a zero value has sign 0)."""
    if not magnitude:
        return signed(int_bits)
    return data.StructLayout({"mag": unsigned(int_bits), "sign": 1})


def to_magnitude(value):
    """``value`` (a signed Amaranth value) as :func:`edge_value_shape`'s magnitude form:
    ``Cat(|value|, value < 0)``, ``len(value) + 1`` bits."""
    value = Value.cast(value)
    neg = value < 0
    return Cat(Mux(neg, -value, value)[:len(value)], neg)


def edge_input_layout(config: EdgeConfig, magnitude: bool = False) -> data.StructLayout:
    """Payload of :class:`EdgeConverter`'s ``i``: ``value`` (low bits,
    :func:`edge_value_shape`: two's complement, or magnitude and sign with ``magnitude``) |
    ``exp``."""
    return data.StructLayout({"value": edge_value_shape(config.int_bits, magnitude),
                              "exp": signed(config.exp_bits)})


#: Width of the significand handed to the rounding frame: 24 result bits, guard, round, and a
#: jammed sticky LSB (wider normalised magnitudes are compressed to it).
_JAM_KEEP = 27


class EdgeConverter(wiring.Component):
    """Pipelined ``int * 2**exp -> FP32`` converter (stream in, stream out).

    Number format: input ``value`` is a two's complement integer of ``int_bits`` bits, ``exp``
    a two's complement exponent of ``exp_bits`` bits; the output is the IEEE 754 binary32 bit
    pattern of ``value * 2**exp`` rounded to nearest, ties to even. Subnormal results are exact
    (correctly rounded, no flush to zero); results of magnitude ``>= 2**128`` after rounding are
    ±Inf; a zero value gives ``+0.0``; a non-zero value that rounds to zero gives a signed zero.

    Pipeline (``latency = 6`` register stages; one conversion per cycle; a bubble-collapsing
    valid/ready chain, so each stage holds its data while the next one is full). Stages 2-6
    are the staged FP32 rounding of :mod:`hdl.fp32.round` (the same functions as every other
    FP32 unit):

    1. ``|value|`` and sign (the magnitude padded at the LSB end to at least 26 bits);
    2. leading-zero count (:func:`~hdl.fp32.round.count_leading_zeros`, log-depth tree) and,
       in parallel, the exponent terms of the rounding
       (:func:`~hdl.fp32.round.round_plan_pre`);
    3. normalise (left shift by the count) and, in parallel, the result exponent, subnormal
       shift and overflow flag (:func:`~hdl.fp32.round.round_plan_lz`);
    4. compress the normalised magnitude to 27 bits, the low bits OR-ed into a sticky LSB
       (:func:`~hdl.fp32.round.jam_sticky`);
    5. subnormal right shift onto the ``2**-149`` grid, 24-bit significand, guard and sticky
       bits (:func:`~hdl.fp32.round.round_prepare`);
    6. nearest-even increment and packing, ±Inf on overflow, ``+0`` for a zero value
       (:func:`~hdl.fp32.round.round_finish`), into the output register.

    Bit-exact with :func:`sim.model.fp32_round.round_to_fp32`, which the golden model
    :func:`sim.model.edge.edge_to_fp32` calls.

    A transfer on ``i`` in cycle ``t`` appears on ``o`` (``o.valid``) in cycle ``t + latency``
    when ``o`` is not backpressured. ``o.valid`` is a register; ``i.ready`` is 1 when some
    stage can move (it may depend on ``o.ready`` combinationally, never on ``i.valid``).

    Parameters
    ----------
    config : EdgeConfig
    magnitude : bool
        ``value`` arrives as its magnitude and sign (:func:`edge_value_shape`; the matmul
        engine's FPGA build, whose array stores its results so, :func:`to_magnitude`, before
        its output FIFO): stage 1 registers them as they are, with no negation between the
        input and its register (the S = 8 FPGA engine's edge magnitudes, over 10 ns at every
        placement seed in the thirtieth session, ran from the array's output FIFO through the
        accumulator's part select and this negation). The same results and latency.

    Payloads are plain bit vectors (so every bit is a Verilog port): ``i`` holds the layout
    :func:`edge_input_layout`, ``o`` the :class:`hdl.formats.FP32` bits.

    Members
    -------
    i : In(stream.Signature(unsigned(int_bits + exp_bits)))
        ``value`` (signed ``int_bits``, low bits; with ``magnitude`` ``int_bits + 1`` bits,
        the magnitude and the sign) and ``exp`` (signed ``exp_bits``, high bits).
    o : Out(stream.Signature(unsigned(32)))
        FP32 result bits (``hdl.formats.FP32``; bit-compatible with ``numpy.float32``).
    """

    LATENCY = 6

    def __init__(self, *, config: EdgeConfig | None = None, magnitude: bool = False):
        config = EdgeConfig() if config is None else config
        if not isinstance(config, EdgeConfig):
            self._MustUse__silence = True        # no "never used" warning for a rejected object
            raise TypeError(f"EdgeConverter.config must be an EdgeConfig, not {config!r}")
        if not isinstance(magnitude, bool):
            self._MustUse__silence = True
            raise TypeError(f"EdgeConverter.magnitude must be a bool, not {magnitude!r}")
        self.config = config
        self.magnitude = magnitude
        self.latency = self.LATENCY
        super().__init__({
            "i": In(stream.Signature(unsigned(edge_input_layout(config, magnitude).size))),
            "o": Out(stream.Signature(unsigned(32))),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        w = cfg.int_bits
        pad = max(0, MIN_NORM_WIDTH - w)     # zeros below the LSB for narrow integers
        width = w + pad                      # normalised magnitude
        keep = min(width, _JAM_KEEP)         # significand width handed to round_prepare

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

        def reg(stage: int, name: str, value, shape=None):
            """Register of stage ``stage`` (1-based), loaded when that stage moves."""
            value = Value.cast(value)
            r = Signal(value.shape() if shape is None else shape, name=f"s{stage}_{name}")
            with m.If(move[stage - 1]):
                m.d.sync += r.eq(value)
            return r

        # ---- stage 1: sign and magnitude ------------------------------------------------------
        payload = data.View(edge_input_layout(cfg, self.magnitude), self.i.payload)
        value = payload.value
        if self.magnitude:
            neg, abs_value = value.sign, value.mag
        else:
            signed_mag = to_magnitude(value)
            neg, abs_value = signed_mag[w], signed_mag[:w]
        sign = reg(1, "sign", neg)
        mag = reg(1, "mag", Cat(Const(0, pad), abs_value), unsigned(width))
        exp = reg(1, "exp", payload.exp)

        # ---- stage 2: leading zeros; exponent terms of the rounding ----------------------------
        # mag's LSB weighs 2**(exp - pad); normalised and jammed to `keep` bits the LSB weighs
        # 2**(exp - pad - lz + width - keep).
        lz = count_leading_zeros(m, mag, name="s2")
        pre = round_plan_pre(m, exp=exp + (width - keep - pad), width=keep, name="s2_rnd")
        sign = reg(2, "sign", sign)
        mag = reg(2, "mag", mag)
        lz = reg(2, "lz_r", lz)
        pre = SimpleNamespace(base_pre=reg(2, "base_pre", pre.base_pre),
                              ovf_lim=reg(2, "ovf_lim", pre.ovf_lim))

        # ---- stage 3: normalise; result exponent, subnormal shift, overflow ------------------
        norm = Signal(width, name="s3_norm_comb")
        m.d.comb += norm.eq(shift_left(mag, lz, width))
        plan = round_plan_lz(m, pre=pre, lz=lz, width=keep, name="s3_rnd")
        sign = reg(3, "sign", sign)
        zero = reg(3, "zero", lz == width)
        norm = reg(3, "norm", norm)
        plan = SimpleNamespace(**{k: reg(3, f"plan_{k}", getattr(plan, k))
                                  for k in ("shift", "base", "ovf")})

        # ---- stage 4: compress to `keep` bits (sticky jammed into the LSB) ---------------------
        jammed, _ = jam_sticky(m, norm, keep, name="s4")
        sign = reg(4, "sign", sign)
        zero = reg(4, "zero", zero)
        jammed = reg(4, "sig", jammed)
        plan = SimpleNamespace(**{k: reg(4, f"plan_{k}", getattr(plan, k))
                                  for k in ("shift", "base", "ovf")})

        # ---- stage 5: subnormal shift, guard and sticky bits ----------------------------------
        r = round_prepare(m, norm=jammed, plan=plan, name="s5_rnd")
        sign = reg(5, "sign", sign)
        zero = reg(5, "zero", zero)
        frame = reg(5, "frame", r.frame)
        base = reg(5, "base", r.base)
        ovf = reg(5, "ovf", r.ovf)

        # ---- stage 6: round to nearest even, pack, overflow to Inf; +0 for value 0 ------------
        rounded = round_finish(m, sign=sign, frame=frame, base=base, ovf=ovf, name="s6_rnd")
        with m.If(move[5]):
            m.d.sync += self.o.payload.eq(Mux(zero, 0, rounded))
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
