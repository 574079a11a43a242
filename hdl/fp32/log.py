"""Pipelined FP32 natural logarithm, one operation per cycle (for the cross-entropy loss).

Table + polynomial, integer datapath (``t = config.table_bits``, ``N = 2**t``; constants from
:func:`hdl.fp32.log_config.log_constants`, computed exactly). The golden model
:class:`sim.model.fp32_log.FP32Log` performs the same integer steps (its docstring explains the
algorithm and why results near ``x = 1`` keep full relative accuracy):

======  =========================================================================  ==========
stage   operation                                                                  register
======  =========================================================================  ==========
0       unpack, normalise subnormals: ``x = M * 2**(E-23)``, ``M`` in               ``m, e``
        ``[2**23, 2**24)``; specials (NaN, negative, zero, +Inf)
1       ``j = (frac(M) + 2**(22-t)) >> (23-t)`` (nearest table point, ``0..N``)     ``j``
2       ``R = M * INV[j] - 2**RF`` (``r = m/c_j - 1``, exact); ``LOGT[j]``          ``red, logt``
3..6    Horner ``h = H[i] + (R*h >> RF)``, ``i = 1..4`` (``w ~ log1p(r)/r``)         ``h1..h3, w``
7       ``P = R * w`` (``log1p(r)``); ``A = E * LN2 + LOGT[j]``                     ``prod, big``
8       ``S = A + (P >> (RF+W-F))``, sticky = dropped bits of ``P``; sign-magnitude   ``mag``
9       rounding to FP32 (``2**-F``, :mod:`hdl.fp32.round`): leading-zero count       ``lz``
10      normalise, exponent plan, subnormal shift, guard and sticky                ``frame``
11      nearest-even increment and packing; special override                       ``out``
======  =========================================================================  ==========

Measured accuracy against float64 ``log``: see ``docs/fp32_log.md`` (max 0.504 ulp, default).
"""
from __future__ import annotations

from fractions import Fraction

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, signed, unsigned

from ..registry import Block
from .div import StallPipeline
from .log_config import FP32LogConfig, log_constants
from .round import (count_leading_zeros, round_finish, round_plan_lz, round_plan_pre,
                    round_prepare, shift_left)
from .unit import FP32StreamUnit
from .unpack import QNAN, sig_leading_zeros, special_top, special_word, unpack_fp32

__all__ = ["FP32Log", "log_register_widths"]

NEG_INF = 0xFF800000
POS_INF = 0x7F800000


def log_register_widths(t: int) -> dict:
    """``{register: (bits, signed)}`` of the log datapath for ``table_bits = t`` (the golden
    model's intermediates must fit; ``tests/test_fp32_log.py`` checks it over many inputs)."""
    c = log_constants(t)
    # |R| <= max over j of |M * INV[j] - 2**RF| with M/2**23 in [c_j - 1/(2N), c_j + 1/(2N)]
    bound = 0
    for j in range(c.N + 1):
        for mm in (Fraction(2 * c.N + 2 * j - 1, 2 * c.N), Fraction(2 * c.N + 2 * j + 1, 2 * c.N)):
            mm = min(max(mm, Fraction(1)), Fraction(2))
            bound = max(bound, abs(mm * c.INV[j] * (1 << 23) - (1 << c.RF)))
    red = int(bound).bit_length() + 1
    return {"m": (24, False), "e": (9, True), "j": (t + 1, False), "red": (red, True),
            "h": (c.W + 2, True), "w": (c.W + 2, True), "prod": (red + c.W + 2, True),
            "logt": (c.F + 1, False), "big": (c.F + 9, True), "s": (c.F + 10, True)}


def _pad(table, size: int) -> list:
    """``table`` extended to ``size`` entries by repeating its last entry."""
    table = list(table)
    return table + [table[-1]] * (size - len(table))


