"""FP32 -> BFP converter with FAST's precision-switching statistic beside it (docs/fast.md).

Golden model: :mod:`sim.model.stats` (bit-exact). The statistic is
``r(X) = sum |BFP(X, m + 2) - BFP(X, m)| / sum |BFP(X, m)|`` over the groups delivered since
the last ``stat_load``, accumulated as ``(exp, num, den)`` (``r = num / den``).
"""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ..config import STAT_BITS, BFPConfig, check_stat_bits
from ..lib.mustuse import used_if_rejected
from ..registry import Block
from .converter import (BFPConverter, bfp_stream_layout, converter_latency,
                        converter_members, fp32_stream_layout, layout_fields)

__all__ = ["STAT_BITS", "stat_layout", "QuantStat"]



def stat_layout(config: BFPConfig, stat_bits: int = STAT_BITS) -> data.StructLayout:
    """The statistic, LSB first: ``num`` | ``den`` (``STAT_BITS`` each) | ``exp`` (signed,
    ``exp_bits + 1``) | ``seen`` (a group was added since the clear). ``r = num / den``; the
    value of ``num`` is ``num * 2**(exp - max_mantissa + 1)``."""
    return data.StructLayout({"num": stat_bits, "den": stat_bits,
                              "exp": signed(config.exp_bits + 1), "seen": 1})


