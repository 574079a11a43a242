"""FP32 rounding: the one home of round-to-nearest-even to IEEE 754 binary32 in the hardware.

Every FP32-producing unit (add, multiply, divide, square root, int conversion, exp, log, the
array-edge converter, the BFP -> FP32 converter) rounds ``(-1)**sign * sig * 2**exp`` (plus an
optional sticky bit below ``sig``'s LSB) with the functions of this module. Golden model of all
of them: :func:`sim.model.fp32_round.round_to_fp32`, bit-exact (round-to-nearest-even, exact
subnormals, ±Inf at or past ``2**128``, a zero or underflowed result keeps its sign).

The rounding is a chain of steps that a unit may spread over pipeline stages:

==========================  ======================================================================
step                        function
==========================  ======================================================================
leading-zero count          :func:`count_leading_zeros` (log-depth tree) -- skipped when the
                            significand's leading one is known (e.g. :func:`round_plan_top2`)
exponent plan               :func:`round_plan` (from a normalised significand's exponent), or
                            :func:`round_plan_pre` (before the count, from the raw exponent) then
                            :func:`round_plan_lz` (one subtraction once the count is known);
                            :func:`round_plan_top2` + :func:`round_plan_select` for a leading one
                            in one of the two top bits
normalise                   ``norm = sig << lz`` (:func:`normalize_left` does count + shift);
                            :func:`jam_sticky` may then narrow a wide ``norm``
prepare                     :func:`round_prepare`: subnormal right shift onto the ``2**-149``
                            grid, 24-bit significand, guard and sticky bits (the *frame*)
finish                      :func:`round_finish`: nearest-even increment and packing, ±Inf
==========================  ======================================================================

:func:`round_to_fp32` is all of them composed combinationally in one function (same results)
for callers that do not need stages; it is a long path (about 30 ns on ECP5). The staged
arrangements reach about 100 MHz with one register after each of: count (+ pre-plan), normalise
(+ plan), prepare, finish.

All functions add *combinational* logic to a module ``m`` and name every signal they create
after the ``name`` argument.
"""
from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Mux, Signal, Value, signed
from amaranth.utils import bits_for

__all__ = ["count_leading_zeros", "shift_left", "leading_zeros", "normalize_left", "jam_sticky",
           "round_plan", "round_plan_pre", "round_plan_lz", "round_plan_top2",
           "round_plan_select", "round_prepare", "round_finish", "round_to_fp32",
           "MIN_NORM_WIDTH"]

#: Narrowest significand :func:`round_prepare` takes: 24 result bits, guard, one bit below.
MIN_NORM_WIDTH = 26


def _signed_exp(exp) -> Value:
    """``exp`` as a signed Value (a Python int becomes a signed constant; an unsigned Value is
    reinterpreted as two's complement, as :func:`round_to_fp32` always did)."""
    if isinstance(exp, int):
        return Const(exp, signed(bits_for(exp, require_sign_bit=True)))
    exp = Value.cast(exp)
    return exp if exp.shape().signed else exp.as_signed()


def _exp_width(exp: Value, width: int) -> int:
    """Width of the plan's exponent arithmetic: holds ``±(|exp| + width + 130)``."""
    return max(len(exp), bits_for(width + 130) + 1) + 2


# ----------------------------------------------------------------------------------------------
# Leading zeros, normalisation, sticky compression
# ----------------------------------------------------------------------------------------------

