"""Round an integer times a power of two to IEEE 754 binary32 (the shared rounding stage).

Every FP32-producing unit (the array edge converter, add, multiply, divide, square root, int
conversion, exp) ends in this logic, so rounding is written once. Golden model:
:func:`sim.fp32_round.round_to_fp32`, bit-exact.
"""
from amaranth.hdl import Cat, Const, Mux, Signal, signed, unsigned
from amaranth.utils import bits_for

__all__ = ["round_to_fp32", "leading_zeros"]


def leading_zeros(m, value, *, name: str):
    """Combinational count of leading zeros of ``value`` (``len(value)`` when zero)."""
    width = len(value)
    count = Signal(range(width + 1), name=f"{name}_lz")
    m.d.comb += count.eq(width)
    for i in range(width):                     # later statements win: the highest one decides
        with m.If(value[i]):
            m.d.comb += count.eq(width - 1 - i)
    return count


def round_to_fp32(m, *, sign, exp, sig, sticky=0, name: str = "rnd"):
    """Add combinational logic to ``m`` computing FP32 bits of ``(-1)**sign * sig * 2**exp``.

    Parameters
    ----------
    m : Module
        Module to add the (combinational) logic to.
    sign : Value, 1 bit
        Sign of the result, kept for zero and underflowed results.
    exp : Value, signed
        Power of two of ``sig``'s LSB.
    sig : Value, unsigned
        Magnitude; need not be normalised (any number of leading zeros).
    sticky : Value, 1 bit
        Set when the true magnitude has non-zero bits below ``sig``'s LSB.
    name : str
        Prefix for the internal signals' names.

    Returns
    -------
    Signal(32)
        The binary32 bit pattern, round-to-nearest-even; exact subnormals; ±Inf on overflow.
    """
    width = len(sig)
    exp = exp.as_signed() if not exp.shape().signed else exp
    # Wide enough for exp + width and for lsb - exp + 24 without overflow.
    ew = max(len(exp), bits_for(width + 200)) + 3

    lz = leading_zeros(m, sig, name=name)
    lead = Signal(signed(ew), name=f"{name}_lead")
    lsb = Signal(signed(ew), name=f"{name}_lsb")
    m.d.comb += [
        lead.eq(exp + (width - 1) - lz),
        lsb.eq(Mux(lead - 23 > -149, lead - 23, -149)),
    ]

    # Align: the result's LSB lands at bit 24 of `wide` shifted right by `rshift`.
    wide = Signal(width + 24, name=f"{name}_wide")
    rshift = Signal(signed(ew + 1), name=f"{name}_rshift")   # = lsb - exp + 24 >= 0
    clamp = Signal(range(width + 26), name=f"{name}_shift")
    clamp_m1 = Signal(range(width + 26), name=f"{name}_shift_m1")   # guard bit position
    m.d.comb += [
        wide.eq(Cat(Const(0, 24), sig)),
        rshift.eq(lsb - exp + 24),
        clamp.eq(Mux(rshift > width + 25, width + 25, rshift)),
        clamp_m1.eq(Mux(clamp == 0, 0, clamp - 1)),
    ]
    q = Signal(25, name=f"{name}_q")
    guard = Signal(name=f"{name}_guard")
    rest = Signal(name=f"{name}_rest")
    below = Signal(width + 24, name=f"{name}_below_mask")
    m.d.comb += [
        q.eq(wide >> clamp),
        guard.eq(Mux(clamp == 0, 0, (wide >> clamp_m1)[0])),
        below.eq(Mux(clamp < 2, 0, (Const(1, width + 26) << clamp_m1) - 1)),
        rest.eq((wide & below).any() | sticky),
    ]
    rounded = Signal(25, name=f"{name}_rounded")
    m.d.comb += rounded.eq(q + (guard & (rest | q[0])))
    frac = Signal(23, name=f"{name}_frac")
    biased = Signal(signed(ew), name=f"{name}_biased")
    with m.If(rounded[24]):
        m.d.comb += [frac.eq(rounded[1:24]), biased.eq(lsb + 151)]
    with m.Elif(rounded[23]):
        m.d.comb += [frac.eq(rounded[0:23]), biased.eq(lsb + 150)]
    with m.Else():
        m.d.comb += [frac.eq(rounded[0:23]), biased.eq(0)]
    result = Signal(32, name=f"{name}_result")
    with m.If(biased >= 255):
        m.d.comb += result.eq(Cat(Const(0, 23), Const(0xFF, 8), sign))
    with m.Else():
        m.d.comb += result.eq(Cat(frac, biased[:8], sign))
    return result
