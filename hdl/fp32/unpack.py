"""FP32 operand unpacking/classification and the stream-pipeline scaffold of the FP32 units.

* :func:`unpack_fp32` splits an IEEE 754 binary32 bit pattern into sign, significand and
  exponent (``value = (-1)**sign * sig * 2**exp``, subnormals exact) and classifies it (zero,
  subnormal, infinity, NaN), optionally normalising the significand of subnormals.
* :func:`normalize_left` shifts a significand left until its top bit is set (leading-zero
  count + barrel shift), lowering the exponent to keep the value.
* :func:`jam_sticky` keeps the top bits of a wide significand and ORs the rest into its LSB.
* :func:`round_plan` / :func:`round_prepare` / :func:`round_finish`: the shared FP32 rounding
  (:func:`hdl.fp32.round.round_to_fp32`, same results) split in two pipeline stages.
* :class:`CutPipeline` is the pipeline control shared by :mod:`hdl.fp32.add`,
  :mod:`~hdl.fp32.mul`, :mod:`~hdl.fp32.compare` and :mod:`~hdl.fp32.convert`: named step
  boundaries, each a register or a wire (see :class:`~hdl.fp32.config.FP32Config`), one global
  stall.

All functions add *combinational* logic to a module ``m`` and give every signal they create a
name derived from the ``name`` argument.
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Mux, Signal, Value, signed
from amaranth.lib import data


__all__ = ["QNAN", "count_leading_zeros", "unpack_fp32", "normalize_left", "jam_sticky",
           "round_plan", "round_plan_pre", "round_plan_lz", "round_prepare", "round_finish",
           "CutPipeline"]

#: The NaN every FP32 unit of this package produces (quiet, positive, zero payload).
QNAN = 0x7FC00000


def count_leading_zeros(m, value, *, name: str):
    """Leading zeros of ``value`` as a balanced tree (log2 depth; ``len(value)`` when zero).

    Same result as :func:`hdl.fp32.round.leading_zeros`, whose priority chain is linear in
    depth: the tree is what keeps the normalize stages near 100 MHz on ECP5.
    """
    value = Value.cast(value)
    width = len(value)
    levels = max(1, (width - 1).bit_length())        # tree over 2**levels >= 2 bits
    padded = Cat(Const(0, (1 << levels) - width), value)     # zeros below the LSB

    def tree(bits, lo, n):
        # (all-zero flag, leading-zero count of bits[lo:lo+n] as a Value of log2(n) bits)
        if n == 2:                                # count is the 1-bit "upper bit is 0"
            return ~bits[lo + 1] & ~bits[lo], ~bits[lo + 1]
        half = n // 2
        hz, hc = tree(bits, lo + half, half)      # upper half holds the leading bits
        lz_, lc = tree(bits, lo, half)
        return hz & lz_, Cat(Mux(hz, lc, hc), hz)

    zero, count = tree(padded, 0, 1 << levels)
    lz = Signal(range(width + 1), name=f"{name}_lz")
    m.d.comb += lz.eq(Mux(zero, width, count))
    return lz


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
        lz = count_leading_zeros(m, raw, name=f"{name}_sig")
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

    Returns ``(norm, exp_out, zero, lz)``: ``norm * 2**exp_out == sig * 2**exp``; ``zero`` is
    set when ``sig == 0`` (then ``norm == 0``); ``lz`` is the shift amount.
    """
    sig = Value.cast(sig)
    width = len(sig)
    lz = count_leading_zeros(m, sig, name=name)
    norm = Signal(width, name=f"{name}_norm")
    exp_out = Signal(exp_shape, name=f"{name}_norm_exp")
    zero = Signal(name=f"{name}_is_zero")
    m.d.comb += [
        norm.eq(sig << lz),
        exp_out.eq(exp - lz),
        zero.eq(sig == 0),
    ]
    return norm, exp_out, zero, lz


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


def round_plan(m, *, exp, width: int, name: str) -> SimpleNamespace:
    """Exponent part of :func:`round_prepare` for a ``width``-bit normalised significand whose
    LSB weighs ``2**exp``; a caller may compute it one pipeline stage earlier than the
    significand part (it depends on ``exp`` only).

    Returns ``shift`` (right shift onto the subnormal grid, 0 for normal results), ``base``
    (biased exponent minus one, 0 for a subnormal result) and ``ovf`` (biased exponent >= 255
    before rounding). All are computed from ``exp`` in parallel (no chained carries).
    """
    exp = Value.cast(exp)
    if not exp.shape().signed:
        exp = exp.as_signed()
    ew = max(len(exp), 10) + 2
    # The biased exponent of the leading one is efield = exp + width + 126; a subnormal
    # result needs a right shift by deficit = 1 - efield (at most `width` matters).
    deficit = Signal(signed(ew), name=f"{name}_deficit")
    sub = Signal(name=f"{name}_subnormal")
    ovf = Signal(name=f"{name}_ovf")
    base = Signal(8, name=f"{name}_base")
    shift = Signal(range(width + 1), name=f"{name}_denorm_shift")
    m.d.comb += [
        deficit.eq(-(width + 125) - exp),
        sub.eq(exp < -(width + 125)),
        ovf.eq(exp >= 129 - width),
        base.eq(Mux(sub, 0, exp + (width + 125))),
        shift.eq(Mux(~sub, 0, Mux(exp < -(2 * width + 125), width, deficit))),
    ]
    return SimpleNamespace(shift=shift, base=base, ovf=ovf)


