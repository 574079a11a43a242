"""Golden model of :func:`hdl.fp32.round.round_to_fp32` (pure Python integers, no floats).

``round_to_fp32(sign, exp, sig, sticky)`` returns the IEEE 754 binary32 bit pattern nearest to
``(-1)**sign * (sig + delta) * 2**exp`` with round-to-nearest-even, where ``sig >= 0`` is an
integer and ``sticky`` says that ``0 < delta < 1`` (bits below ``sig``'s LSB are non-zero).
Subnormal results are exact (no flush to zero); magnitudes at or past ``2**128`` after rounding
give ±Inf. A zero or underflowed result keeps the given sign (``-0.0`` for ``sign=1``).
"""

__all__ = ["round_to_fp32", "INF_BITS"]

INF_BITS = 0x7F800000


def round_to_fp32(sign: int, exp: int, sig: int, sticky: int = 0) -> int:
    if sig < 0:
        raise ValueError(f"sig must be >= 0, not {sig}")
    sign_bit = (sign & 1) << 31
    if sig == 0:
        return sign_bit
    lead = exp + sig.bit_length() - 1          # exponent of the leading one
    lsb = max(lead - 23, -149)                 # weight of the result's LSB
    shift = lsb - exp                          # bits of sig below the result's LSB
    if shift <= 0:
        q, guard, rest = sig << -shift, 0, bool(sticky)
    else:
        q = sig >> shift
        guard = (sig >> (shift - 1)) & 1
        rest = bool(sig & ((1 << (shift - 1)) - 1)) or bool(sticky)
    if guard and (rest or (q & 1)):
        q += 1
    if q >> 24:                                # rounding carried into a new binade
        q >>= 1
        lsb += 1
    biased = lsb + 150 if q >> 23 else 0       # subnormal results have q < 2**23
    if biased >= 255:
        return sign_bit | INF_BITS
    return sign_bit | (biased << 23) | (q & 0x7FFFFF)