class FP32Log(FP32StreamUnit):
    """FP32 natural logarithm, fully pipelined, bit-exact with its golden model.

    Input and output are IEEE 754 binary32. The result is the round-to-nearest-even FP32 value
    of a fixed-point approximation accurate to about ``2**-30`` relative (measured max error
    0.504 ulp against float64 at the default configuration; see ``docs/fp32_log.md``).
    Subnormal inputs are exact (normalised). Specials: NaN -> ``0x7FC00000``; ``±0`` ->
    ``-Inf``; negative non-zero (``-Inf`` included) -> ``0x7FC00000``; ``+Inf`` -> ``+Inf``;
    ``log(1) = +0``.

    Parameters
    ----------
    config : FP32LogConfig
        ``table_bits`` = ``t``: ``2**t + 1`` reciprocal / log table entries.

    Attributes
    ----------
    latency : int
        ``config.latency`` (12) cycles from an accepted operand to its result (no stall).
        One operation per cycle.

    Members
    -------
    i : In(stream.Signature(FP32))
        Arguments ``a``.
    o : Out(stream.Signature(FP32))
        Results ``log(a)``, in input order. Whole-pipeline stall while ``o.valid & ~o.ready``;
        ``i.ready = ~o.valid | o.ready``.
    """

    CONFIG = FP32LogConfig

    def elaborate(self, platform):
        m = Module()
        t = self.config.table_bits
        c = log_constants(t)
        w = log_register_widths(t)

        en = self.stall_enable(m)
        p = StallPipeline(m, en)

        # --- stage 0: unpack, normalise, specials -------------------------------------------
        valid = p.valid(self.i.valid, "s0_valid")
        mant, e, special, spec_val = log_unpack(m, p, self.i.payload.as_value(), w)

        def carry(stage, *regs):
            return [p.reg(r, f"s{stage}_{r.name.split('_', 1)[1]}") for r in regs]

        # --- stage 1: table index -------------------------------------------------------------
        valid = p.valid(valid, "s1_valid")
        j = log_index(p, mant, t, w)
        mant, e, special, spec_val = carry(1, mant, e, special, spec_val)

        # --- stage 2: reduced argument, log table ---------------------------------------------
        inv, logt_now = log_lookups(m, c, w, j, name="s2")
        valid = p.valid(valid, "s2_valid")
        red = p.reg(mant * inv - (1 << c.RF), "s2_red", signed(w["red"][0]))
        logt = p.reg(logt_now, "s2_logt")
        e, special, spec_val = carry(2, e, special, spec_val)

        # --- stages 3..6: Horner, w ~ log1p(r) / r ----------------------------------------------
        h = Const(c.H[0], signed(w["h"][0]))
        for i, coef in enumerate(c.H[1:], start=1):
            stage = 2 + i
            valid = p.valid(valid, f"s{stage}_valid")
            name = f"s{stage}_h{i}" if i < 4 else f"s{stage}_w"
            h_new = p.reg(coef + ((red * h) >> c.RF), name, signed(w["h"][0]))
            red, logt, e, special, spec_val = carry(stage, red, logt, e, special, spec_val)
            h = h_new

        # --- stage 7: log1p(r) = r * w, table part ----------------------------------------------
        valid = p.valid(valid, "s7_valid")
        prod = p.reg(red * h, "s7_prod", signed(w["prod"][0]))
        big = p.reg(e * c.LN2 + logt, "s7_big", signed(w["big"][0]))
        special, spec_val = carry(7, special, spec_val)

        # --- stages 8..11: sum, rounding, specials ---------------------------------------------
        out_valid, out = log_finish(m, p, valid, prod, big, special, spec_val, c, w)
        m.d.comb += [self.o.valid.eq(out_valid), self.o.payload.eq(out)]
        return m


def _log_specials(m, p, u):
    """Stage-0 registers of ``p`` for the special operands of the unpacked ``u``: whether
    the result is special and its word (compressed by ``special_top``)."""
    special_val = Signal(32, name="s0_special_val_now")
    m.d.comb += special_val.eq(Mux(u.nan, QNAN, Mux(u.zero, NEG_INF,
                                                    Mux(u.sign, QNAN, POS_INF))))
    special = p.reg(u.nan | u.inf | u.zero | u.sign, "s0_special")
    spec_val = p.reg(special_top(special_val), "s0_special_val")
    return special, spec_val


def log_unpack(m, p, a, w):
    """Stage 0 of the log datapath: unpack and normalise ``a`` into the registers of ``p``
    (a :class:`~hdl.fp32.div.StallPipeline`): ``(mant, e, special, spec_val)``."""
    u = unpack_fp32(m, a, name="in", normalize=True)
    mant = p.reg(u.sig, "s0_m", unsigned(24))
    e = p.reg(u.exp + 23, "s0_e", signed(w["e"][0]))
    return (mant, e, *_log_specials(m, p, u))


def _index_of(mant, t):
    """The table index ``j`` of the normalised significand ``mant`` (24 bits)."""
    return (mant[:23] + (1 << (22 - t))) >> (23 - t)


def log_index(p, mant, t, w):
    """Stage 1: the table index ``j`` of ``mant`` (a register of ``p``)."""
    return p.reg(_index_of(mant, t), "s1_j", unsigned(w["j"][0]))


def log_front_split(m, p0, p1, a, t, w):
    """Stages 0 and 1 of the log datapath with the normalising shift cut in two: stage 0
    (registers of ``p0``) holds the raw significand and its leading-zero count, stage 1
    (``p1``) shifts it and takes the table index from the shifted value, so no stage has the
    count, the shift and the index's adder in a row. The same registers' values as
    :func:`log_unpack` then :func:`log_index`: ``(mant, e, special, spec_val, j)`` of stage 1.
    """
    u = unpack_fp32(m, a, name="in")
    raw = p0.reg(u.sig, "s0_raw", unsigned(24))
    lz = p0.reg(sig_leading_zeros(m, u, name="in_sig"), "s0_lz")
    e_raw = p0.reg(u.exp_raw + 23, "s0_e_raw", signed(w["e"][0]))
    special0, spec_val0 = _log_specials(m, p0, u)
    mant_now = Signal(24, name="s1_m_now")
    m.d.comb += mant_now.eq(shift_left(raw, lz))
    return (p1.reg(mant_now, "s1_m"), p1.reg(e_raw - lz, "s1_e", signed(w["e"][0])),
            p1.reg(special0, "s1_special"), p1.reg(spec_val0, "s1_special_val"),
            p1.reg(_index_of(mant_now, t), "s1_j", unsigned(w["j"][0])))