def count_leading_zeros(m, value, *, name: str):
    """Leading zeros of ``value`` as a balanced tree (log2 depth; ``len(value)`` when zero).

    Returns ``Signal(range(len(value) + 1))`` named ``{name}_lz``. The tree pads ``value`` at
    the LSB end to a power of two (a one just below it when there is room, so that zero
    counts ``len(value)`` with no select after the tree) and combines (all-zero flag, count)
    pairs of halves; the depth is ``ceil(log2(width))`` two-input muxes, which is what keeps the normalise stages
    of the FP32 units near 100 MHz on ECP5 (a priority chain is linear in the width).
    """
    value = Value.cast(value)
    width = len(value)
    levels = max(1, (width - 1).bit_length())        # tree over 2**levels >= 2 bits

    def tree(bits, lo, n):
        # (all-zero flag, leading-zero count of bits[lo:lo+n] as a Value of log2(n) bits)
        if n == 2:                                # count is the 1-bit "upper bit is 0"
            return ~bits[lo + 1] & ~bits[lo], ~bits[lo + 1]
        half = n // 2
        hz, hc = tree(bits, lo + half, half)      # upper half holds the leading bits
        lz_, lc = tree(bits, lo, half)
        return hz & lz_, Cat(Mux(hz, lc, hc), hz)

    lz = Signal(range(width + 1), name=f"{name}_lz")
    if (1 << levels) > width:
        # a one just below the value's LSB: an all-zero value counts ``width`` by itself, with
        # no select after the tree
        padded = Cat(Const(1 << ((1 << levels) - width - 1), (1 << levels) - width), value)
        _, count = tree(padded, 0, 1 << levels)
        m.d.comb += lz.eq(count)
    else:
        zero, count = tree(value, 0, width)
        m.d.comb += lz.eq(Mux(zero, width, count))
    return lz


def shift_left(value, amount, width: int | None = None) -> Value:
    """``(value << amount)[:width]`` (``width`` defaults to ``len(value)``), built as one
    2:1 mux stage per bit of ``amount``, **most significant bit first**, each stage cut to
    ``width`` bits.

    The same bits as Amaranth's ``<<``, but when ``amount`` is a leading-zero count from
    :func:`count_leading_zeros` (whose count bits settle from the MSB down) the first stages
    switch while the count's low bits are still settling: a 24-bit count + normalise measured
    11 LUT/MUX levels and 199 LUT4 on ECP5 against 13 and 388 with ``<<`` (yosys'
    shifter, LSB first and full width).
    """
    value = Value.cast(value)
    amount = Value.cast(amount)
    width = len(value) if width is None else width
    v = value[:width] if len(value) >= width else Cat(value, Const(0, width - len(value)))
    for i in reversed(range(len(amount))):
        step = 1 << i
        shifted = Const(0, width) if step >= width else Cat(Const(0, step), v[:width - step])
        v = Mux(amount[i], shifted, v)
    return v


def leading_zeros(m, value, *, name: str):
    """Former name of :func:`count_leading_zeros` (same result, now the same tree)."""
    return count_leading_zeros(m, value, name=name)


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
        norm.eq(shift_left(sig, lz)),
        exp_out.eq(exp - lz),
        zero.eq(sig == 0),
    ]
    return norm, exp_out, zero, lz


def jam_sticky(m, sig, keep: int, *, name: str):
    """Keep the top ``keep - 1`` bits of ``sig`` and OR all lower bits into a new LSB.

    Returns ``(jammed, dropped)``: ``jammed`` is ``keep`` bits wide and its LSB weighs
    ``2**dropped`` times ``sig``'s LSB (``dropped = len(sig) - keep``). Rounding ``jammed`` at
    a position at least two bits above its LSB gives the same result as rounding ``sig`` (the
    jammed LSB only marks "non-zero bits below"); :func:`round_prepare` always rounds at least
    two bits above the LSB of a normalised significand of ``keep >= 27`` bits.
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


# ----------------------------------------------------------------------------------------------
# Exponent plan
# ----------------------------------------------------------------------------------------------

def round_plan(m, *, exp, width: int, name: str) -> SimpleNamespace:
    """Exponent part of the rounding of a ``width``-bit *normalised* significand (top bit set)
    whose LSB weighs ``2**exp``. It depends on ``exp`` only, so a unit may compute it one or
    more pipeline stages before the significand (and register it).

    Returns
    -------
    SimpleNamespace
        ``shift`` (``Signal(range(width + 1))``: right shift onto the subnormal grid, 0 for a
        normal result, clamped at ``width``), ``base`` (8 bits: biased exponent minus one, 0
        for a subnormal result) and ``ovf`` (1 bit: biased exponent >= 255 before rounding,
        the result is ±Inf). All three are computed from ``exp`` in parallel.
    """
    exp = _signed_exp(exp)
    ew = _exp_width(exp, width)
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
    left shift: for a ``width``-bit significand whose LSB weighs ``2**exp`` before it is
    shifted left by ``lz`` (counted later), :func:`round_plan_lz` then needs one subtraction
    and compares. Lets a unit compute these in the stage of its leading-zero count.

    Returns ``base_pre`` (``exp + width + 125``: ``base`` before subtracting ``lz``) and
    ``ovf_lim`` (the result overflows iff ``lz <= ovf_lim``), both signed.
    """
    exp = _signed_exp(exp)
    ew = _exp_width(exp, width)
    base_pre = Signal(signed(ew), name=f"{name}_base_pre")
    ovf_lim = Signal(signed(ew), name=f"{name}_ovf_lim")
    m.d.comb += [base_pre.eq(exp + (width + 125)), ovf_lim.eq(exp + (width - 129))]
    return SimpleNamespace(base_pre=base_pre, ovf_lim=ovf_lim)


