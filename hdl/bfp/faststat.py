"""FAST's precision-switching statistic, accumulated from a converter's delivered groups
(docs/fast.md).

Golden model: :mod:`sim.model.stats` (bit-exact). The statistic is
``r(X) = sum |BFP(X, m + 2) - BFP(X, m)| / sum |BFP(X, m)|`` over the groups delivered since
the last ``stat_load``, accumulated as ``(exp, num, den)`` (``r = num / den``).
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..config import STAT_BITS, BFPConfig, check_stat_bits
from ..lib.mustuse import check_config_type, used_if_rejected
from .converter import bfp_stream_layout, residual_layout

__all__ = ["STAT_BITS", "stat_layout", "stat_members", "FastStat"]


def stat_layout(config: BFPConfig, stat_bits: int = STAT_BITS) -> data.StructLayout:
    """The statistic, LSB first: ``num`` | ``den`` (``STAT_BITS`` each) | ``exp`` (signed,
    ``exp_bits + 1``) | ``seen`` (a group was added since the clear). ``r = num / den``; the
    value of ``num`` is ``num * 2**(exp - max_mantissa + 1)``."""
    return data.StructLayout({"num": stat_bits, "den": stat_bits,
                              "exp": signed(config.exp_bits + 1), "seen": 1})


def stat_members(config: BFPConfig, stat_bits: int = STAT_BITS) -> dict:
    """The statistic's signature members (``stat_load``, ``stat_in``, ``stat``), also those of
    the converters built around :class:`FastStat`."""
    return {"stat_load": In(1), "stat_in": In(stat_layout(config, stat_bits)),
            "stat": Out(stat_layout(config, stat_bits))}


class FastStat(wiring.Component):
    """The statistic of the groups a :class:`~hdl.bfp.converter.BFPConverter` built with
    ``residual=True`` delivers.

    Each group delivered (``valid``, with the converter's ``o.payload`` on ``group`` and its
    ``residual``) gives, one cycle later, the sums ``sum |H_j - 4 M_j|`` and ``sum M_j`` (sum
    registers), the cycle after that ``D = sum |H_j - 4 M_j| << (mm - m - 2)`` and
    ``N = sum M_j << (mm - m)`` in units of ``2**(E - mm + 1)`` (stage registers); the next
    cycle adds them into the accumulator (the smaller exponent's side truncated to the larger,
    renormalised by one bit when a sum overflows). Groups at ``m = max_mantissa`` and groups
    with ``N = 0`` add nothing. ``stat_load`` sets the accumulator to ``stat_in`` at the next
    edge (all zeros: a clear) and drops both staged groups: groups delivered from the load
    cycle on are added to the loaded value, earlier ones are not. Reset clears it.

    ``group`` is looked at in every cycle, ``valid`` or not (its exponent is compared a cycle
    ahead, against the staged one): it must be the converter's output register, which holds a
    delivered group's payload until the next one. Several instances may watch one converter,
    each with its own ``valid`` (:class:`hdl.array.convpair.SharedConverter`, one per operand
    path): each compares every group a cycle ahead and adds only its own.

    Parameters
    ----------
    config : BFPConfig
        The converter's configuration.
    stat_bits : int
        Width of ``num``/``den`` (:data:`STAT_BITS`; smaller only to test the renormalisation).

    Attributes
    ----------
    stat_latency : int
        Cycles from a group's delivery to its effect on ``stat`` (3).

    Members
    -------
    valid : In(1)
        A group is delivered in this cycle.
    group : In(bfp_stream_layout(config))
        The converter's output payload.
    residual : In(residual_layout(config))
        The converter's ``residual``.
    stat_load : In(1), stat_in : In(stat_layout(config, stat_bits))
        Load the accumulator (zeros clear it).
    stat : Out(stat_layout(config, stat_bits))
        The accumulator.
    """

    stat_latency = 3

    def __init__(self, *, config: BFPConfig, stat_bits: int = STAT_BITS):
        check_config_type(self, config, BFPConfig)
        with used_if_rejected(self):
            check_stat_bits("FastStat", stat_bits, config)
        self.config = config
        self.stat_bits = stat_bits
        super().__init__({
            "valid": In(1),
            "group": In(bfp_stream_layout(config)),
            "residual": In(residual_layout(config)),
            **stat_members(config, stat_bits),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        G, mm, B = cfg.group_size, cfg.max_mantissa, self.stat_bits

        # ---- stage: the group's terms ----------------------------------------------------------
        # (a group at m = mm or with N = 0, e.g. NaN/Inf, is not taken: its residuals are unused)
        out = self.group
        width = out.width                                   # the decoded m
        d_sum = 0
        n_sum = 0
        for j in range(G):
            d_sum = d_sum + self.residual[j]                  # |H_j - 4 M_j|
            n_sum = n_sum + out.group.elems[j].mag
        d_grp = Signal(range(4 * G + 1), name="group_d")       # |H_j - 4 M_j| <= 4
        n_grp = Signal(range(G * (2 ** mm - 1) + 1), name="group_n")
        m.d.comb += [d_grp.eq(d_sum), n_grp.eq(n_sum)]
        short = Signal(range(mm + 1), name="width_short")    # mm - m
        m.d.comb += short.eq(mm - width)

        # two stages: the sums (``sum_*``), then the shift by mm - m (``stage_*``), so the
        # sum of G magnitudes and the shift are not one path. A load drops the group in the
        # first stage (it was delivered before the load cycle).
        load = self.stat_load
        p_valid = Signal(name="sum_valid")
        p_exp = Signal(signed(cfg.exp_bits), name="sum_exp")
        p_d = Signal.like(d_grp, name="sum_d")
        p_n = Signal.like(n_grp, name="sum_n")
        p_short = Signal.like(short, name="sum_short")
        # N != 0 as any magnitude bit set (the same test, not through the sum)
        nonzero = Cat(*[out.group.elems[j].mag for j in range(G)]).any()
        take = self.valid & (width != mm) & nonzero
        m.d.sync += [p_valid.eq(take), p_exp.eq(out.group.exp), p_d.eq(d_grp), p_n.eq(n_grp),
                     p_short.eq(short)]
        s_valid = Signal(name="stage_valid")
        s_exp = Signal(signed(cfg.exp_bits), name="stage_exp")
        s_d = Signal(B, name="stage_d")
        s_n = Signal(B, name="stage_n")
        s_take = Signal(name="stage_take")          # stage_valid of the next cycle
        m.d.comb += s_take.eq(p_valid & ~load)
        m.d.sync += [s_valid.eq(s_take), s_exp.eq(p_exp),
                     s_d.eq((p_d << p_short) >> 2), s_n.eq(p_n << p_short)]

        # ---- accumulator -------------------------------------------------------------------------
        # The accumulator is held *before* its renormalisation: ``acc_*_raw`` is the last sum
        # (B + 1 bits) at the exponent ``acc_exp_raw`` it was made at, and ``stat`` is that
        # sum renormalised (``ovf``: either sum's bit B set; ``num``/``den`` one bit down,
        # ``exp`` one up), every cycle the value a renormalised register would hold. Aligning
        # it to a group exponent ``g`` is the raw sum shifted right by ``D = g - acc_exp_raw``
        # when ``g`` wins (``D > ovf``: the renormalising bit and the exponent's increment
        # cancel), else by ``ovf``; the group is shifted right by ``ovf - D`` when the
        # accumulator wins. So the loop (raw sum -> shift -> add -> raw sum) has no
        # renormalising select, and ``D``, compared a cycle ahead against each raw exponent
        # the accumulator can have next (loaded, held, its renormalised one, the staged
        # group's), does not depend on this cycle's sums.
        # Each side's shift (``max(D, ovf)``, ``ovf - D`` or 0) is registered as one-hot
        # selects of ``7 h + l``: ``h`` (none set: flushed) and ``l`` (0..6), plus ``ovf`` on
        # the side whose amount has it (``l`` registered for ``ovf = 0`` and ``ovf = 1``;
        # ``ovf``, a register, picks beside the first level). Each shifter in the loop is two
        # AND-OR levels, no wide mux tree. A load zeroes both sides' second-level selects and
        # enters ``stat_in`` as one more term of the group's, so the loop ends at the adders.
        # A group that sets the exponent never renormalises: its N (and D) is below
        # 2**(B - 1) (``check_stat_bits``: B > mm + bit_length(G)) and so is the other
        # side, shifted at least once, or zero.
        st = self.stat
        e_bits = cfg.exp_bits + 1
        raw_num = Signal(B + 1, name="acc_num_raw")
        raw_den = Signal(B + 1, name="acc_den_raw")
        raw_exp = Signal(signed(e_bits), name="acc_exp_raw")
        # acc_exp_raw + 1 (st.exp when ovf), a register beside it: one subtract per compare
        raw_exp_up = Signal(signed(e_bits), name="acc_exp_raw_plus1", init=1)
        seen = Signal(name="acc_seen")
        ovf = Signal(name="acc_renorm")         # the held sums are renormalised: bit B of one
        d_pos = Signal(name="cmp_pos")          # D > 0 or nothing seen (for the staged group)
        d_one = Signal(name="cmp_one")          # D == 1 and seen
        up = Signal(name="exp_up")              # the staged group's exponent wins: D > ovf
        m.d.comb += up.eq(d_pos & ~(d_one & ovf))
        m.d.comb += [
            st.num.eq(Mux(ovf, raw_num[1:], raw_num[:B])),
            st.den.eq(Mux(ovf, raw_den[1:], raw_den[:B])),
            st.exp.eq(raw_exp + ovf),
            st.seen.eq(seen),
        ]

        rdx = 7
        hi_n = B // rdx + 1                          # 7 * hi_n > B: every amount up to B
        lo_n = rdx + 1                               # l + ovf
        u_bits = (rdx * hi_n).bit_length()

        def onehot(u, ok, tag):
            """One-hot ``u div 7`` (none unless ``ok``) and ``u mod 7``."""
            hi = Signal(hi_n, name=f"{tag}_hi")
            lo = Signal(rdx, name=f"{tag}_lo")
            m.d.comb += [
                # (no ``u >= 0`` for h = 0: an unsigned compare that is always true, which
                # Verilator's lint refuses)
                hi.eq(Cat(*[ok & (u < rdx * h + rdx) & ((u >= rdx * h) if h else 1)
                            for h in range(hi_n)])),
                lo.eq(Cat(*[Cat(*[u == x for x in range(2 ** u_bits) if x % rdx == l]).any()
                            for l in range(rdx)])),
            ]
            return hi, lo

        def compare(a, b, tag):
            """(D > 0, D == 1, D mod 2**u_bits, 0 <= D < 2**u_bits, the same two of -D) of a
            group exponent ``a`` against a raw accumulator exponent ``b`` (D = a - b)."""
            dp = Signal(signed(e_bits + 2), name=f"cmp_{tag}_diff")        # D
            dn = Signal(signed(e_bits + 2), name=f"cmp_{tag}_diff_neg")    # -D
            m.d.comb += [dp.eq(a - b), dn.eq(b - a)]
            return (dn < 0, dp == 1, dp[:u_bits], dp[u_bits:] == 0, dn[:u_bits],
                    dn[u_bits:] == 0)

        g_exp = p_exp                                               # s_exp of the next cycle
        # the staged group's candidate compares p_exp with s_exp: both registers load every
        # cycle (p_exp from the converter's output, s_exp from p_exp), so that compare is
        # made a cycle ahead from their inputs and registered (the subtract from s_exp was the
        # S = 8 FPGA core's slowest estimated path, 15.85 ns at 73bcd20); the registers start
        # at the compare of the two registers' reset values (0, 0)
        grp_now = compare(out.group.exp, p_exp, "grp")
        grp = tuple(Signal.like(v, name=f"cmp_grp_{k}_q", init=i)
                    for k, (v, i) in enumerate(zip(grp_now, (0, 0, 0, 1, 0, 1))))
        m.d.sync += [r.eq(v) for r, v in zip(grp, grp_now)]
        cands = {"load": compare(g_exp, self.stat_in.exp, "load"),
                 "hold": compare(g_exp, raw_exp, "hold"),
                 "hold1": compare(g_exp, raw_exp_up, "hold1"),
                 "grp": grp}
        # s_valid & up (the staged group sets the exponent) from registers: ``grp_pos`` is
        # s_valid & d_pos (d_pos is 1 while nothing is seen), so only ``ovf`` comes in late
        grp_pos = Signal(name="stage_valid_cmp_pos")
        take_grp = Signal(name="acc_takes_group_exp")               # the new raw exp is s_exp
        m.d.comb += take_grp.eq(grp_pos & ~(d_one & ovf))
        seen_next = Signal(name="acc_seen_next")
        m.d.comb += seen_next.eq(Mux(load, self.stat_in.seen, seen | s_valid))

        def pick(c):
            # the raw exponent of the next cycle: loaded; s_exp (the staged group wins); st.exp
            # (added, the accumulator's exponent kept); acc_exp_raw (nothing added)
            return Mux(load, c("load"), Mux(take_grp, c("grp"),
                                            Mux(s_valid & ovf, c("hold1"), c("hold"))))

        pos_next = Signal(name="cmp_pos_next")                      # D > 0 or nothing seen
        one_next = Signal(name="cmp_one_next")                      # D == 1 and seen
        m.d.comb += [pos_next.eq(~seen_next | pick(lambda k: cands[k][0])),
                     one_next.eq(seen_next & pick(lambda k: cands[k][1]))]
        # each candidate decoded before the pick (eight decoders, not two after it: the pick's
        # three mux levels came between the subtract and the decode, the S = 4 FPGA core's
        # acc_shift_lo paths at 14.5 ns est. at 827b689)
        dec = {k: (onehot(c[2], c[3], f"cmp_pos_{k}"), onehot(c[4], c[5], f"cmp_neg_{k}"))
               for k, c in cands.items()}
        d_hi, d_lo, n_hi, n_lo = (pick(lambda k, s=s, j=j: dec[k][s][j])
                                  for s, j in ((0, 0), (0, 1), (1, 0), (1, 1)))
        a_hi = Signal(hi_n, name="acc_shift_hi")
        a_lo0 = Signal(lo_n, name="acc_shift_lo")        # ovf = 0
        a_lo1 = Signal(lo_n, name="acc_shift_lo_ovf")    # ovf = 1
        g_hi = Signal(hi_n, name="grp_shift_hi")
        g_lo0 = Signal(lo_n, name="grp_shift_lo")
        g_lo1 = Signal(lo_n, name="grp_shift_lo_ovf")
        one_hi = Const(1, hi_n)
        m.d.sync += [
            a_hi.eq(Mux(~seen_next, 0, Mux(pos_next, d_hi, one_hi))),
            a_lo0.eq(Mux(pos_next, d_lo, 0b01)),
            a_lo1.eq(Mux(pos_next, d_lo, 0b10)),
            g_hi.eq(Mux(pos_next, one_hi, n_hi)),
            g_lo0.eq(Mux(pos_next, 0b01, n_lo)),
            g_lo1.eq(Mux(pos_next, 0b01, n_lo << 1)),
        ]

        def shift(x, hi, lo0, lo1, tag, extra=None):
            """``x >> (7 h + l + ovf)`` (B bits) for the one-hot selects (0 on a load, or
            ``extra`` then)."""
            y = Signal(len(x), name=f"{tag}_shift_hi")
            lo = Signal(lo_n, name=f"{tag}_shift_lo_sel")
            z = Signal(B, name=f"{tag}_aligned")
            m.d.comb += lo.eq(Mux(load, 0, Mux(ovf, lo1, lo0)))
            for i in range(len(x)):
                terms = [x[i + rdx * h] & hi[h] for h in range(hi_n) if i + rdx * h < len(x)]
                m.d.comb += y[i].eq(Cat(*terms).any())
            for i in range(B):
                terms = [y[i + v] & lo[v] for v in range(lo_n) if i + v < len(x)]
                if extra is not None:
                    terms.append(extra[i] & load)
                m.d.comb += z[i].eq(Cat(*terms).any())
            return z

        a_num = shift(raw_num, a_hi, a_lo0, a_lo1, "acc_num")
        a_den = shift(raw_den, a_hi, a_lo0, a_lo1, "acc_den")
        g_num = shift(s_d, g_hi, g_lo0, g_lo1, "grp_num", extra=self.stat_in.num)
        g_den = shift(s_n, g_hi, g_lo0, g_lo1, "grp_den", extra=self.stat_in.den)
        s_num = Signal(B + 1, name="acc_num_sum")       # stat_in on a load
        s_den = Signal(B + 1, name="acc_den_sum")
        m.d.comb += [s_num.eq(a_num + g_num), s_den.eq(a_den + g_den)]
        m.d.sync += [d_pos.eq(pos_next), d_one.eq(one_next), grp_pos.eq(s_take & pos_next)]
        with m.If(load | s_valid):
            # (a loaded stat_in has B bits: ovf = 0)
            m.d.sync += [raw_num.eq(s_num), raw_den.eq(s_den), ovf.eq(s_num[B] | s_den[B])]
        with m.If(load):
            m.d.sync += [raw_exp.eq(self.stat_in.exp), raw_exp_up.eq(self.stat_in.exp + 1),
                         seen.eq(self.stat_in.seen)]
        with m.Elif(s_valid):
            new_exp = Signal(signed(e_bits), name="acc_exp_raw_next")
            m.d.comb += new_exp.eq(Mux(up, s_exp, st.exp))
            m.d.sync += [raw_exp.eq(new_exp), raw_exp_up.eq(new_exp + 1), seen.eq(1)]
        return m
