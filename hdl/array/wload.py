"""Weight tiles of the matmul engine into the systolic array: aligned tile rows become
``wload`` rows of alternating banks, at most one tile ahead of the beats that use it."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .array import wload_layout
from .config import ArrayConfig
from .wtile import tile_row_layout

__all__ = ["tile_signature", "WeightLoader"]


def tile_signature(config: ArrayConfig) -> wiring.Signature:
    """The stationary tile the next FWD/BWD_DATA beat uses, seen from the loader.

    Members
    -------
    ready : Out(1)
        The tile is loaded.
    bank : Out(1)
        Its bank in the array.
    exp : Out(signed(exp_bits))
        Its shared exponent.
    exp_next : Out(signed(exp_bits))
        The other bank's: the next tile's once its rows are loading (a tile's rows all carry
        its exponent).
    invalid, overflow : Out(1)
        NaN / Inf flags of its rows.
    used : In(1)
        Its last beat is issued this cycle (the next tile becomes the current one).
    """
    return wiring.Signature({
        "ready": Out(1), "bank": Out(1), "exp": Out(signed(config.exp_bits)),
        "exp_next": Out(signed(config.exp_bits)),
        "invalid": Out(1), "overflow": Out(1), "used": In(1),
    })


class WeightLoader(wiring.Component):
    """Tile rows from :class:`~hdl.array.wtile.TileAligner` into the array's ``wload``.

    Tile ``t`` goes to bank ``t % 2``; it is loaded only while tile ``t - 1`` is the current
    one or later (``loaded <= used + 1``: the array then also waits until the bank's last
    beats have passed). The tile's exponent and NaN/Inf flags are kept per bank and reach the
    beats of the tile through ``tile``.

    Parameters
    ----------
    config : ArrayConfig

    Members
    -------
    i : In(stream.Signature(tile_row_layout(config)))
        Aligned tile rows.
    wload : Out(stream.Signature(wload_layout(config)))
        To the array.
    tile : Out(tile_signature(config))
        The current tile, for the beat assembly.
    clear : In(1)
        A pass starts on an idle engine: no tile loaded, none used.
    """

    def __init__(self, *, config: ArrayConfig):
        self.config = config
        super().__init__({
            "i": In(stream.Signature(tile_row_layout(config))),
            "wload": Out(stream.Signature(wload_layout(config))),
            "tile": Out(tile_signature(config)),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        # tiles loaded minus tiles issued (0, 1 or 2: a tile is loaded only while at most one
        # is ahead) and the bank of the next tile to issue, instead of two 32-bit counts and
        # their compares
        ahead = Signal(range(3), name="tiles_ahead")
        bank = Signal(name="issue_bank")
        room = Signal(name="tile_room")
        m.d.comb += room.eq(ahead != 2)
        tile_exp = [Signal(signed(cfg.exp_bits), name=f"tile_exp_{b}") for b in range(2)]
        tile_inv = [Signal(name=f"tile_invalid_{b}") for b in range(2)]
        tile_ovf = [Signal(name=f"tile_overflow_{b}") for b in range(2)]
        ao = self.i.payload
        m.d.comb += [
            self.wload.payload.eq(ao.wl),
            self.wload.valid.eq(self.i.valid & room),
            self.i.ready.eq(self.wload.ready & room),
        ]
        loaded = Signal(name="tile_loaded")              # a tile's last row is loaded now
        m.d.comb += loaded.eq(self.wload.valid & self.wload.ready & ao.last)
        with m.If(self.wload.valid & self.wload.ready):
            # the tile's flags travel with its bank and reach the pass with its beats
            for b in range(2):
                with m.If(ao.wl.bank == b):
                    m.d.sync += tile_exp[b].eq(ao.exp)
                    with m.If(ao.wl.row == 0):
                        m.d.sync += [tile_inv[b].eq(ao.invalid), tile_ovf[b].eq(ao.overflow)]
                    with m.Else():
                        m.d.sync += [tile_inv[b].eq(tile_inv[b] | ao.invalid),
                                     tile_ovf[b].eq(tile_ovf[b] | ao.overflow)]

        t = self.tile
        m.d.comb += [
            t.ready.eq(ahead != 0),
            t.bank.eq(bank),
            t.exp.eq(Mux(bank, tile_exp[1], tile_exp[0])),
            t.exp_next.eq(Mux(bank, tile_exp[0], tile_exp[1])),
            t.invalid.eq(Mux(bank, tile_inv[1], tile_inv[0])),
            t.overflow.eq(Mux(bank, tile_ovf[1], tile_ovf[0])),
        ]
        with m.If(loaded & ~t.used):
            m.d.sync += ahead.eq(ahead + 1)
        with m.Elif(t.used & ~loaded):
            m.d.sync += ahead.eq(ahead - 1)
        with m.If(t.used):
            m.d.sync += bank.eq(~bank)
        with m.If(self.clear):
            m.d.sync += [ahead.eq(0), bank.eq(0)]
        return m
