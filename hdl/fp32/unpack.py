"""FP32 operand unpacking/classification and the stream-pipeline scaffold of the FP32 units.

* :func:`unpack_fp32` splits an IEEE 754 binary32 bit pattern into sign, significand and
  exponent (``value = (-1)**sign * sig * 2**exp``, subnormals exact) and classifies it (zero,
  subnormal, infinity, NaN), optionally normalising the significand of subnormals.
* :func:`normalize_left` shifts a significand left until its top bit is set (leading-zero
  count + barrel shift), lowering the exponent to keep the value.
* :func:`jam_sticky` keeps the top bits of a wide significand and ORs the rest into its LSB.
* :func:`rounding_stage` feeds a normalised significand to the shared
  :func:`hdl.fp32.round.round_to_fp32` so that its leading-zero count folds to a constant.
* :class:`CutPipeline` is the pipeline control shared by :mod:`hdl.fp32.add`,
  :mod:`~hdl.fp32.mul`, :mod:`~hdl.fp32.compare` and :mod:`~hdl.fp32.convert`: named step
  boundaries, each a register or a wire (see :class:`~hdl.fp32.config.FP32Config`), one global
  stall.
* :class:`FlatStreams` wraps a unit with plain bit-vector stream payloads for Verilog.

All functions add *combinational* logic to a module ``m`` and give every signal they create a
name derived from the ``name`` argument.
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .round import leading_zeros, round_to_fp32

__all__ = ["QNAN", "unpack_fp32", "normalize_left", "jam_sticky", "rounding_stage",
           "CutPipeline", "FlatStreams"]

#: The NaN every FP32 unit of this package produces (quiet, positive, zero payload).
QNAN = 0x7FC00000


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
        ``(-1)**sign * sig * 2**exp`` exactly.
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
    if normalize:
        raw = Signal(24, name=f"{name}_sig_raw")
        m.d.comb += raw.eq(Cat(frac, ~e_zero))
        lz = leading_zeros(m, raw, name=f"{name}_sig")
        m.d.comb += [
            sig.eq(raw << lz),
            exp.eq(Mux(e_zero, 1, efield) - 150 - lz),
        ]
    else:
        m.d.comb += [
            sig.eq(Cat(frac, ~e_zero)),
            exp.eq(Mux(e_zero, 1, efield) - 150),
        ]
    return SimpleNamespace(
        sign=sign, efield=efield, frac=frac, mag=bits[0:31],
        zero=e_zero & f_zero, sub=e_zero & ~f_zero, inf=e_ones & f_zero, nan=e_ones & ~f_zero,
        finite=~e_ones, sig=sig, exp=exp,
    )


def normalize_left(m, sig, exp, *, name: str, exp_shape=signed(12)):
    """Shift ``sig`` left until its top bit is set; lower ``exp`` by the same amount.

    Returns ``(norm, exp_out, zero)``: ``norm * 2**exp_out == sig * 2**exp``; ``zero`` is set
    when ``sig == 0`` (then ``norm == 0``).
    """
    sig = Value.cast(sig)
    width = len(sig)
    lz = leading_zeros(m, sig, name=name)
    norm = Signal(width, name=f"{name}_norm")
    exp_out = Signal(exp_shape, name=f"{name}_norm_exp")
    zero = Signal(name=f"{name}_is_zero")
    m.d.comb += [
        norm.eq(sig << lz),
        exp_out.eq(exp - lz),
        zero.eq(sig == 0),
    ]
    return norm, exp_out, zero


def jam_sticky(m, sig, keep: int, *, name: str):
    """Keep the top ``keep - 1`` bits of ``sig`` and OR all lower bits into a new LSB.

    Returns ``(jammed, dropped)``: ``jammed`` is ``keep`` bits wide and its LSB weighs
    ``2**(len(sig) - keep)`` times ``sig``'s LSB. Rounding ``jammed`` at a position at least two
    bits above its LSB gives the same result as rounding ``sig`` (the jammed LSB only marks
    "non-zero bits below").
    """
    sig = Value.cast(sig)
    dropped = len(sig) - keep
    if dropped < 0:
        raise ValueError(f"jam_sticky: keep={keep} exceeds the width {len(sig)}")
    jammed = Signal(keep, name=f"{name}_jammed")
    if dropped == 0:
        m.d.comb += jammed.eq(sig)
    else:
        m.d.comb += jammed.eq(Cat(sig[dropped] | sig[:dropped].any(), sig[dropped + 1:]))
    return jammed, dropped


def rounding_stage(m, *, sign, exp, norm, name: str):
    """FP32 bits of ``(-1)**sign * norm * 2**exp`` for a *normalised* ``norm`` (top bit set).

    Uses :func:`~hdl.fp32.round.round_to_fp32` with the top bit replaced by a constant one, so
    its leading-zero counter folds away in synthesis. The caller handles ``norm == 0``
    (exact zero) itself.
    """
    norm = Value.cast(norm)
    sig = Cat(norm[:-1], Const(1, 1))
    return round_to_fp32(m, sign=sign, exp=exp, sig=sig, name=name)


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

    def boundary(self, step: str, **values) -> SimpleNamespace:
        """End step ``step``; return ``values`` registered (cut) or unchanged (wire)."""
        if self._next >= len(self._cuts) or self._cuts[self._next][0] != step:
            expected = self._cuts[self._next][0] if self._next < len(self._cuts) else None
            raise RuntimeError(f"{self.name}: boundary {step!r} out of order "
                               f"(expected {expected!r})")
        cut = self._cuts[self._next][1]
        self._next += 1
        if not cut:
            return SimpleNamespace(**values)
        m = self.m
        valid = Signal(name=f"{self.name}_{step}_valid")
        out = {}
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


class FlatStreams(wiring.Component):
    """Top-level wrapper giving a unit plain bit-vector stream payloads (for Verilog).

    The units' payloads are :mod:`amaranth.lib.data` structs (``i.payload.a`` ...), which
    Amaranth users connect by field. :func:`hdl.gen.port_signals` keeps only ``Signal`` ports,
    and a struct payload is a ``View``, so the registered blocks generate this wrapper: the
    same ``i``/``o`` streams with ``unsigned(width)`` payloads (bit positions as in the
    layouts, LSB first), the same ``latency``.

    Members
    -------
    i : In(stream.Signature(unsigned(len(unit.i.payload))))
    o : Out(stream.Signature(unsigned(len(unit.o.payload))))
    """

    def __init__(self, unit: wiring.Component):
        self.unit = unit
        self.latency = unit.latency
        self.config = unit.config
        super().__init__({
            "i": In(stream.Signature(len(Value.cast(unit.i.payload)))),
            "o": Out(stream.Signature(len(Value.cast(unit.o.payload)))),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.unit = unit = self.unit
        m.d.comb += [
            unit.i.valid.eq(self.i.valid),
            Value.cast(unit.i.payload).eq(self.i.payload),
            self.i.ready.eq(unit.i.ready),
            self.o.valid.eq(unit.o.valid),
            self.o.payload.eq(Value.cast(unit.o.payload)),
            unit.o.ready.eq(self.o.ready),
        ]
        return m
