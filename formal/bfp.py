"""Proof 2: the FP32 -> BFP converter (``hdl.bfp.BFPConverter``, docs/bfp.md) computes the
shared exponent, aligns and rounds (nearest-even and truncation) exactly as docs/bfp.md defines.

Small groups (``group_size`` 2) and small mantissas (``max_mantissa`` 4: widths 2 and 4) keep
the model small; the FP32 inputs are unrestricted (any sign, exponent field and fraction:
zeros, subnormals, normals, NaN, Inf), the width code is any value (decoded as docs/bfp.md
says), the rounding mode any but stochastic, the input stream free (with the stream rule
assumed) and the output backpressured at random.

The reference is computed inside the wrapper from the format's definition, by another route
than the DUT (which takes the maximum exponent *field*, the bit length of an OR of fractions
and a window with guard and sticky bits): element ``x_j = sig_j * 2^(t_j - 150)`` with
``t_j = max(exp_j, 1)``; its ``floor(log2 |x_j|) = L_j + t_j - 151`` where ``L_j`` is the bit
length of ``sig_j``; ``E`` = the largest of those (``-150`` for an all-zero group);
``q_j = (sig_j << m) / 2^(E + 151 + m - ... )`` written as ``(sig_j << m) >> r_j`` with
``r_j = max_key - t_j``; the remainder is compared with half an LSB (ties to even), and
``2^m`` saturates to ``2^m - 1``.

One transfer, chosen by an ``AnyConst`` index among the first four, is checked: its expected
output is computed when it enters and compared with the output of the same index (so groups
before and after it are free, and pipeline interference between groups is covered).
"""
from __future__ import annotations

from amaranth.asserts import AnyConst
from amaranth.hdl import Assert, Assume, Cat, Cover, Module, Mux, Signal, signed

from hdl.bfp.converter import E_ZERO, BFPConverter, Rounding
from hdl.config import BFPConfig

from .common import FormalWrapper, Proof, free_inputs, stream_rule

__all__ = ["BFPRounding", "PROOFS"]


def _bit_length(m: Module, value, *, name: str):
    """Bit length of ``value`` (0 for 0) as a priority chain (the highest set bit wins)."""
    n = Signal(range(len(value) + 1), name=name)
    m.d.comb += n.eq(0)
    for b in range(len(value)):
        with m.If(value[b]):
            m.d.comb += n.eq(b + 1)
    return n


