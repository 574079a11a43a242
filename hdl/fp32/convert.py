"""Pipelined conversions between signed int32 and IEEE 754 binary32."""
from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data

from ..formats import FP32
from ..registry import Block
from .config import FP32Config
from .round import jam_sticky, normalize_left, round_finish, round_prepare
from .unit import FP32CutUnit
from .unpack import unpack_fp32

__all__ = ["IntToFP32", "FP32ToIntIn", "FP32ToIntOut", "FP32ToInt"]

_INT_MAX = (1 << 31) - 1
_INT_MIN = -(1 << 31)


def _check_config(config):
    if config is None:
        return FP32Config()
    if not isinstance(config, FP32Config):
        raise TypeError(f"config must be an FP32Config, not {type(config).__name__}")
    return config


class IntToFP32(FP32CutUnit):
    """Pipelined signed int32 to FP32 conversion, one per cycle.

    ``float32(i)`` with round-to-nearest-even (exact up to ``2**24``), bit-exact with numpy
    ``int32.astype(float32)``; ``0`` gives ``+0``.

    Datapath steps: ``abs`` (sign and 32-bit magnitude, ``-2**31`` included) | ``normalize``
    (leading-zero count, left shift) | sticky compression, exponent
    (:func:`~hdl.fp32.round.round_prepare`) | ``round``: nearest-even increment
    (:func:`~hdl.fp32.round.round_finish`).

    Parameters
    ----------
    config : FP32Config
        ``itof_stages`` sets the latency.

    Attributes
    ----------
    latency : int
        Cycles from accepting an integer to its result being valid (``config.itof_stages``).

    Members
    -------
    i : In(stream.Signature(signed(32)))
        Two's complement integers.
    o : Out(stream.Signature(FP32))
        Their FP32 values, in input order.
    """

    UNIT = "int_to_fp32"
    IN = signed(32)

    def elaborate(self, platform):
        m = Module()
        p = self.cut_pipeline(m, "itof")

        value = self.i.payload
        mag = Signal(32, name="itof_mag")
        m.d.comb += mag.eq(Mux(value < 0, -value, value))
        s = p.boundary("abs", sign=value[31], mag=mag)

        norm, norm_exp, zero, _ = normalize_left(m, s.mag, Const(0, signed(2)), name="itof",
                                              exp_shape=signed(8))
        s = p.boundary("normalize", sign=s.sign, norm=norm, exp=norm_exp, zero=zero)

        jammed, dropped = jam_sticky(m, s.norm, 27, name="itof")
        rnd_exp = Signal(signed(8), name="itof_rnd_exp")
        m.d.comb += rnd_exp.eq(s.exp + dropped)
        r = round_prepare(m, norm=jammed, exp=rnd_exp, name="itof_rnd")
        s = p.boundary("round", frame=r.frame, base=r.base, ovf=r.ovf, sign=s.sign, zero=s.zero)
        rounded = round_finish(m, sign=s.sign, frame=s.frame, base=s.base, ovf=s.ovf,
                               name="itof_rnd")
        p.output(Mux(s.zero, 0, rounded))
        return m


class FP32ToIntIn(data.Struct):
    """One conversion of :class:`FP32ToInt`; ``rne`` selects the rounding."""

    a: FP32
    rne: 1


class FP32ToIntOut(data.Struct):
    """Result of :class:`FP32ToInt`."""

    value: signed(32)
    invalid: 1


