"""FIFOs in block RAM (the matmul engine's): :class:`BlockFIFO`, and :class:`RegBlockFIFO`
whose head leaves from a fabric register."""
from __future__ import annotations

from amaranth.hdl import Elaboratable, Module, Signal
from amaranth.lib.fifo import FIFOInterface, SyncFIFOBuffered

from .memport import BLOCK_RAM

__all__ = ["BlockFIFO", "RegBlockFIFO"]


class BlockFIFO(SyncFIFOBuffered):
    """``amaranth.lib.fifo.SyncFIFOBuffered`` whose memory is marked for block RAM
    (:data:`~hdl.lib.memport.BLOCK_RAM`; its read port is synchronous, so the ECP5 maps it to
    ``DP16KD``s instead of LUT RAM, which costs about six logic-cell sites per 16 x 4 bits).
    A synthesis hint only: the behaviour and timing are ``SyncFIFOBuffered``'s (the head entry
    from a register; an entry written in cycle ``t`` can be read from cycle ``t + 2``, one
    later than ``SyncFIFO``'s)."""

    #: Cycles from an entry's write to the first cycle it can be read.
    VISIBLE = 2

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.submodules.storage.attrs.update(BLOCK_RAM)
        return m


class RegBlockFIFO(Elaboratable, FIFOInterface):
    """A :class:`BlockFIFO` of ``depth - 1`` entries followed by a one-entry stage in
    flip-flops, the head: ``r_data`` is a fabric register, not the block RAM's read data
    (an ECP5 ``DP16KD`` without its output register answers about 5.8 ns after the clock,
    which the logic reading the head then adds to).

    Same ports and rules as ``amaranth.lib.fifo.SyncFIFO`` (``fwft``), ``depth >= 3``; full
    throughput (the stage refills in the cycle its entry is read). An entry written in cycle
    ``t`` can be read from cycle ``t + 3`` (:attr:`VISIBLE`), one later than
    :class:`BlockFIFO`'s. It holds up to ``depth`` entries and always takes one while it
    holds fewer than ``depth - 2`` (``w_rdy`` is the block RAM part's: while the head stage
    and the ``BlockFIFO``'s own head register are empty, entries on their way there fill its
    memory's ``depth - 2``). Size it with that slack.
    """

    VISIBLE = BlockFIFO.VISIBLE + 1

    def __init__(self, *, width: int, depth: int):
        if not isinstance(depth, int) or isinstance(depth, bool) or depth < 3:
            self._MustUse__silence = True        # no "never used" warning when rejected
            raise ValueError(f"RegBlockFIFO depth must be an integer >= 3, not {depth!r}")
        super().__init__(width=width, depth=depth)
        self.level = Signal(range(depth + 1))

    def elaborate(self, platform):
        m = Module()
        inner = m.submodules.inner = BlockFIFO(width=self.width, depth=self.depth - 1)
        full = Signal(name="head_valid")
        take = Signal(name="head_load")               # the stage takes the inner head
        m.d.comb += [
            inner.w_data.eq(self.w_data), inner.w_en.eq(self.w_en),
            self.w_rdy.eq(inner.w_rdy),
            take.eq(inner.r_rdy & (~full | self.r_en)),
            inner.r_en.eq(take),
            self.r_rdy.eq(full),
            self.level.eq(inner.level + full),
            self.w_level.eq(self.level), self.r_level.eq(self.level),
        ]
        with m.If(take):
            m.d.sync += [self.r_data.eq(inner.r_data), full.eq(1)]
        with m.Elif(self.r_en):
            m.d.sync += full.eq(0)
        return m