def log_lookups(m, c, w, j, *, name: str):
    """The reciprocal ``INV[j]`` and ``LOGT[j]`` of the table index ``j`` (combinational)."""
    inv = Signal(c.K + 1, name=f"{name}_inv_lookup")
    logt_now = Signal(w["logt"][0], name=f"{name}_logt_lookup")
    m.d.comb += [
        # j <= N always; the tables are padded to the index's full 2**(t+1) range (with
        # the last entry) so the lookup is a complete case (Verilator CASEINCOMPLETE).
        inv.eq(Array(Const(v, c.K + 1) for v in _pad(c.INV, 1 << len(j)))[j]),
        logt_now.eq(Array(Const(v, w["logt"][0]) for v in _pad(c.LOGT, 1 << len(j)))[j]),
    ]
    return inv, logt_now


def log_finish(m, p, valid, prod, big, special, spec_val, c, w):
    """Stages 8..11 of the log datapath (registers of ``p``) from ``P = R * w`` (``prod``)
    and ``A = E * LN2 + LOGT[j]`` (``big``), both valid with ``valid``: the sum, its rounding
    to FP32 and the special override. Returns ``(out_valid, out)`` (four stages later)."""
    def carry(stage, *regs):
        return [p.reg(r, f"s{stage}_{r.name.split('_', 1)[1]}") for r in regs]

    # --- stage 8: sum, sign-magnitude -------------------------------------------------------
    drop = c.RF + c.W - c.F
    s = Signal(signed(w["s"][0]), name="s8_s_now")
    sticky_now = Signal(name="s8_sticky_now")
    neg_now = Signal(name="s8_neg_now")
    m.d.comb += [
        s.eq(big + (prod >> drop)),
        sticky_now.eq(prod[:drop].any()),
        neg_now.eq(s < 0),
    ]
    valid = p.valid(valid, "s8_valid")
    mag = p.reg(Mux(neg_now, -s - sticky_now, s), "s8_mag", unsigned(w["s"][0] - 1))
    neg = p.reg(neg_now, "s8_neg")
    sticky = p.reg(sticky_now, "s8_sticky")
    special, spec_val = carry(8, special, spec_val)

    # --- stage 9: leading-zero count -----------------------------------------------------
    # (the rounding of round_to_fp32 in three register steps, hdl.fp32.round: count,
    # normalise and prepare, finish; the same bits)
    width = len(mag)
    pre = round_plan_pre(m, exp=Const(-c.F, signed(8)), width=width, name="rnd")
    lz_now = count_leading_zeros(m, mag, name="rnd")
    valid = p.valid(valid, "s9_valid")
    lz = p.reg(lz_now, "s9_lz")
    mag, neg, sticky, special, spec_val = carry(9, mag, neg, sticky, special, spec_val)

    # --- stage 10: normalise, plan, prepare (subnormal shift, guard and sticky) -----------
    norm = Signal(width, name="s10_norm_now")
    m.d.comb += norm.eq(shift_left(mag, lz, width))
    plan = round_plan_lz(m, pre=pre, lz=lz, width=width, name="rnd")
    r = round_prepare(m, norm=norm, plan=plan, sticky=sticky, name="rnd")
    valid = p.valid(valid, "s10_valid")
    frame = p.reg(r.frame, "s10_frame")
    base = p.reg(r.base, "s10_base")
    ovf = p.reg(r.ovf, "s10_ovf")
    zero = p.reg(lz == width, "s10_zero")
    neg, special, spec_val = carry(10, neg, special, spec_val)

    # --- stage 11: nearest-even increment and packing, specials ----------------------------
    rounded = round_finish(m, sign=neg, frame=frame, base=base, ovf=ovf, name="rnd")
    out_valid = p.valid(valid, "out_valid")
    out = p.reg(Mux(special, special_word(spec_val),
                    Mux(zero, Cat(Const(0, 31), neg), rounded)), "out_r", unsigned(32))
    return out_valid, out


def _params(preset: str) -> dict:
    cfg = FP32LogConfig.preset(preset)
    c = log_constants(cfg.table_bits)
    return {**cfg.to_dict(), "latency": cfg.latency, "in_fields": [["a", 32]],
            "out_fields": [["r", 32]], "ops_per_cycle": 1, "frac_bits": c.F}


TESSERA_BLOCKS = [
    Block("fp32_log", build=lambda preset: FP32Log(config=FP32LogConfig.preset(preset)),
          params=_params),
]
