"""Golden model of the FAST block-floating-point converters (pure numpy).

Bit-exact with :class:`hdl.bfp.BFPConverter` (FP32 -> BFP) and :class:`hdl.bfp.BFPToFP32`
(BFP -> FP32), including the stochastic-rounding LFSR sequence. Everything is integer
arithmetic on the float32 bit patterns; no floating-point rounding happens here.
See ``docs/bfp.md`` for the format, the payload layouts and the policies. The payload packers
(:func:`pack_fp32_group`, :func:`pack_bfp_group`, ...) read their field offsets from the
hardware's layouts (:mod:`hdl.bfp`), imported only when a payload is packed or unpacked.

Numerics (one group of ``G = config.group_size`` values, run-time width ``m``):

* ``E = floor(log2(max|x|))``, exact for subnormals (``-149 <= E <= 127``); ``E = E_ZERO = -150``
  for an all-zero group.
* ``q = |x| / 2**(E - (m - 1))`` (so the largest element has ``2**(m-1) <= q < 2**m``);
  ``M = round(q)`` by the group's rounding mode; ``M = 2**m`` saturates to ``2**m - 1``.
* Rounding modes: :data:`ROUND_NEAREST` (ties to even); :data:`ROUND_STOCHASTIC`:
  ``M = floor((floor(q * 2**r) + n) / 2**r)`` with ``r = config.noise_bits`` and ``n`` the lane's
  ``r``-bit LFSR noise (bits of ``q`` below ``2**-r`` are discarded); :data:`ROUND_TRUNCATE`:
  the same with ``n = 0`` (``M = floor(q)``).
* ``sign`` is the sign bit of ``x`` (``-0.0`` gives ``sign = 1, M = 0``).
* A group holding a NaN sets ``invalid``, one holding an infinity sets ``overflow``; such a
  group is output as ``E = E_ZERO`` and every ``sign = M = 0``.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np

from hdl.config import BFPConfig

__all__ = [
    "ROUND_NEAREST", "ROUND_STOCHASTIC", "ROUND_TRUNCATE", "ROUNDING_MODES", "E_ZERO",
    "LFSR_WIDTH", "LFSR_TAPS", "lfsr_lane_seed", "LFSR",
    "BFPGroups", "quantize", "quantize_group", "dequantize", "dequantize_group_bits",
    "decode_width", "decode_rounding",
    "fp32_stream_fields", "bfp_stream_fields", "fp32_out_fields",
    "pack_fp32_group", "unpack_fp32_group", "pack_bfp_group", "unpack_bfp_group",
    "BFPConverterModel", "BFPToFP32Model", "random_fp32_groups", "edge_case_groups",
]

#: Rounding-mode encodings; the same values as :class:`hdl.bfp.Rounding`.
ROUND_NEAREST = 0
ROUND_STOCHASTIC = 1
ROUND_TRUNCATE = 2
ROUNDING_MODES = (ROUND_NEAREST, ROUND_STOCHASTIC, ROUND_TRUNCATE)

#: Shared exponent of an all-zero group (and of a NaN/Inf group): one below any real group.
E_ZERO = -150

#: Each lane's LFSR: 32-bit Fibonacci, characteristic polynomial x^32 + x^22 + x^2 + x + 1
#: (primitive, period 2**32 - 1). State bit ``j`` is the ``j``-th next output bit; one step is
#: ``state = (state >> 1) | (parity(state & TAPS) << 31)``.
LFSR_WIDTH = 32
LFSR_TAPS = (0, 1, 2, 22)

_M32 = 0xFFFF_FFFF


def lfsr_lane_seed(seed: int, lane: int) -> int:
    """Reset state of lane ``lane``'s LFSR derived from ``config.lfsr_seed``.

    ``fmix32(seed + (lane + 1) * 0x9E3779B9 mod 2**32)`` (MurmurHash3's finaliser, a bijection),
    with 0 (an LFSR's lock-up state) replaced by 1.
    """
    z = (seed + (lane + 1) * 0x9E3779B9) & _M32
    z ^= z >> 16
    z = (z * 0x85EBCA6B) & _M32
    z ^= z >> 13
    z = (z * 0xC2B2AE35) & _M32
    z ^= z >> 16
    return z or 1


class LFSR:
    """The converter's noise source: one 32-bit LFSR per lane, ``group_size`` lanes.

    The hardware takes lane ``j``'s noise for a group as the low ``noise_bits`` bits of its
    state when the group is accepted, and then steps the LFSR ``noise_bits`` times, for every
    accepted group in every rounding mode. :meth:`noise` does exactly that.
    """

    def __init__(self, config: BFPConfig):
        if not isinstance(config, BFPConfig):
            raise TypeError(f"config must be a BFPConfig, not {type(config).__name__}")
        self.config = config
        self.reset()

    def reset(self) -> None:
        self.state = np.array([lfsr_lane_seed(self.config.lfsr_seed, j)
                               for j in range(self.config.group_size)], dtype=np.int64)

    @staticmethod
    def step(state: np.ndarray, count: int) -> np.ndarray:
        """``state`` after ``count`` single steps (chunks of <= 10 bits: taps stay below 32)."""
        state = np.array(state, dtype=np.int64)
        while count:
            k = min(count, LFSR_WIDTH - max(LFSR_TAPS))
            fb = np.zeros_like(state)
            for t in LFSR_TAPS:
                fb ^= state >> t
            fb &= (1 << k) - 1
            state = (state >> k) | (fb << (LFSR_WIDTH - k))
            count -= k
        return state

    def noise(self) -> np.ndarray:
        """Noise values (``(group_size,)`` ints in ``[0, 2**noise_bits)``) for the next group."""
        r = self.config.noise_bits
        out = self.state & ((1 << r) - 1)
        self.state = self.step(self.state, r)
        return out

    def noise_block(self, n: int) -> np.ndarray:
        """Noise of the next ``n`` groups at once, ``(n, group_size)``: the same values and the
        same final state as ``n`` calls of :meth:`noise`, from the output bit sequence.

        Lane bit ``t`` of the sequence (state bit ``j`` is bit ``t + j``) obeys
        ``s[t+32] = s[t] ^ s[t+1] ^ s[t+2] ^ s[t+22]`` (the taps) and so, squaring the
        characteristic polynomial over GF(2) ``k`` times, ``s[t+32D] = s[t] ^ s[t+D] ^ s[t+2D]
        ^ s[t+22D]`` for ``D = 2**k``: each round appends ``10D`` bits from the ``32D`` before
        them, so the sequence grows geometrically in a few dozen numpy operations.
        """
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise ValueError(f"n must be a non-negative int, not {n!r}")
        r, G = self.config.noise_bits, self.config.group_size
        total = int(n) * r + LFSR_WIDTH
        seq = np.empty((G, total), np.uint8)
        state = np.asarray(self.state, np.int64)
        seq[:, :LFSR_WIDTH] = (state[:, None] >> np.arange(LFSR_WIDTH)) & 1
        have = LFSR_WIDTH
        while have < total:
            D = 1 << ((have // LFSR_WIDTH).bit_length() - 1)      # 32 D <= have
            k = min(10 * D, total - have)
            t0 = have - LFSR_WIDTH * D
            x = seq[:, t0:t0 + k].copy()
            for tap in LFSR_TAPS[1:]:
                x ^= seq[:, t0 + tap * D:t0 + tap * D + k]
            seq[:, have:have + k] = x
            have += k
        weights = np.int64(1) << np.arange(r, dtype=np.int64)
        out = (seq[:, :n * r].reshape(G, n, r).astype(np.int64) * weights).sum(-1).T
        self.state = (seq[:, n * r:].astype(np.int64)
                      << np.arange(LFSR_WIDTH, dtype=np.int64)).sum(-1)
        return np.ascontiguousarray(out)


class BFPGroups(NamedTuple):
    """A quantized tensor.

    ``mag``/``sign`` have the padded shape of ``x`` (the grouping axis zero-padded to a multiple
    of ``group_size``); ``exp``, ``invalid`` and ``overflow`` have that shape with the grouping
    axis's length divided by ``group_size`` (one entry per group, the axis kept in place).
    """

    exp: np.ndarray
    sign: np.ndarray
    mag: np.ndarray
    invalid: np.ndarray
    overflow: np.ndarray


def decode_width(code: int, config: BFPConfig) -> int:
    """The width the hardware uses for a payload ``width`` field ``code``.

    ``2 * clamp(code // 2, 1, max_mantissa // 2)``: legal widths map to themselves, other codes
    to the nearest legal width below (0 and 1 to 2, above ``max_mantissa`` to ``max_mantissa``),
    like the fMAC.
    """
    return 2 * min(max(int(code) // 2, 1), config.max_mantissa // 2)


def decode_rounding(code: int) -> int:
    """The rounding mode the hardware uses for a payload ``rounding`` field (3 -> truncate)."""
    code = int(code)
    return code if code in ROUNDING_MODES else ROUND_TRUNCATE


def _check_width(width, config):
    if isinstance(width, bool) or not isinstance(width, (int, np.integer)) \
            or int(width) not in config.widths:
        raise ValueError(f"width must be one of {config.widths}, not {width!r}")
    return int(width)


def _check_rounding(rounding):
    if isinstance(rounding, bool) or not isinstance(rounding, (int, np.integer)) \
            or int(rounding) not in ROUNDING_MODES:
        raise ValueError(f"rounding must be one of {ROUNDING_MODES}, not {rounding!r}")
    return int(rounding)


def _bit_length(v: np.ndarray, bits: int) -> np.ndarray:
    """Vectorised ``int.bit_length`` for non-negative ints below ``2**bits``."""
    n = np.zeros_like(v)
    for b in range(bits):
        n += (v >> b) != 0
    return n


def _quantize_rows(bits: np.ndarray, config: BFPConfig, width: int, rounding: int,
                   noise: np.ndarray | None):
    """Quantize rows of ``G`` float32 bit patterns; the datapath of the hardware, vectorised."""
    mm, r, m = config.max_mantissa, config.noise_bits, width
    b = bits.astype(np.int64)
    sign = (b >> 31) & 1
    eb = (b >> 23) & 0xFF
    frac = b & 0x7FFFFF
    special = eb == 255
    nan_g = (special & (frac != 0)).any(axis=1)
    inf_g = (special & (frac == 0)).any(axis=1)
    # Shared exponent from the largest magnitude (IEEE magnitudes order like their bit patterns).
    mag_bits = np.where(special, 0, b & 0x7FFF_FFFF)
    big = mag_bits.max(axis=1, initial=0)
    big_eb, big_frac = big >> 23, big & 0x7FFFFF
    exp = np.where(big_eb != 0, big_eb - 127,
                   np.where(big_frac != 0, _bit_length(big_frac, 23) - 1 - 149, E_ZERO))
    # Align: q * 2**r = ext >> k, with ext = sig * 2**(mm - 1 + r).
    sig = np.where(eb != 0, frac | (1 << 23), frac)
    e_lsb = np.where(eb != 0, eb - 150, -149)
    ext_bits = 24 + mm - 1 + r
    ext = sig << (mm - 1 + r)
    k = np.clip(exp[:, None] - e_lsb + (mm - m), 0, ext_bits)
    shifted = ext >> k
    sticky_low = (ext & ((np.int64(1) << k) - 1)) != 0
    integer = shifted >> r
    fraction = shifted & ((1 << r) - 1)
    if rounding == ROUND_NEAREST:
        guard = (fraction >> (r - 1)) & 1
        sticky = ((fraction & ((1 << (r - 1)) - 1)) != 0) | sticky_low
        up = guard & (sticky | (integer & 1))
    elif rounding == ROUND_STOCHASTIC:
        up = (fraction + noise) >> r
    else:
        up = np.zeros_like(integer)
    mag = np.minimum(integer + up, (1 << m) - 1)
    bad = nan_g | inf_g
    mag[bad] = 0
    sign[bad] = 0
    exp = np.where(bad, E_ZERO, exp)
    return exp, sign.astype(np.uint8), mag, nan_g, inf_g


def _as_bits(values) -> np.ndarray:
    a = np.asarray(values)
    if a.dtype == np.float32:
        return a.view(np.uint32)
    if a.dtype == np.uint32:
        return a
    raise TypeError(f"values must be a float32 (or uint32 bit-pattern) array, not {a.dtype}")


def quantize_group(values_f32, config: BFPConfig, width: int, rounding: int = ROUND_NEAREST,
                   noise=None):
    """Quantize one group: ``(exp, sign, mag, invalid, overflow)``.

    ``values_f32``: ``(group_size,)`` float32 (or their uint32 bit patterns). ``noise``: the
    ``(group_size,)`` LFSR noise, required for :data:`ROUND_STOCHASTIC`, ignored otherwise.
    """
    width = _check_width(width, config)
    rounding = _check_rounding(rounding)
    bits = _as_bits(values_f32)
    if bits.shape != (config.group_size,):
        raise ValueError(f"values must have shape ({config.group_size},), not {bits.shape}")
    if rounding == ROUND_STOCHASTIC:
        if noise is None:
            raise ValueError("stochastic rounding needs noise (LFSR.noise())")
        noise = np.asarray(noise, dtype=np.int64).reshape(1, -1)
    exp, sign, mag, inv, ovf = _quantize_rows(bits.reshape(1, -1), config, width, rounding, noise)
    return int(exp[0]), sign[0], mag[0], bool(inv[0]), bool(ovf[0])


def quantize(x, config: BFPConfig, *, width: int, axis: int = -1,
             rounding: int = ROUND_NEAREST, lfsr: LFSR | None = None) -> BFPGroups:
    """Quantize a float32 tensor into groups of ``group_size`` along ``axis``.

    The axis is zero-padded (``+0.0``) to a multiple of ``group_size``. Groups are converted in
    C order of the other axes with the grouping axis innermost (the order a stream of groups
    reaches the hardware). When ``lfsr`` is given it is advanced once per group in every mode
    (as the hardware does); when it is ``None`` and the mode is stochastic a fresh
    :class:`LFSR` (the state after reset) is used.
    """
    width = _check_width(width, config)
    rounding = _check_rounding(rounding)
    a = np.asarray(x)
    if a.dtype != np.float32:
        raise TypeError(f"x must be a float32 array, not {a.dtype}")
    if a.ndim == 0:
        raise ValueError("x must have at least one dimension")
    G = config.group_size
    a = np.moveaxis(a, axis, -1)
    length = a.shape[-1]
    padded = -(-length // G) * G
    if padded != length:
        a = np.concatenate([a, np.zeros(a.shape[:-1] + (padded - length,), np.float32)], -1)
    rows = np.ascontiguousarray(a).view(np.uint32).reshape(-1, G)
    noise = None
    if lfsr is None and rounding == ROUND_STOCHASTIC:
        lfsr = LFSR(config)
    if lfsr is not None:
        if lfsr.config.group_size != G or lfsr.config.noise_bits != config.noise_bits:
            raise ValueError("lfsr was made for a different group_size/noise_bits")
        noise = lfsr.noise_block(rows.shape[0])
    exp, sign, mag, inv, ovf = _quantize_rows(rows, config, width, rounding, noise)
    gshape = a.shape[:-1] + (padded // G,)
    return BFPGroups(
        exp=np.moveaxis(exp.reshape(gshape), -1, axis),
        sign=np.moveaxis(sign.reshape(a.shape), -1, axis),
        mag=np.moveaxis(mag.reshape(a.shape), -1, axis),
        invalid=np.moveaxis(inv.reshape(gshape), -1, axis),
        overflow=np.moveaxis(ovf.reshape(gshape), -1, axis),
    )


def dequantize_group_bits(exp, sign, mag, width: int) -> np.ndarray:
    """FP32 bit patterns (uint32) of ``(-1)**sign * mag * 2**(exp - (width - 1))``.

    Elementwise over broadcast arrays; round to nearest even below the normal range (exact
    subnormals), ±Inf at or past ``2**128`` -- :func:`sim.model.fp32_round.round_to_fp32`
    vectorised.
    """
    e = np.asarray(exp, dtype=np.int64) - (width - 1)
    s = np.asarray(sign, dtype=np.int64) & 1
    M = np.asarray(mag, dtype=np.int64)
    e, s, M = np.broadcast_arrays(e, s, M)
    if (M < 0).any() or (M >= 1 << 32).any():
        raise ValueError("mag must be in [0, 2**32)")
    lead = e + _bit_length(M, 32) - 1
    lsb = np.maximum(lead - 23, -149)
    shift = lsb - e
    left = np.clip(-shift, 0, 63)
    right = np.clip(shift, 0, 34)
    q = np.where(shift <= 0, M << left, M >> right)
    guard = np.where(shift <= 0, 0, (M >> np.maximum(right - 1, 0)) & 1)
    rest = np.where(shift <= 1, False, (M & ((np.int64(1) << np.maximum(right - 1, 0)) - 1)) != 0)
    q = q + (guard & (rest | (q & 1)))
    carry = (q >> 24) != 0
    q = np.where(carry, q >> 1, q)
    lsb = lsb + carry
    biased = np.where((q >> 23) != 0, lsb + 150, 0)
    out = np.where(biased >= 255, 0x7F800000, (np.clip(biased, 0, 254) << 23) | (q & 0x7FFFFF))
    out = np.where(M == 0, 0, out) | (s << 31)
    return out.astype(np.uint32)


def dequantize(groups: BFPGroups, config: BFPConfig, *, width: int, axis: int = -1) -> np.ndarray:
    """float32 values of ``groups`` (padded shape), exactly as :class:`hdl.bfp.BFPToFP32`."""
    width = _check_width(width, config)
    exp = np.repeat(np.asarray(groups.exp), config.group_size, axis=axis)
    return dequantize_group_bits(exp, groups.sign, groups.mag, width).view(np.float32)


# --- Stream payloads (offsets from hdl.bfp's own Amaranth layouts) ---------------------------
# The field tables below are read from the hardware's layouts (imported on first use, so the
# arithmetic above needs no Amaranth); the packers place every field where those layouts do.

@functools.cache
def _stream_layouts(config: BFPConfig):
    from hdl.bfp.converter import bfp_stream_layout, fp32_stream_layout
    from hdl.bfp.to_fp32 import fp32_out_layout
    return fp32_stream_layout(config), bfp_stream_layout(config), fp32_out_layout(config)


def _at(field, base: int = 0) -> tuple[int, int]:
    return base + field.offset, field.width


def _sub(field):
    """The layout of a field whose shape is a layout or a ``data.Struct``."""
    from amaranth.lib import data
    return data.Layout.cast(field.shape)


@functools.cache
def fp32_stream_fields(config: BFPConfig) -> dict:
    """``{field: (offset, width)}`` of the converter's input payload
    (:func:`hdl.bfp.converter.fp32_stream_layout`)."""
    return {name: _at(f) for name, f in _stream_layouts(config)[0]}


@functools.cache
def bfp_stream_fields(config: BFPConfig) -> dict:
    """``{field: (offset, width)}`` of a BFP group stream payload (converter out, inverse in;
    :func:`hdl.bfp.converter.bfp_stream_layout`), with the group and the flags flattened:

    ``exp`` | ``elems`` (``group_size`` x (``mag`` | ``sign``)) | ``width`` | ``rounding`` |
    ``invalid`` | ``overflow``.
    """
    layout = _stream_layouts(config)[1]
    group, flags = layout["group"], layout["flags"]
    return {"exp": _at(_sub(group)["exp"], group.offset),
            "elems": _at(_sub(group)["elems"], group.offset),
            "width": _at(layout["width"]), "rounding": _at(layout["rounding"]),
            "invalid": _at(_sub(flags)["invalid"], flags.offset),
            "overflow": _at(_sub(flags)["overflow"], flags.offset)}


@functools.cache
def _elem_fields(config: BFPConfig) -> tuple[int, dict]:
    """Stride of one element in ``elems`` and its ``{mag, sign: (offset, width)}``."""
    elems = _sub(_sub(_stream_layouts(config)[1]["group"])["elems"])
    elem = _sub(elems[0])
    return elem.size, {name: _at(f) for name, f in elem}


@functools.cache
def fp32_out_fields(config: BFPConfig) -> dict:
    """``{field: (offset, width)}`` of the inverse's output payload
    (:func:`hdl.bfp.to_fp32.fp32_out_layout`), flags flattened."""
    layout = _stream_layouts(config)[2]
    flags = layout["flags"]
    return {"data": _at(layout["data"]),
            "invalid": _at(_sub(flags)["invalid"], flags.offset),
            "overflow": _at(_sub(flags)["overflow"], flags.offset)}


def _get(word: int, field: tuple[int, int]) -> int:
    return (word >> field[0]) & ((1 << field[1]) - 1)


def _put(value, field: tuple[int, int]) -> int:
    return (int(value) & ((1 << field[1]) - 1)) << field[0]


def _data_words(word: int, config: BFPConfig, data: tuple[int, int]) -> np.ndarray:
    """The ``group_size`` FP32 words of a ``data`` field (element 0 in the low bits)."""
    w = _get(word, data)
    return np.array([(w >> (32 * j)) & _M32 for j in range(config.group_size)], np.uint32)


def pack_fp32_group(values, config: BFPConfig, width: int, rounding: int) -> int:
    """Converter input payload from ``(group_size,)`` float32 values (or uint32 bit patterns)."""
    f = fp32_stream_fields(config)
    data = 0
    for j, v in enumerate(_as_bits(values).reshape(-1)):
        data |= int(v) << (32 * j)
    return _put(data, f["data"]) | _put(width, f["width"]) | _put(rounding, f["rounding"])


def unpack_fp32_group(word: int, config: BFPConfig, *, with_flags: bool = False):
    """uint32 bit patterns of an FP32 group payload (converter input or inverse output),
    ``+ (invalid, overflow)`` when ``with_flags`` (the inverse's output)."""
    if not with_flags:
        return _data_words(word, config, fp32_stream_fields(config)["data"])
    f = fp32_out_fields(config)
    return (_data_words(word, config, f["data"]), bool(_get(word, f["invalid"])),
            bool(_get(word, f["overflow"])))


def pack_bfp_group(exp: int, sign, mag, config: BFPConfig, *, width: int, rounding: int,
                   invalid: bool = False, overflow: bool = False) -> int:
    f = bfp_stream_fields(config)
    stride, ef = _elem_fields(config)
    word = _put(exp, f["exp"])
    for j, (s, M) in enumerate(zip(np.asarray(sign).reshape(-1), np.asarray(mag).reshape(-1))):
        word |= (_put(M, ef["mag"]) | _put(s, ef["sign"])) << (f["elems"][0] + j * stride)
    return (word | _put(width, f["width"]) | _put(rounding, f["rounding"])
            | _put(bool(invalid), f["invalid"]) | _put(bool(overflow), f["overflow"]))


def unpack_bfp_group(word: int, config: BFPConfig) -> dict:
    """Fields of a BFP group payload: exp (signed), sign, mag (arrays), width, rounding, flags."""
    f = bfp_stream_fields(config)
    stride, ef = _elem_fields(config)
    exp = _get(word, f["exp"])
    if exp >> (f["exp"][1] - 1):
        exp -= 1 << f["exp"][1]
    elems = [word >> (f["elems"][0] + j * stride) for j in range(config.group_size)]
    return {
        "exp": exp,
        "sign": np.array([_get(e, ef["sign"]) for e in elems], np.uint8),
        "mag": np.array([_get(e, ef["mag"]) for e in elems], np.int64),
        "width": _get(word, f["width"]),
        "rounding": _get(word, f["rounding"]),
        "invalid": bool(_get(word, f["invalid"])),
        "overflow": bool(_get(word, f["overflow"])),
    }


# --- Stream-level models of the two blocks ------------------------------------------------

class BFPConverterModel:
    """Transaction-level model of :class:`hdl.bfp.BFPConverter`.

    :meth:`accept` takes an input payload (an int, as on the wire) and returns the output
    payload the hardware produces for it; :attr:`flags` is the sticky ``(invalid, overflow)``
    status once that payload has been delivered. :meth:`reset` mirrors the ``rst`` input.
    """

    def __init__(self, config: BFPConfig):
        self.config = config
        self.lfsr = LFSR(config)
        self.reset()

    def reset(self) -> None:
        self.lfsr.reset()
        self.flags = (False, False)

    def clear_flags(self) -> None:
        self.flags = (False, False)

    def accept(self, word: int) -> int:
        f = fp32_stream_fields(self.config)
        bits = unpack_fp32_group(word, self.config)
        width = decode_width(_get(word, f["width"]), self.config)
        rounding = decode_rounding(_get(word, f["rounding"]))
        noise = self.lfsr.noise()
        exp, sign, mag, inv, ovf = quantize_group(bits, self.config, width, rounding, noise)
        self.flags = (self.flags[0] or inv, self.flags[1] or ovf)
        return pack_bfp_group(exp, sign, mag, self.config, width=width, rounding=rounding,
                              invalid=inv, overflow=ovf)


class BFPToFP32Model:
    """Transaction-level model of :class:`hdl.bfp.BFPToFP32`: BFP payload -> FP32 payload."""

    def __init__(self, config: BFPConfig):
        self.config = config

    def accept(self, word: int) -> int:
        g = unpack_bfp_group(word, self.config)
        width = decode_width(g["width"], self.config)
        bits = dequantize_group_bits(g["exp"], g["sign"], g["mag"], width)
        data = 0
        for j, v in enumerate(bits):
            data |= int(v) << (32 * j)
        f = fp32_out_fields(self.config)
        return (_put(data, f["data"]) | _put(g["invalid"], f["invalid"])
                | _put(g["overflow"], f["overflow"]))


# --- Stimulus shared by the test tiers ----------------------------------------------------

def random_fp32_groups(rng: np.random.Generator, n: int, G: int, *,
                       special_prob: float = 0.0) -> np.ndarray:
    """``(n, G)`` float32 groups spanning many exponents, cycling through four kinds: raw
    random sign/exponent/mantissa bits (exponent field 0..254, so subnormals too), exponents in a
    window of 10 binades (most elements keep significant bits), normal-distributed values at a
    random scale 2**-120..2**120, and values at the subnormal/normal boundary. With
    ``special_prob`` a group gets a NaN or ±Inf in a random lane."""
    out = np.empty((n, G), np.uint32)
    for i in range(n):
        kind = i % 4
        sign = rng.integers(0, 2, G) << 31
        frac = rng.integers(0, 1 << 23, G)
        if kind == 0:
            bits = sign | (rng.integers(0, 255, G) << 23) | frac
        elif kind == 1:
            base = int(rng.integers(1, 245))
            bits = sign | (rng.integers(base, base + 10, G) << 23) | frac
        elif kind == 2:
            scale = 2.0 ** int(rng.integers(-120, 120))
            bits = (rng.standard_normal(G) * scale).astype(np.float32).view(np.uint32)
        else:
            bits = sign | (rng.integers(0, 3, G) << 23) | frac
        bits = np.asarray(bits, np.int64)
        if special_prob and rng.random() < special_prob:
            bits[rng.integers(G)] = rng.choice([0x7FC00000, 0xFFC00001, 0x7F800000, 0xFF800000])
        out[i] = bits.astype(np.uint32)
    return out.view(np.float32)


def edge_case_groups(config: BFPConfig, width: int) -> dict:
    """Named edge-case groups for width ``width``: ``{name: (k, group_size) float32}``.

    Each case is a list whose first value sets the shared exponent. A list that fits a group
    is repeated cyclically to fill it; a longer one becomes several groups, each starting with
    the first value followed by the next ``group_size - 1`` values.
    """
    G = config.group_size
    m = width
    fmax = float(np.finfo(np.float32).max)
    tiny = 2.0 ** -149
    lsb0 = 2.0 ** -(m - 1)            # the LSB when E = 0
    cases = {
        "all_zero": [0.0],
        "negative_zero": [-0.0, 0.0, -0.0, 0.0],
        "huge_with_tiny": [3.0e38, 1.0, -1.0e-30, tiny, -2.0 ** -126, 12345.0],
        "largest_normal": [fmax, -fmax, 1.0, -2.0 ** 127],
        "largest_exponent_rounds_up": [-(2.0 ** 128 - 2.0 ** 104), 2.0 ** 127 * 1.5],
        "smallest_normal": [2.0 ** -126, -2.0 ** -126 * 1.5, 2.0 ** -127, tiny],
        "smallest_subnormal": [tiny, 0.0, -tiny, 0.0],
        "subnormals": [2.0 ** -130 * 1.75, -2.0 ** -140, 2.0 ** -145 * 1.25, -tiny, 3 * tiny],
        "nan": [1.0, float("nan"), -2.0, 0.5],
        "nan_negative_payload": [np.uint32(0xFFC12345).view(np.float32), 1.0],
        "positive_inf": [float("inf"), 1.0, 2.0, 3.0],
        "negative_inf": [1.0, -2.0, float("-inf"), 0.0],
        "nan_and_inf": [float("inf"), float("nan"), 1.0, -1.0],
        # E = 0, q = value / lsb0: exact ties k + 1/2 for even and odd k
        "ties": [1.0, 0.5 * lsb0, 1.5 * lsb0, -2.5 * lsb0, 3.5 * lsb0, 1.0 + 0.5 * lsb0,
                 -(1.0 + 1.5 * lsb0), 6.5 * lsb0],
        "near_ties": [1.0, 0.5 * lsb0 + 2.0 ** -30, 1.5 * lsb0 - 2.0 ** -30,
                      2.5 * lsb0 + 2.0 ** -30],
        # ties to even k plus one bit just below the noise window (or further down): RNE
        # must see it as sticky and round up
        "ties_plus_sticky": [1.0] + [(k + 0.5 + 2.0 ** -(config.noise_bits + j)) * lsb0
                                     for k, j in ((0, 1), (2, 2), (4, 3), (6, 1), (2, 12))],
        # q = 2**m - 1/2 (a tie to the even 2**m) and 2**m - 1/4: nearest saturates
        "saturation": [2.0 - 0.5 * lsb0, -(2.0 - 0.25 * lsb0), 1.0, 2.0 - lsb0],
        # E = -130 from a subnormal max with q = 2**m - 1/2: rounds to 2**m, saturates
        "saturation_subnormal": [(2 ** (m + 1) - 1) * 2.0 ** (-130 - m), -tiny, 2.0 ** -131],
        "one_value": [-1.2345e-7],
        "powers_of_two": [2.0 ** e for e in (10, 3, 0, -1, -5, -9, -20, -60)],
    }
    out = {}
    for name, vals in cases.items():
        arr = np.array(vals, dtype=np.float32)
        if len(arr) <= G:
            out[name] = np.resize(arr, G)[None, :]
        else:
            rest = arr[1:]
            chunks = [np.concatenate([arr[:1], rest[i:i + G - 1]]) for i in
                      range(0, len(rest), max(G - 1, 1))] if G > 1 else [arr[i:i + 1] for i in
                                                                         range(len(arr))]
            out[name] = np.stack([np.resize(c, G) for c in chunks])
    return out
