"""A ``SyncFIFOBuffered`` in block RAM (used by the matmul engine's FIFOs)."""
from __future__ import annotations

from amaranth.lib.fifo import SyncFIFOBuffered

from .memport import BLOCK_RAM

__all__ = ["BlockFIFO"]


class BlockFIFO(SyncFIFOBuffered):
    """``amaranth.lib.fifo.SyncFIFOBuffered`` whose memory is marked for block RAM
    (:data:`~hdl.lib.memport.BLOCK_RAM`; its read port is synchronous, so the ECP5 maps it to
    ``DP16KD``s instead of LUT RAM, which costs about six logic-cell sites per 16 x 4 bits).
    A synthesis hint only: the behaviour and timing are ``SyncFIFOBuffered``'s (the head entry
    from a register; an entry written in cycle ``t`` can be read from cycle ``t + 2``, one
    later than ``SyncFIFO``'s)."""

    def elaborate(self, platform):
        m = super().elaborate(platform)
        m.submodules.storage.attrs.update(BLOCK_RAM)
        return m