class QuantStat(wiring.Component):
    """:class:`~hdl.bfp.converter.BFPConverter` at the run-time width ``m`` plus the statistic.

    The converter is built with ``residual=True``: besides each group at ``m`` it gives each
    element's ``|H_j - 4 M_j|``, ``H_j`` the magnitude the group would have at ``m + 2`` with
    round-to-nearest-even, from the same pipeline (shared exponent, flags, alignment; the same
    result as a second converter fed the group at ``m + 2`` in lock step, which is what this
    unit used to be). Each group delivered on ``o`` gives, one cycle later (stage
    register), ``D = sum |H_j - 4 M_j| << (mm - m - 2)`` and ``N = sum M_j << (mm - m)`` in
    units of ``2**(E - mm + 1)``; the next cycle adds them into the accumulator (the smaller
    exponent's side truncated to the larger, renormalised by one bit when a sum overflows).
    Groups at ``m = max_mantissa`` and groups with ``N = 0`` add nothing. ``stat_load`` sets the
    accumulator to ``stat_in`` at the next edge (all zeros: a clear) and drops the staged group:
    groups delivered from the load cycle on are added to the loaded value, earlier ones are not.
    (The training core loads a layer's saved statistic when it issues a pass and saves the
    result when the pass completes.) Reset clears it.

    Parameters
    ----------
    config : BFPConfig
        The converter's configuration.
    stat_bits : int
        Width of ``num``/``den`` (:data:`STAT_BITS`; smaller only to test the renormalisation).
    rotate : bool
        The converter's ``rotate`` option and its ``rot`` input (default ``False``; the sums
        do not depend on the element order).

    Attributes
    ----------
    latency : int
        The converter's latency (``o`` as for :class:`BFPConverter`).
    stat_latency : int
        Cycles from a group's delivery on ``o`` to its effect on ``stat`` (2).

    Members
    -------
    i, o, flags, clear_flags, rot
        As for :class:`~hdl.bfp.converter.BFPConverter` (``rot`` only with ``rotate=True``).
    stat_load : In(1), stat_in : In(stat_layout(config, stat_bits))
        Load the accumulator (zeros clear it).
    stat : Out(stat_layout(config, stat_bits))
        The accumulator.
    """

    stat_latency = 2

    def __init__(self, *, config: BFPConfig, stat_bits: int = STAT_BITS, rotate: bool = False):
        if not isinstance(config, BFPConfig):
            self._MustUse__silence = True        # no "never used" warning when rejected
            raise TypeError(f"QuantStat.config must be a BFPConfig, not {config!r}")
        with used_if_rejected(self):
            check_stat_bits("QuantStat", stat_bits, config)
        self.config = config
        self.stat_bits = stat_bits
        self.rotate = bool(rotate)
        self.latency = converter_latency(config)
        super().__init__({
            **converter_members(config),
            **({"rot": In(range(config.group_size))} if self.rotate else {}),
            "stat_load": In(1),
            "stat_in": In(stat_layout(config, stat_bits)),
            "stat": Out(stat_layout(config, stat_bits)),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        G, mm, B = cfg.group_size, cfg.max_mantissa, self.stat_bits
        lo = m.submodules.conv = BFPConverter(config=cfg, residual=True, rotate=self.rotate)
        if self.rotate:
            m.d.comb += lo.rot.eq(self.rot)
        m.d.comb += [
            lo.i.valid.eq(self.i.valid), lo.i.payload.eq(self.i.payload),
            self.i.ready.eq(lo.i.ready),
            self.o.valid.eq(lo.o.valid), self.o.payload.eq(lo.o.payload),
            lo.o.ready.eq(self.o.ready),
            self.flags.eq(lo.flags), lo.clear_flags.eq(self.clear_flags),
        ]

        # ---- stage: the group's terms ----------------------------------------------------------
        # (a group at m = mm or with N = 0, e.g. NaN/Inf, is not taken: its residuals are unused)
        out = lo.o.payload
        width = out.width                                   # the decoded m
        d_sum = 0
        n_sum = 0
        for j in range(G):
            d_sum = d_sum + lo.residual[j]                  # |H_j - 4 M_j|
            n_sum = n_sum + out.group.elems[j].mag
        d_grp = Signal(range(4 * G + 1), name="group_d")       # |H_j - 4 M_j| <= 4
        n_grp = Signal(range(G * (2 ** mm - 1) + 1), name="group_n")
        m.d.comb += [d_grp.eq(d_sum), n_grp.eq(n_sum)]
        short = Signal(range(mm + 1), name="width_short")    # mm - m
        m.d.comb += short.eq(mm - width)

        s_valid = Signal(name="stage_valid")
        s_exp = Signal(signed(cfg.exp_bits), name="stage_exp")
        s_d = Signal(B, name="stage_d")
        s_n = Signal(B, name="stage_n")
        take = (lo.o.valid & self.o.ready & (width != mm) & (n_grp != 0))
        m.d.sync += [s_valid.eq(take), s_exp.eq(out.group.exp),
                     s_d.eq((d_grp << short) >> 2), s_n.eq(n_grp << short)]

        # ---- accumulator -------------------------------------------------------------------------
        st = self.stat
        e_bits = cfg.exp_bits + 1
        sb = (B - 1).bit_length()                                   # B = 2**sb bits or fewer
        # The side with the smaller exponent is shifted right by the difference (by B or
        # more: to zero); one shifter per sum serves both sides (the winner is not shifted).
        # The exponent compare is not in the accumulator's loop: it is made a cycle ahead,
        # between the group entering the stage register and every exponent the accumulator
        # can have next (loaded, kept, its own plus the renormalising one, the staged
        # group's), and the loop only selects among the four and registers ``up`` (the
        # group's exponent wins; don't-care while nothing is seen), the shift and the flush.
        # A group that sets the exponent never renormalises: its N (and D) is below
        # 2**(B - 1) (``check_stat_bits``: B > mm + bit_length(G)) and so is the other
        # side, shifted at least once, or zero.
        up = Signal(name="exp_up")
        k = Signal(sb, name="align_shift")
        flush = Signal(name="align_flush")                          # shifted by B or more

        def compare(a, b, tag):
            """(a > b, |a - b| mod 2**sb, |a - b| >= B) of a group exponent ``a`` against an
            accumulator exponent ``b``."""
            dp = Signal(signed(e_bits + 2), name=f"cmp_{tag}_diff")
            dn = Signal(signed(e_bits + 2), name=f"cmp_{tag}_diff_neg")
            pos = Signal(name=f"cmp_{tag}_up")
            mag = Signal(e_bits + 2, name=f"cmp_{tag}_mag")
            m.d.comb += [dp.eq(a - b), dn.eq(b - a), pos.eq(dp > 0), mag.eq(Mux(pos, dp, dn))]
            return pos, mag[:sb], mag >= B

        g_exp = out.group.exp                                       # s_exp of the next cycle
        st_exp_up = Signal(signed(e_bits), name="acc_exp_plus1")
        m.d.comb += st_exp_up.eq(st.exp + 1)
        cands = {"load": compare(g_exp, self.stat_in.exp, "load"),
                 "keep": compare(g_exp, st.exp, "keep"),
                 "keep1": compare(g_exp, st_exp_up, "keep1"),
                 "grp": compare(g_exp, s_exp, "grp")}
        take_grp = Signal(name="acc_takes_group_exp")               # new_exp is s_exp
        m.d.comb += take_grp.eq(~st.seen | up)
        ovf = Signal(name="acc_renorm")

        # ``ovf`` (the end of the loop's adders) is the last select; the rest are early
        upd = Signal(name="acc_update")                 # the staged group is added
        renorm_keep = Signal(name="acc_keeps_exp")      # ... keeping the accumulator's exponent
        m.d.comb += [upd.eq(~self.stat_load & s_valid), renorm_keep.eq(upd & ~take_grp)]

        def pick(i):
            early = Mux(self.stat_load, cands["load"][i],
                        Mux(s_valid & take_grp, cands["grp"][i], cands["keep"][i]))
            return Mux(renorm_keep & ovf, cands["keep1"][i], early)

        m.d.sync += [up.eq(pick(0)), k.eq(pick(1)), flush.eq(pick(2))]
        sh_num = Signal(B, name="align_num")
        sh_den = Signal(B, name="align_den")
        m.d.comb += [
            sh_num.eq(Mux(flush, 0, Mux(up, st.num, s_d) >> k)),
            sh_den.eq(Mux(flush, 0, Mux(up, st.den, s_n) >> k)),
        ]
        a_num = Signal(B, name="acc_num_aligned")
        a_den = Signal(B, name="acc_den_aligned")
        g_num = Signal(B, name="grp_num_aligned")
        g_den = Signal(B, name="grp_den_aligned")
        m.d.comb += [
            a_num.eq(Mux(~st.seen, 0, Mux(up, sh_num, st.num))),
            a_den.eq(Mux(~st.seen, 0, Mux(up, sh_den, st.den))),
            g_num.eq(Mux(~st.seen | up, s_d, sh_num)),
            g_den.eq(Mux(~st.seen | up, s_n, sh_den)),
        ]
        new_exp = Signal(signed(e_bits), name="acc_exp_next")
        m.d.comb += new_exp.eq(Mux(~st.seen | up, s_exp, st.exp))
        s_num = Signal(B + 1, name="acc_num_sum")
        s_den = Signal(B + 1, name="acc_den_sum")
        m.d.comb += [s_num.eq(a_num + g_num), s_den.eq(a_den + g_den)]
        m.d.comb += ovf.eq(s_num[B] | s_den[B])
        with m.If(self.stat_load):
            m.d.sync += st.eq(self.stat_in)
        with m.Elif(s_valid):
            m.d.sync += [
                st.num.eq(Mux(ovf, s_num[1:], s_num[:B])),
                st.den.eq(Mux(ovf, s_den[1:], s_den[:B])),
                st.exp.eq(new_exp + ovf),
                st.seen.eq(1),
            ]
        return m


def _params(preset: str) -> dict:
    cfg = BFPConfig.preset(preset)
    return {
        **cfg.to_dict(),
        "latency": converter_latency(cfg),
        "stat_latency": QuantStat.stat_latency,
        "stat_bits": STAT_BITS,
        "i_fields": layout_fields(fp32_stream_layout(cfg)),
        "o_fields": layout_fields(bfp_stream_layout(cfg)),
        "stat_fields": layout_fields(stat_layout(cfg)),
    }


TESSERA_BLOCKS = [
    Block("bfp_stat", build=lambda preset: QuantStat(config=BFPConfig.preset(preset)),
          params=_params),
]