class BFPRounding(FormalWrapper):
    """Wrapper of :class:`BFPConverter`: the tracked group's output against the reference."""

    def __init__(self, config: BFPConfig):
        self.config = self._check_config(config, BFPConfig)
        super().__init__(BFPConverter(config=config))

    def properties(self, m: Module):
        cfg, dut = self.config, self.dut
        G, mm = cfg.group_size, cfg.max_mantissa
        free_inputs(m, dut)
        stream_rule(m, dut.i, name="i", assume=True, cover=False)
        stream_rule(m, dut.o, name="o")
        inp = dut.i.payload
        m.d.comb += Assume(inp.rounding != Rounding.STOCHASTIC)

        # ---- reference of the group on the input ----------------------------------------------
        half = inp.width >> 1
        width = Signal(range(mm + 1), name="ref_width")
        m.d.comb += width.eq(Mux(half == 0, 2, Mux(half > mm // 2, mm, half << 1)))
        truncate = Signal(name="ref_truncate")
        m.d.comb += truncate.eq(inp.rounding != Rounding.NEAREST)
        keys, sigs, ts, nan, inf = [], [], [], [], []
        for j in range(G):
            w = inp.data[j]
            sig = Signal(24, name=f"ref_e{j}_sig")
            t = Signal(8, name=f"ref_e{j}_t")
            m.d.comb += [sig.eq(Cat(w.frac, w.exp != 0)), t.eq(Mux(w.exp == 0, 1, w.exp))]
            length = _bit_length(m, sig, name=f"ref_e{j}_len")
            key = Signal(9, name=f"ref_e{j}_key")        # floor(log2|x|) + 151, 0 for zero
            m.d.comb += key.eq(Mux(sig == 0, 0, length + t))
            keys.append(key)
            sigs.append(sig)
            ts.append(t)
            nan.append((w.exp == 0xFF) & (w.frac != 0))
            inf.append((w.exp == 0xFF) & (w.frac == 0))
        max_key = keys[0]
        for j, key in enumerate(keys[1:], 1):
            nxt = Signal(9, name=f"ref_max_key_{j}")
            m.d.comb += nxt.eq(Mux(key > max_key, key, max_key))
            max_key = nxt
        bad_nan = Signal(name="ref_nan")
        bad_inf = Signal(name="ref_inf")
        m.d.comb += [bad_nan.eq(Cat(*nan).any()), bad_inf.eq(Cat(*inf).any())]
        bad = bad_nan | bad_inf
        exp = Signal(signed(cfg.exp_bits), name="ref_exp")
        m.d.comb += exp.eq(Mux(bad | (max_key == 0), E_ZERO, max_key - 151))
        mags, signs, ties, sats = [], [], [], []
        for j in range(G):
            x = Signal(24 + mm, name=f"ref_e{j}_x")                # sig_j << m
            m.d.comb += x.eq(sigs[j] << width)
            r_raw = Signal(signed(10), name=f"ref_e{j}_r_raw")
            m.d.comb += r_raw.eq(max_key - ts[j])
            # r >= 24 + mm + 1 leaves x < half an LSB: every such r gives 0 (clamp to 31)
            r = Signal(5, name=f"ref_e{j}_r")
            m.d.comb += r.eq(Mux(r_raw > 31, 31, r_raw[:5]))
            integer = Signal(mm + 1, name=f"ref_e{j}_int")
            rem = Signal(32, name=f"ref_e{j}_rem")
            half_lsb = Signal(32, name=f"ref_e{j}_half")
            m.d.comb += [integer.eq(x >> r),
                         rem.eq(x - ((x >> r) << r)),
                         half_lsb.eq(Mux(r == 0, 0, (1 << r) >> 1))]
            tie = Signal(name=f"ref_e{j}_tie")
            up = Signal(name=f"ref_e{j}_up")
            m.d.comb += [
                tie.eq((r != 0) & (rem == half_lsb)),
                up.eq(~truncate & (r != 0) & ((rem > half_lsb) | (tie & integer[0]))),
            ]
            rounded = Signal(mm + 2, name=f"ref_e{j}_rounded")
            m.d.comb += rounded.eq(integer + up)
            sat = Signal(name=f"ref_e{j}_sat")
            m.d.comb += sat.eq(rounded == (1 << width))
            mag = Signal(mm, name=f"ref_e{j}_mag")
            m.d.comb += mag.eq(Mux(bad, 0, Mux(sat, rounded - 1, rounded)))
            mags.append(mag)
            signs.append(inp.data[j].sign & ~bad)
            ties.append(tie & ~bad)
            sats.append(sat & ~bad)

        # ---- track the k-th transfer ----------------------------------------------------------
        k = AnyConst(2)
        n_in = Signal(3, name="n_in")
        n_out = Signal(3, name="n_out")
        in_xfer = dut.i.valid & dut.i.ready
        out_xfer = dut.o.valid & dut.o.ready
        with m.If(in_xfer & (n_in != 7)):
            m.d.sync += n_in.eq(n_in + 1)
        with m.If(out_xfer & (n_out != 7)):
            m.d.sync += n_out.eq(n_out + 1)
        e_exp = Signal.like(exp, name="exp_exp")
        e_mag = [Signal(mm, name=f"exp_e{j}_mag") for j in range(G)]
        e_sign = [Signal(name=f"exp_e{j}_sign") for j in range(G)]
        e_width = Signal.like(width, name="exp_width")
        e_round = Signal(2, name="exp_rounding")
        e_nan = Signal(name="exp_nan")
        e_inf = Signal(name="exp_inf")
        e_tie = Signal(name="exp_tie")
        e_sat = Signal(name="exp_sat")
        e_trunc = Signal(name="exp_truncate")
        e_zero = Signal(name="exp_zero_group")
        e_sub = Signal(name="exp_subnormal_group")
        with m.If(in_xfer & (n_in == k)):
            m.d.sync += [
                e_exp.eq(exp), e_width.eq(width),
                e_round.eq(Mux(truncate, Rounding.TRUNCATE, Rounding.NEAREST)),
                e_nan.eq(bad_nan), e_inf.eq(bad_inf),
                e_tie.eq(Cat(*ties).any()), e_sat.eq(Cat(*sats).any()), e_trunc.eq(truncate),
                e_zero.eq(~bad & (max_key == 0)),
                e_sub.eq(~bad & (max_key != 0) & (max_key <= 24)),
                *[e_mag[j].eq(mags[j]) for j in range(G)],
                *[e_sign[j].eq(signs[j]) for j in range(G)],
            ]
        out = dut.o.payload
        check = Signal(name="check")
        m.d.comb += check.eq(dut.o.valid & (n_out == k))
        with m.If(check):
            m.d.comb += [
                Assert(n_in > k, "output k only after input k"),
                Assert(out.group.exp == e_exp, "shared exponent"),
                Assert(out.width == e_width, "width echoed"),
                Assert(out.rounding.as_value() == e_round, "rounding echoed"),
                Assert(out.flags.invalid == e_nan, "invalid flag"),
                Assert(out.flags.overflow == e_inf, "overflow flag"),
                *[Assert(out.group.elems[j].mag == e_mag[j], f"element {j} magnitude")
                  for j in range(G)],
                *[Assert(out.group.elems[j].sign == e_sign[j], f"element {j} sign")
                  for j in range(G)],
            ]
        xfer_k = check & dut.o.ready
        m.d.comb += [
            *[Cover(xfer_k & (e_width == w) & ~e_trunc & ~e_nan & ~e_inf, f"width {w} RNE")
              for w in cfg.widths],
            Cover(xfer_k & e_tie & ~e_trunc & (e_mag[0][0] == 0) & (e_mag[0] != 0),
                  "a tie rounded to even"),
            Cover(xfer_k & e_sat & ~e_trunc, "a magnitude saturates"),
            Cover(xfer_k & e_trunc & (e_mag[1] != 0), "truncation"),
            Cover(xfer_k & e_zero, "all-zero group"),
            Cover(xfer_k & e_sub & (e_mag[0] != 0), "subnormal group"),
            Cover(xfer_k & e_nan, "NaN group"),
            Cover(xfer_k & (k == 3), "the fourth group is checked"),
        ]


def _proof(name, mm, depth):
    cfg = BFPConfig(group_size=2, max_mantissa=mm, noise_bits=2)
    return Proof(
        name=name, block=f"BFPConverter (group_size 2, max_mantissa {mm}, noise_bits 2)",
        prop="shared exponent E = floor(log2 max|x|), magnitudes round-to-nearest-even / "
             "truncate with saturation, flags, width/mode echo; any FP32 inputs, any of the "
             "first 4 groups, free input/output handshakes",
        build=lambda: BFPRounding(cfg), depth=depth)


#: latency 5: depth 12 lets the fourth group through with a few stall cycles
PROOFS = [_proof("bfp_rne_m4", 4, 12)]
