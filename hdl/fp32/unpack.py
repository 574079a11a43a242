"""FP32 operand unpacking/classification and the stream-pipeline scaffold of the FP32 units.

* :func:`unpack_fp32` splits an IEEE 754 binary32 bit pattern into sign, significand and
  exponent (``value = (-1)**sign * sig * 2**exp``, subnormals exact) and classifies it (zero,
  subnormal, infinity, NaN), optionally normalising the significand of subnormals.
* :class:`CutPipeline` is the pipeline control shared by :mod:`hdl.fp32.add`,
  :mod:`~hdl.fp32.mul`, :mod:`~hdl.fp32.compare` and :mod:`~hdl.fp32.convert`: named step
  boundaries, each a register or a wire (see :class:`~hdl.fp32.config.FP32Config`), one global
  stall.

The rounding helpers that used to live here (``count_leading_zeros``, ``normalize_left``,
``jam_sticky``, ``round_plan``, ``round_plan_pre``, ``round_plan_lz``, ``round_prepare``,
``round_finish``) are in :mod:`hdl.fp32.round`, the one home of FP32 rounding; they are
re-exported from this module, unchanged, so existing imports keep working.

All functions add *combinational* logic to a module ``m`` and give every signal they create a
name derived from the ``name`` argument.
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Mux, Signal, Value, signed
from amaranth.lib import data

# Re-exported for compatibility: the rounding lives in hdl.fp32.round.
from .round import (count_leading_zeros, jam_sticky, normalize_left, round_finish,  # noqa: F401
                    round_plan, round_plan_lz, round_plan_pre, round_prepare, shift_left)

__all__ = ["QNAN", "SPECIAL_LOW", "special_top", "special_word", "special_or_rounded", "count_leading_zeros", "sig_leading_zeros", "unpack_fp32", "unpack_fp32_staged", "normalize_left", "jam_sticky",
           "round_plan", "round_plan_pre", "round_plan_lz", "round_prepare", "round_finish",
           "CutPipeline"]

#: The NaN every FP32 unit of this package produces (quiet, positive, zero payload).
QNAN = 0x7FC00000

#: Every special result a pipelined FP32 unit selects (:data:`QNAN`, +-Inf, +-0) has its low
#: ``SPECIAL_LOW`` bits 0, so a pipeline carries only the bits above them (sign, exponent,
#: quiet bit: :func:`special_top`) down its stages and widens them at its output
#: (:func:`special_word`): no register holds bits that are 0 for every input.
SPECIAL_LOW = 22


def special_top(value) -> Value:
    """``value[SPECIAL_LOW:]`` (10 bits) of a 32-bit special result, to carry down a
    pipeline. ``value`` must be a special result (low ``SPECIAL_LOW`` bits 0); a constant
    that is not raises ``ValueError``."""
    if isinstance(value, int) and value & ((1 << SPECIAL_LOW) - 1):
        raise ValueError(f"special_top: {value:#010x} has bits below bit {SPECIAL_LOW}")
    return Value.cast(value)[SPECIAL_LOW:32]


def special_word(top) -> Value:
    """The 32-bit special result whose bits :func:`special_top` kept."""
    return Cat(Const(0, SPECIAL_LOW), top)


def unpack_fp32(m, bits, *, name: str, normalize: bool = False) -> SimpleNamespace:
    """Split and classify the FP32 bit pattern ``bits`` (combinational).

    Parameters
    ----------
    m : Module
    bits : Value, 32 bits
    name : str
        Prefix of the created signals (``{name}_sig``, ...).
    normalize : bool
        Shift subnormal significands left so that bit 23 is set for every finite non-zero
        input (costs a 24-bit leading-zero count and shifter).

    Returns
    -------
    SimpleNamespace
        ``sign``; ``efield`` (the 8-bit biased exponent field); ``frac`` (23 bits);
        ``zero``, ``sub`` (subnormal, non-zero), ``inf``, ``nan``, ``finite`` (1-bit flags);
        ``mag`` (the 31 low bits: for non-NaN operands, ordering the magnitudes as unsigned
        integers orders the values' magnitudes); ``sig`` (24 bits, with the hidden bit) and
        ``exp`` (``signed(10)``, the weight of ``sig``'s LSB: ``max(efield, 1) - 150``, or
        lower by the normalising shift) so that a finite operand equals
        ``(-1)**sign * sig * 2**exp`` exactly; ``exp_raw`` (``signed(10)``, ``max(efield, 1) -
        150``) and ``lz`` (the normalising shift, 0 without ``normalize``) with ``exp =
        exp_raw - lz``, for units that subtract ``lz`` a stage later.
    """
    bits = Value.cast(bits)
    if len(bits) != 32:
        raise ValueError(f"unpack_fp32: bits must be 32 bits wide, not {len(bits)}")
    frac, efield, sign = bits[0:23], bits[23:31], bits[31]
    e_zero = Signal(name=f"{name}_efield_zero")
    e_ones = Signal(name=f"{name}_efield_ones")
    f_zero = Signal(name=f"{name}_frac_zero")
    m.d.comb += [e_zero.eq(efield == 0), e_ones.eq(efield == 0xFF), f_zero.eq(frac == 0)]
    sig = Signal(24, name=f"{name}_sig")
    exp = Signal(signed(10), name=f"{name}_exp")
    exp_raw = Signal(signed(10), name=f"{name}_exp_raw")
    m.d.comb += exp_raw.eq(Mux(e_zero, 1, efield) - 150)
    if normalize:
        raw = Signal(24, name=f"{name}_sig_raw")
        m.d.comb += raw.eq(Cat(frac, ~e_zero))
        lz = _sig_lz(m, frac, e_zero, name=f"{name}_sig")
        m.d.comb += [
            sig.eq(shift_left(raw, lz)),
            exp.eq(Mux(e_zero, 1, efield) - 150 - lz),
        ]
    else:
        lz = Const(0, 1)
        m.d.comb += [
            sig.eq(Cat(frac, ~e_zero)),
            exp.eq(exp_raw),
        ]
    return SimpleNamespace(
        sign=sign, efield=efield, frac=frac, mag=bits[0:31],
        zero=e_zero & f_zero, sub=e_zero & ~f_zero, inf=e_ones & f_zero, nan=e_ones & ~f_zero,
        finite=~e_ones, sig=sig, exp=exp, exp_raw=exp_raw, lz=lz, efield_zero=e_zero,
    )


def _sig_lz(m, frac, e_zero, *, name: str):
    """Leading zeros of the 24-bit significand ``Cat(frac, ~e_zero)``: 0 unless ``e_zero``,
    else the count of ``Cat(frac, 0)``. The hidden bit's exponent-field test runs beside the
    count's tree instead of at its top (one AND after the tree instead of the 8-bit zero test
    in front of it: the FP32 units' count registers were among the FPGA core's slowest
    estimated paths)."""
    lz_frac = count_leading_zeros(m, Cat(frac, Const(0, 1)), name=f"{name}_frac")
    lz = Signal(range(25), name=f"{name}_lz")
    m.d.comb += lz.eq(Mux(e_zero, lz_frac, 0))
    return lz


def sig_leading_zeros(m, u, *, name: str):
    """Leading zeros of ``u.sig`` (24 bits, the hidden bit included) for an operand ``u`` from
    :func:`unpack_fp32` without ``normalize``: the same count as
    ``count_leading_zeros(m, u.sig, ...)`` (0 for a normal operand, 24 for zero), with the
    exponent field's zero test beside the tree instead of in front of it. Returns
    ``Signal(range(25))`` named ``{name}_lz``."""
    return _sig_lz(m, u.frac, u.efield_zero, name=name)


def unpack_fp32_staged(m, bits, *, name: str, reg) -> SimpleNamespace:
    """:func:`unpack_fp32` with ``normalize=True`` across a register stage: the significand's
    leading-zero count from ``bits`` (combinational), then ``bits`` and the count through
    ``reg(value, name)`` (a pipeline's register), then the classification and the normalising
    shift from those registers. Returns the same namespace as :func:`unpack_fp32`, of the
    registered operand (the count is off the shift's path: the FP32 units' leading-zero
    count and shift in one stage were among the FPGA core's slowest paths)."""
    bits = Value.cast(bits)
    early = unpack_fp32(m, bits, name=f"{name}_in")
    lz = sig_leading_zeros(m, early, name=f"{name}_sig")
    bits_q = reg(bits, f"{name}_bits")
    lz_q = reg(lz, f"{name}_lz")
    a = unpack_fp32(m, bits_q, name=name)
    sig = Signal(24, name=f"{name}_sig_norm")
    exp = Signal(signed(10), name=f"{name}_exp_norm")
    m.d.comb += [sig.eq(shift_left(a.sig, lz_q)), exp.eq(a.exp_raw - lz_q)]
    return SimpleNamespace(**{**vars(a), "sig": sig, "exp": exp, "lz": lz_q})


def special_or_rounded(m, *, nan, inf, inf_sign, zero, zero_sign, rounded, name: str) -> Signal:
    """A unit's result word, by priority: the canonical quiet NaN, ``±Inf`` (``inf_sign``),
    ``±0`` (``zero_sign``), else ``rounded``. The signal is named ``{name}_result``."""
    result = Signal(32, name=f"{name}_result")
    with m.If(nan):
        m.d.comb += result.eq(QNAN)
    with m.Elif(inf):
        m.d.comb += result.eq(Cat(Const(0, 23), Const(0xFF, 8), inf_sign))
    with m.Elif(zero):
        m.d.comb += result.eq(Cat(Const(0, 31), zero_sign))
    with m.Else():
        m.d.comb += result.eq(rounded)
    return result


class CutPipeline:
    """Pipeline control of an FP32 unit: named step boundaries and one global stall.

    The unit's combinational steps are written in datapath order; after each step the unit
    calls :meth:`boundary` with the values the next steps need. A boundary configured as a cut
    registers them (and a per-stage ``valid`` bit); otherwise the values pass through as wires.
    :meth:`output` always registers the result into the output stream.

    Flow control: every register (data and valid) loads when ``en = ~o.valid | o.ready``, and
    ``i.ready = en``. The pipeline advances whenever the output register is empty or is read,
    and freezes as a whole otherwise, so nothing is dropped under backpressure, ``o.valid`` is
    a register (it never depends on ``o.ready``) and the payload holds while ``o.valid & ~o.ready``.
    Without backpressure one operation enters per cycle; bubbles (idle input cycles) travel
    through as ``valid = 0`` stages. ``latency = 1 + number of cuts``.

    Parameters
    ----------
    m : Module
    i, o : stream interfaces (the component's input and output streams)
    cuts : dict
        ``{boundary name: registered?}`` in datapath order (:meth:`FP32Config.cuts`).
    name : str
        Prefix of the created signals.
    """

    def __init__(self, m, *, i, o, cuts: dict[str, bool], name: str):
        self.m = m
        self.o = o
        self.name = name
        self._cuts = list(cuts.items())
        self._next = 0
        self.en = Signal(name=f"{name}_en")
        self.valid = i.valid
        m.d.comb += [self.en.eq(~o.valid | o.ready), i.ready.eq(self.en)]

    @property
    def latency(self) -> int:
        return 1 + sum(1 for _, cut in self._cuts if cut)

    def is_cut(self, step: str) -> bool:
        """Whether boundary ``step`` is a register."""
        return dict(self._cuts)[step]

    def boundary(self, step: str, *, registered: dict | None = None,
                 **values) -> SimpleNamespace:
        """End step ``step``; return ``values`` registered (cut) or unchanged (wire).

        ``registered``: values the caller already registered at this boundary with
        :attr:`en` (e.g. a DSP block's own product register), returned as they are; only at a
        cut."""
        if self._next >= len(self._cuts) or self._cuts[self._next][0] != step:
            expected = self._cuts[self._next][0] if self._next < len(self._cuts) else None
            raise RuntimeError(f"{self.name}: boundary {step!r} out of order "
                               f"(expected {expected!r})")
        cut = self._cuts[self._next][1]
        self._next += 1
        if registered and not cut:
            raise RuntimeError(f"{self.name}: boundary {step!r} is a wire, not a register "
                               f"for {sorted(registered)}")
        if not cut:
            return SimpleNamespace(**values)
        m = self.m
        valid = Signal(name=f"{self.name}_{step}_valid")
        out = dict(registered or {})
        with m.If(self.en):
            m.d.sync += valid.eq(self.valid)
            for key, value in values.items():
                if not isinstance(value, data.View):
                    value = Value.cast(value)
                reg = Signal(value.shape(), name=f"{self.name}_{step}_{key}", reset_less=True)
                m.d.sync += reg.eq(value)
                out[key] = reg
        self.valid = valid
        return SimpleNamespace(**out)

    def output(self, payload) -> None:
        """Register ``payload`` into the output stream (the last pipeline stage)."""
        if self._next != len(self._cuts):
            raise RuntimeError(f"{self.name}: boundaries {[c for c, _ in self._cuts[self._next:]]}"
                               f" were never reached")
        with self.m.If(self.en):
            self.m.d.sync += [self.o.valid.eq(self.valid), self.o.payload.eq(payload)]

