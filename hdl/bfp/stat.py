"""FP32 -> BFP converter with FAST's precision-switching statistic beside it (docs/fast.md).

Golden model: :mod:`sim.model.stats` (bit-exact). The statistic is
``r(X) = sum |BFP(X, m + 2) - BFP(X, m)| / sum |BFP(X, m)|`` over the groups delivered since
the last ``stat_load``, accumulated as ``(exp, num, den)`` (``r = num / den``).
"""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import STAT_BITS, BFPConfig, check_stat_bits
from ..lib.mustuse import check_config_type, used_if_rejected
from ..registry import Block
from .converter import (BFPConverter, bfp_stream_layout, converter_latency,
                        converter_members, fp32_stream_layout, layout_fields)
from .faststat import FastStat, stat_layout, stat_members

__all__ = ["STAT_BITS", "stat_layout", "QuantStat"]


class QuantStat(wiring.Component):
    """:class:`~hdl.bfp.converter.BFPConverter` at the run-time width ``m`` plus the statistic.

    The converter is built with ``residual=True``: besides each group at ``m`` it gives each
    element's ``|H_j - 4 M_j|``, ``H_j`` the magnitude the group would have at ``m + 2`` with
    round-to-nearest-even, from the same pipeline (shared exponent, flags, alignment; the same
    result as a second converter fed the group at ``m + 2`` in lock step, which is what this
    unit used to be). :class:`~hdl.bfp.faststat.FastStat` accumulates the statistic of the
    groups delivered on ``o``: ``stat_load`` sets it to ``stat_in`` at the next edge (all zeros:
    a clear), groups delivered from the load cycle on are added to the loaded value.
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
        Cycles from a group's delivery on ``o`` to its effect on ``stat`` (3).

    Members
    -------
    i, o, flags, clear_flags, rot
        As for :class:`~hdl.bfp.converter.BFPConverter` (``rot`` only with ``rotate=True``).
    stat_load : In(1), stat_in : In(stat_layout(config, stat_bits))
        Load the accumulator (zeros clear it).
    stat : Out(stat_layout(config, stat_bits))
        The accumulator.
    """

    stat_latency = FastStat.stat_latency

    def __init__(self, *, config: BFPConfig, stat_bits: int = STAT_BITS, rotate: bool = False):
        check_config_type(self, config, BFPConfig)
        with used_if_rejected(self):
            check_stat_bits("QuantStat", stat_bits, config)
        self.config = config
        self.stat_bits = stat_bits
        self.rotate = bool(rotate)
        self.latency = converter_latency(config)
        super().__init__({
            **converter_members(config),
            **({"rot": In(range(config.group_size))} if self.rotate else {}),
            **stat_members(config, stat_bits),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
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

        st = m.submodules.stat = FastStat(config=cfg, stat_bits=self.stat_bits)
        m.d.comb += [
            st.valid.eq(lo.o.valid & self.o.ready), st.group.eq(lo.o.payload),
            st.residual.eq(lo.residual),
            st.stat_load.eq(self.stat_load), st.stat_in.eq(self.stat_in), self.stat.eq(st.stat),
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
