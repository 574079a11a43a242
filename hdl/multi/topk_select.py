"""Top-k selection: the ``k`` FP32 words of largest magnitude among those streamed in
(docs/multicore.md, *Top-k compression in hardware*).

A sorted insertion register: ``k`` slots hold the best words seen since the last ``clear``,
largest magnitude first. Magnitudes are compared as the unsigned integers ``word[0:31]`` (the
word without its sign bit: NaN above infinity above every finite value, ``-0`` equal to
``+0``); a word whose magnitude equals a held one goes after it, so among equal magnitudes
the one streamed first (the lower index, as the words arrive in index order) wins. This is the
order :func:`sim.model.compress.topk_select` defines.

Golden model: :func:`sim.model.compress.topk_order`.
"""
from __future__ import annotations

from amaranth.hdl import Module, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib.mustuse import mark_used
from .config import TopK

__all__ = ["TopKSelect", "entry_layout"]


def entry_layout(topk: TopK) -> data.StructLayout:
    """One candidate: ``index`` (inside its segment, ``index_bits`` bits; at least 1) and the
    FP32 ``word``."""
    return data.StructLayout({"index": max(1, topk.index_bits), "word": 32})


class TopKSelect(wiring.Component):
    """Keeps the ``k`` largest-magnitude words of a stream, sorted.

    Parameters
    ----------
    config : TopK

    Members
    -------
    i : In(stream.Signature(entry_layout(config)))
        Words to consider, in index order; one per cycle (``ready`` is always 1).
    clear : In(1)
        Empties the slots (takes precedence over ``i`` in the same cycle).
    slots : Out(data.ArrayLayout(entry_layout(config), config.k))
        The held candidates, largest magnitude first; slot ``j`` is meaningful for
        ``j < count``.
    count : Out(range(config.k + 1))
        Candidates held: ``min(k, words streamed since clear)``.

    Latency: a word accepted in cycle ``t`` is in ``slots`` from cycle ``t + 1``.
    """

    def __init__(self, *, config: TopK):
        if not isinstance(config, TopK):
            mark_used(self)
            raise TypeError(f"config must be a TopK, not {type(config).__name__}")
        self.config = config
        lay = entry_layout(config)
        super().__init__({
            "i": In(stream.Signature(lay)),
            "clear": In(1),
            "slots": Out(data.ArrayLayout(lay, config.k)),
            "count": Out(range(config.k + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        k = self.config.k
        new = self.i.payload
        m.d.comb += self.i.ready.eq(1)
        # ge[j]: slot j holds a candidate at least as large as the new word (it stays ahead);
        # the slots are sorted, so ge is a run of ones followed by zeros
        # The compare is the sign of a 32-bit difference, not ``>=``: yosys maps both to a
        # carry chain, but for ``>=`` ABC can fold the top bit's compare into each of the 40
        # next-state functions of the slot after (LUT6s: synthesized alone, k = 16, 2,420
        # LUT4 against 641), while the difference's sign is a carry-chain output it cannot
        # reach into. (Flattened in the 2-core ring the two forms differ by 460 logic cells.)
        ge = Signal(k, name="ge")
        for j in range(k):
            diff = Signal(32, name=f"mag_diff_{j}")
            m.d.comb += [diff.eq(self.slots[j].word[:31] - new.word[:31]),
                         ge[j].eq((j < self.count) & ~diff[31])]
        with m.If(self.clear):
            m.d.sync += self.count.eq(0)
        with m.Elif(self.i.valid):
            with m.If(self.count != k):
                m.d.sync += self.count.eq(self.count + 1)
            for j in range(k):
                if j == 0:
                    with m.If(~ge[0]):
                        m.d.sync += self.slots[0].eq(new)
                    continue
                with m.If(ge[j]):
                    pass                                    # stays
                with m.Elif(ge[j - 1]):
                    m.d.sync += self.slots[j].eq(new)       # the new word's place
                with m.Else():
                    m.d.sync += self.slots[j].eq(self.slots[j - 1])   # moves down one
        return m