def round_plan_pre(m, *, exp, width: int, name: str) -> SimpleNamespace:
    """The part of :func:`round_plan` that depends on the exponent *before* a normalising
    left shift: for a significand whose LSB weighs ``2**exp`` before it is shifted left by
    ``lz`` (computed later), :func:`round_plan_lz` then needs one subtraction and compares.
    Lets a unit compute these one stage before its leading-zero count.

    Returns ``base_pre`` (``exp + width + 125``: ``base`` before subtracting ``lz``) and
    ``ovf_lim`` (the result overflows iff ``lz <= ovf_lim``).
    """
    exp = Value.cast(exp)
    if not exp.shape().signed:
        exp = exp.as_signed()
    ew = max(len(exp), 10) + 2
    base_pre = Signal(signed(ew), name=f"{name}_base_pre")
    ovf_lim = Signal(signed(ew), name=f"{name}_ovf_lim")
    m.d.comb += [base_pre.eq(exp + (width + 125)), ovf_lim.eq(exp + (width - 129))]
    return SimpleNamespace(base_pre=base_pre, ovf_lim=ovf_lim)


def round_plan_lz(m, *, pre, lz, width: int, name: str) -> SimpleNamespace:
    """:func:`round_plan` of ``exp - lz`` from :func:`round_plan_pre` of ``exp``."""
    ew = len(pre.base_pre) + 1
    deficit = Signal(signed(ew), name=f"{name}_deficit")        # 1 - biased exponent
    shift = Signal(range(width + 1), name=f"{name}_denorm_shift")
    base = Signal(8, name=f"{name}_base")
    ovf = Signal(name=f"{name}_ovf")
    m.d.comb += [
        deficit.eq(lz - pre.base_pre),
        shift.eq(Mux(deficit <= 0, 0, Mux(deficit > width, width, deficit))),
        base.eq(Mux(deficit > 0, 0, -deficit)),
        ovf.eq(lz <= pre.ovf_lim),
    ]
    return SimpleNamespace(shift=shift, base=base, ovf=ovf)


def round_prepare(m, *, norm, name: str, exp=None, plan=None) -> SimpleNamespace:
    """First half of FP32 rounding of ``norm * 2**exp`` for a *normalised* ``norm``.

    Together with :func:`round_finish` this computes exactly what the shared
    :func:`hdl.fp32.round.round_to_fp32` computes (round-to-nearest-even, exact subnormals,
    overflow to Inf; verified against its golden model :func:`sim.fp32_round.round_to_fp32`),
    split so that pipeline registers can sit between the parts: the single-stage function is
    a chain of about ten carry chains and a barrel shifter (~29 ns, 34 MHz on ECP5 in the
    adder), too long for one ~100 MHz stage.

    This half (with :func:`round_plan`) finds the biased exponent of the leading one, shifts
    subnormal results right onto the ``2**-149`` grid (the shifted-out bits become sticky) and
    keeps 24 significand bits, a guard bit and a sticky bit.

    Parameters
    ----------
    norm : Value, unsigned, at least 26 bits
        Significand with its top bit set (the caller handles ``norm == 0`` itself). A jammed
        sticky LSB (:func:`jam_sticky`) is fine.
    exp : Value, signed
        Weight of ``norm``'s LSB (give either ``exp`` or ``plan``).
    plan : SimpleNamespace
        :func:`round_plan` of ``exp`` for ``len(norm)``, computed earlier.

    Returns
    -------
    SimpleNamespace
        ``frame`` (26 bits: sticky, guard, 24-bit significand ``q``), ``base`` (8 bits: the
        value to add, shifted by 23, to ``q`` -- biased exponent minus one, or 0 for a subnormal
        result) and ``ovf`` (the biased exponent is >= 255 before rounding).
    """
    norm = Value.cast(norm)
    width = len(norm)
    if width < 26:
        raise ValueError(f"round_prepare: norm must be at least 26 bits wide, not {width}")
    if (exp is None) == (plan is None):
        raise ValueError("round_prepare: give exactly one of exp and plan")
    if plan is None:
        plan = round_plan(m, exp=exp, width=width, name=name)
    # Bits shifted out (sticky), from a thermometer mask in parallel with the shifter.
    lost_mask = Signal(width, name=f"{name}_lost_mask")
    for k in range(width):
        m.d.comb += lost_mask[k].eq(plan.shift > k)
    lost = Signal(name=f"{name}_lost")
    m.d.comb += lost.eq((norm & lost_mask).any())
    hi = Signal(width, name=f"{name}_denorm")
    m.d.comb += hi.eq(norm >> plan.shift)
    frame = Signal(26, name=f"{name}_frame")
    m.d.comb += frame.eq(Cat(hi[:width - 25].any() | lost, hi[width - 25:]))
    return SimpleNamespace(frame=frame, base=plan.base, ovf=plan.ovf)


def round_finish(m, *, sign, frame, base, ovf, name: str):
    """Second half of FP32 rounding (see :func:`round_prepare`): the nearest-even increment.

    ``(base << 23) + q + inc`` packs exponent and fraction in one addition: the hidden bit of a
    normal ``q`` brings the exponent from ``base`` to ``base + 1``, a carry out of the fraction
    bumps it once more, a subnormal rounding up to ``2**-126`` becomes the smallest normal, and
    rounding past the largest finite value lands exactly on Inf. Returns ``Signal(32)``.
    """
    frame = Value.cast(frame)
    sticky, guard, q = frame[0], frame[1], frame[2:26]
    inc = Signal(name=f"{name}_inc")
    mag = Signal(31, name=f"{name}_mag")
    result = Signal(32, name=f"{name}_result")
    m.d.comb += [
        inc.eq(guard & (sticky | q[0])),
        mag.eq((Value.cast(base) << 23) + q + inc),
        result.eq(Mux(ovf, Cat(Const(0, 23), Const(0xFF, 8), sign), Cat(mag, sign))),
    ]
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