def round_plan_lz(m, *, pre, lz, width: int, name: str) -> SimpleNamespace:
    """:func:`round_plan` of ``exp - lz`` from ``pre`` = :func:`round_plan_pre` of ``exp``
    (any object with ``base_pre`` and ``ovf_lim``, e.g. their pipeline registers)."""
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


def round_plan_top2(m, *, exp, width: int, name: str) -> SimpleNamespace:
    """Plans for a ``width``-bit significand ``sig`` whose leading one is known to be in its
    top bit or the one below (a quotient, a square root, a product of two normalised numbers),
    LSB weight ``2**exp``: ``top`` is :func:`round_plan` of ``exp`` (``sig[width-1]`` set, the
    significand is already normalised) and ``low`` that of ``exp - 1`` (normalise with
    ``sig << 1``). Both come from ``exp`` in parallel; :func:`round_plan_select` picks one
    once the top bit is known. Returns ``SimpleNamespace(top=..., low=...)``.
    """
    exp = _signed_exp(exp)
    return SimpleNamespace(top=round_plan(m, exp=exp, width=width, name=f"{name}_top1"),
                           low=round_plan(m, exp=exp - 1, width=width, name=f"{name}_top0"))


def round_plan_select(sel, if_set: SimpleNamespace, if_clear: SimpleNamespace) -> SimpleNamespace:
    """The plan ``if_set`` when ``sel`` is 1, else ``if_clear`` (field-wise ``Mux``)."""
    return SimpleNamespace(shift=Mux(sel, if_set.shift, if_clear.shift),
                           base=Mux(sel, if_set.base, if_clear.base),
                           ovf=Mux(sel, if_set.ovf, if_clear.ovf))


# ----------------------------------------------------------------------------------------------
# Prepare and finish
# ----------------------------------------------------------------------------------------------