class FP32ToInt(FP32CutUnit):
    """Pipelined FP32 to signed int32 conversion, one per cycle.

    Rounding per operation: ``rne = 0`` toward zero (a C cast, ``np.trunc``; equal to numpy
    ``astype(int32)`` in range), ``rne = 1`` to nearest, ties to even (``np.rint``).
    Saturating: a NaN gives ``0``; a rounded value above ``2**31 - 1`` (``+Inf`` included)
    gives ``2**31 - 1``; below ``-2**31`` (``-Inf`` included) gives ``-2**31``. ``invalid`` is
    set in exactly these cases (``-2**31`` itself is valid).

    Datapath steps: ``unpack`` (classify, shift amount) | ``shift`` (significand to an integer
    with guard and sticky bits) | rounding increment, saturation, negation.

    Parameters
    ----------
    config : FP32Config
        ``ftoi_stages`` sets the latency.

    Attributes
    ----------
    latency : int
        Cycles from accepting a value to its result being valid (``config.ftoi_stages``).

    Members
    -------
    i : In(stream.Signature(FP32ToIntIn))
        FP32 values and their rounding mode.
    o : Out(stream.Signature(FP32ToIntOut))
        Integers and invalid flags, in input order.
    """

    UNIT = "fp32_to_int"
    IN = FP32ToIntIn
    OUT = FP32ToIntOut

    def elaborate(self, platform):
        m = Module()
        p = self.cut_pipeline(m, "ftoi")

        # --- unpack: value = sig * 2**exp; |value| >= 2**32 cannot fit, |value| < 2**-1 -> 0/1.
        a = unpack_fp32(m, self.i.payload.a.as_value(), name="ftoi_a")
        left = Signal(name="ftoi_left")                  # 0 <= exp <= 8: shift left
        lsh = Signal(4, name="ftoi_lsh")
        rsh = Signal(range(26), name="ftoi_rsh")         # exp < 0: shift right (clamped)
        big = Signal(name="ftoi_big")                    # |value| >= 2**32 or Inf
        m.d.comb += [
            left.eq(a.exp >= 0),
            lsh.eq(a.exp[:4]),
            rsh.eq(Mux(a.exp < -25, 25, -a.exp)),
            big.eq(a.inf | (a.finite & (a.exp > 8))),
        ]
        s = p.boundary("unpack", sign=a.sign, sig=a.sig, left=left, lsh=lsh, rsh=rsh, big=big,
                       nan=a.nan, rne=self.i.payload.rne)

        # --- shift: integer part q, guard bit, sticky -----------------------------------------
        wide = Signal(49, name="ftoi_wide")
        m.d.comb += wide.eq(Cat(Const(0, 25), s.sig) >> s.rsh)
        q = Signal(32, name="ftoi_q")
        guard = Signal(name="ftoi_guard")
        sticky = Signal(name="ftoi_sticky")
        with m.If(s.left):
            m.d.comb += q.eq(s.sig << s.lsh)
        with m.Else():
            m.d.comb += [q.eq(wide[25:]), guard.eq(wide[24]), sticky.eq(wide[:24].any())]
        s = p.boundary("shift", sign=s.sign, q=q, guard=guard, sticky=sticky, big=s.big,
                       nan=s.nan, rne=s.rne)

        # --- round, saturate, negate -----------------------------------------------------------
        mag = Signal(33, name="ftoi_mag")
        m.d.comb += mag.eq(s.q + (s.rne & s.guard & (s.sticky | s.q[0])))
        limit = Mux(s.sign, 1 << 31, _INT_MAX)
        ovf = Signal(name="ftoi_ovf")
        m.d.comb += ovf.eq(s.big | (mag > limit))
        out = Signal(FP32ToIntOut, name="ftoi_out")
        with m.If(s.nan):
            m.d.comb += [out.value.eq(0), out.invalid.eq(1)]
        with m.Elif(ovf):
            m.d.comb += [out.value.eq(Mux(s.sign, _INT_MIN, _INT_MAX)), out.invalid.eq(1)]
        with m.Else():
            m.d.comb += out.value.eq(Mux(s.sign, -mag, mag))
        p.output(out)
        return m


def _itof_params(preset: str) -> dict:
    cfg = FP32Config.preset(preset)
    return {**cfg.to_dict(), "latency": cfg.latency("int_to_fp32"), "in_width": 32,
            "out_width": 32}


def _ftoi_params(preset: str) -> dict:
    cfg = FP32Config.preset(preset)
    return {**cfg.to_dict(), "latency": cfg.latency("fp32_to_int"), "in_width": 33,
            "out_width": 33}


TESSERA_BLOCKS = [
    Block("int_to_fp32",
          build=lambda preset: IntToFP32(config=FP32Config.preset(preset)),
          params=_itof_params),
    Block("fp32_to_int",
          build=lambda preset: FP32ToInt(config=FP32Config.preset(preset)),
          params=_ftoi_params),
]