def round_prepare(m, *, norm, name: str, exp=None, plan=None, sticky=None) -> SimpleNamespace:
    """First half of FP32 rounding of ``(norm + delta) * 2**exp`` for a *normalised* ``norm``.

    Together with :func:`round_finish` (and a plan) this computes exactly what
    :func:`round_to_fp32` computes: the split lets pipeline registers sit between the parts.
    This half shifts subnormal results right onto the ``2**-149`` grid (the shifted-out bits
    become sticky) and keeps 24 significand bits, a guard bit and a sticky bit.

    Parameters
    ----------
    norm : Value, unsigned, at least :data:`MIN_NORM_WIDTH` (26) bits
        Significand with its top bit set (the caller handles ``norm == 0`` itself). A jammed
        sticky LSB (:func:`jam_sticky`) is fine when ``len(norm) >= 27``.
    exp : Value, signed
        Weight of ``norm``'s LSB (give either ``exp`` or ``plan``).
    plan : SimpleNamespace
        :func:`round_plan` (or :func:`round_plan_lz`) of ``exp`` for ``len(norm)``, computed
        earlier: any object with ``shift``, ``base`` and ``ovf``.
    sticky : Value, 1 bit, optional
        Set when the exact value has non-zero bits below ``norm``'s LSB (``0 < delta < 1``).

    Returns
    -------
    SimpleNamespace
        ``frame`` (26 bits: sticky, guard, 24-bit significand ``q``), ``base`` (8 bits: the
        value to add, shifted by 23, to ``q`` -- biased exponent minus one, or 0 for a subnormal
        result) and ``ovf`` (the biased exponent is >= 255 before rounding).
    """
    norm = Value.cast(norm)
    width = len(norm)
    if width < MIN_NORM_WIDTH:
        raise ValueError(f"round_prepare: norm must be at least {MIN_NORM_WIDTH} bits wide, "
                         f"not {width}")
    if (exp is None) == (plan is None):
        raise ValueError("round_prepare: give exactly one of exp and plan")
    if plan is None:
        plan = round_plan(m, exp=exp, width=width, name=name)
    # Bits shifted out (sticky), from a thermometer mask in parallel with the shifter.
    lost_mask = Signal(width, name=f"{name}_lost_mask")
    for k in range(width):
        m.d.comb += lost_mask[k].eq(plan.shift > k)
    lost = Signal(name=f"{name}_lost")
    m.d.comb += lost.eq((norm & lost_mask).any() if sticky is None
                        else (norm & lost_mask).any() | sticky)
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


# ----------------------------------------------------------------------------------------------
# All of it in one combinational function
# ----------------------------------------------------------------------------------------------

def round_to_fp32(m, *, sign, exp, sig, sticky=0, name: str = "rnd"):
    """Add combinational logic to ``m`` computing FP32 bits of ``(-1)**sign * sig * 2**exp``.

    The staged functions of this module composed without registers: :func:`round_plan_pre`
    and :func:`count_leading_zeros` -> ``sig << lz`` and :func:`round_plan_lz` ->
    :func:`round_prepare` -> :func:`round_finish`, and ``±0`` for ``sig == 0``. Bit-exact with
    :func:`sim.model.fp32_round.round_to_fp32`. One long combinational path: a pipelined unit should
    put registers between the steps instead (see the module docstring).

    Parameters
    ----------
    m : Module
        Module to add the (combinational) logic to.
    sign : Value, 1 bit
        Sign of the result, kept for zero and underflowed results.
    exp : Value, signed (an unsigned Value is read as two's complement)
        Power of two of ``sig``'s LSB.
    sig : Value, unsigned
        Magnitude; need not be normalised (any number of leading zeros).
    sticky : Value, 1 bit
        Set when the true magnitude has non-zero bits below ``sig``'s LSB (ignored when
        ``sig == 0``: the result is then ``±0``, as in the golden model).
    name : str
        Prefix for the internal signals' names.

    Returns
    -------
    Signal(32)
        The binary32 bit pattern, round-to-nearest-even; exact subnormals; ±Inf on overflow.
    """
    sig = Value.cast(sig)
    exp = _signed_exp(exp)
    pad = max(0, MIN_NORM_WIDTH - len(sig))
    if pad:                                      # zeros below the LSB: same value
        sig = Cat(Const(0, pad), sig)
        exp = exp - pad
    width = len(sig)
    pre = round_plan_pre(m, exp=exp, width=width, name=name)
    lz = count_leading_zeros(m, sig, name=name)
    norm = Signal(width, name=f"{name}_norm")
    zero = Signal(name=f"{name}_is_zero")
    m.d.comb += [norm.eq(shift_left(sig, lz)), zero.eq(lz == width)]
    plan = round_plan_lz(m, pre=pre, lz=lz, width=width, name=name)
    r = round_prepare(m, norm=norm, plan=plan, name=name,
                      sticky=None if isinstance(sticky, int) and sticky == 0 else sticky)
    rounded = round_finish(m, sign=sign, frame=r.frame, base=r.base, ovf=r.ovf, name=name)
    result = Signal(32, name=f"{name}_result_z")
    m.d.comb += result.eq(Mux(zero, Cat(Const(0, 31), sign), rounded))
    return result
