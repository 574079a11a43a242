"""Generator 1 of the matmul engine: weight-tile rows (FWD / BWD_DATA) or dY block rows
(BWD_WEIGHT), the line requests of operand path 1."""
from __future__ import annotations

from amaranth.hdl import Module, Mux, Signal, signed
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .config import ArrayConfig
from .control import pass_shape_layout
from .loops import LineWalk, NestedLoops, mode_flags, tile_loop_limits
from .opgen import lanes_below
from .quant import line_req_layout

__all__ = ["TileRowGen"]


class TileRowGen(wiring.Component):
    """Line requests of operand path 1, ``S`` rows per tile, in the pass's tile order.

    * FWD: ``for kt: for nt: for r < S``: row ``kt*S + r`` of W (B), columns of tile ``nt``
      (zeros past ``K``): the rows of weight tile ``(kt, nt)``.
    * BWD_DATA: ``for nt: for kt: for r < S``: the same weight tiles in the BWD_DATA order.
    * BWD_WEIGHT: ``for mt: for kt: for nt: for r < S``: row ``mt*S + r`` of dY (C), columns
      of tile ``nt`` (zeros past ``M``): the dY block of batch tile ``mt``.

    Has its own copy of the shape registers (loaded from ``shape`` on ``launch``), so it can
    start the next pass while generator 0 still works on the running one.

    Parameters
    ----------
    config : ArrayConfig

    Members
    -------
    req : Out(stream.Signature(line_req_layout(config, 1)))
        To quantizer 1 (``side`` unused, 0).
    running : In(1)
    launch : In(1)
    shape : In(pass_shape_layout(config))
    done : Out(1)
        All requests of the pass issued (1 after reset).
    """

    def __init__(self, *, config: ArrayConfig):
        self.config = config
        super().__init__({
            "req": Out(stream.Signature(line_req_layout(config, 1))),
            "running": In(1), "launch": In(1),
            "shape": In(pass_shape_layout(config)),
            "done": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, db = cfg.size, cfg.dim_bits
        lg = (S - 1).bit_length()
        # the pass's mode, loaded with the shape (registers of this generator)
        is_bwd, is_bww = Signal(name="g1_is_bwd_data"), Signal(name="g1_is_bww")
        shp = pass_shape_layout(cfg)
        g1r = {k: Signal(shp[k].shape, name=f"g1_{k}")
               for k in ("MT", "KT", "NT", "dM", "dK", "dN", "base_b", "base_c", "ldb")}

        def limits(bwd, bww, s):
            return [*tile_loop_limits(bwd, bww, s), S]

        g1 = NestedLoops(m, "g1", db + 1)
        m.d.comb += self.done.eq(g1.done)
        g1_kt = Signal(db + 1, name="g1_kt")
        g1_nt = Signal(db + 1, name="g1_nt")
        g1_row = Signal(db + lg + 1, name="g1_row")
        m.d.comb += [
            g1_kt.eq(Mux(is_bwd, g1.c[2], g1.c[1])),
            g1_nt.eq(Mux(is_bwd, g1.c[1], g1.c[2])),
            g1_row.eq(Mux(is_bww, (g1.c[0] << lg) | g1.c[3], (g1_kt << lg) | g1.c[3])),
        ]
        r1 = self.req.payload
        # the columns left, dN - nt * S, a walk too (a register: the lane mask's compares
        # start at it, not behind the counter select and a subtract; 13.47 ns estimated into
        # the request register at 210e109)
        rem_wts = [Signal(db + 2, name=f"g1_nrem_stride{j}") for j in range(4)]
        nrem_walk = LineWalk(g1, "g1_nrem", db + 2, rem_wts)
        nmask1 = lanes_below(nrem_walk, S, "g1_nmask")
        # rows past the matrix are zeros; their read stays inside the matrix (its base line),
        # so an engine on a shared scratchpad never touches another matrix's lines
        base1 = Signal.like(g1r["base_b"], name="g1_base")
        m.d.comb += [base1.eq(Mux(is_bww, g1r["base_c"], g1r["base_b"])),
                     r1.zero.eq(g1_row >= Mux(is_bww, g1r["dM"], g1r["dK"]))]
        # the line base1 + row * ldb + nt as a walk of the nest: row = kt * S + r (FWD:
        # kt = c1, nt = c2; BWD_DATA: kt = c2, nt = c1) or mt * S + r (BWD_WEIGHT: mt = c0,
        # nt = c2), so the strides are S * ldb for the tile row, ldb for r and 1 for nt (a
        # register, no multiplier on the way to the request)
        aw = len(r1.addr)
        wts = [Signal(aw, name=f"g1_stride{j}") for j in range(4)]
        walk = LineWalk(g1, "g1_line", aw, wts)
        m.d.comb += r1.addr.eq(Mux(r1.zero, base1, walk.addr))
        m.d.comb += [r1.mask.eq(nmask1), r1.side.eq(0),
                     self.req.valid.eq(self.running & ~g1.done)]
        with m.If(self.req.valid & self.req.ready):
            g1.step()
        # the registers follow ``shape`` while the nest is done; the launch (only then)
        # clears ``done`` (NestedLoops.load)
        with m.If(self.launch):
            m.d.sync += g1.done.eq(0)
        with m.If(g1.done):
            new = self.shape
            new_bwd, new_bww = mode_flags(new.mode)
            m.d.sync += g1.load(limits(new_bwd, new_bww, {k: new[k] for k in g1r}))
            m.d.sync += [r.eq(new[k]) for k, r in g1r.items()]
            m.d.sync += [is_bwd.eq(new_bwd), is_bww.eq(new_bww)]
            ld_s = new.ldb << lg                      # one tile row of S lines
            m.d.sync += [wts[0].eq(ld_s), wts[1].eq(Mux(new_bwd, 1, Mux(new_bww, 0, ld_s))),
                         wts[2].eq(Mux(new_bwd, ld_s, 1)), wts[3].eq(new.ldb)]
            m.d.sync += [rem_wts[0].eq(0), rem_wts[1].eq(Mux(new_bwd, -S, 0)),
                         rem_wts[2].eq(Mux(new_bwd, 0, -S)), rem_wts[3].eq(0)]
            m.d.sync += nrem_walk.restart(new.dN)
            m.d.sync += walk.restart(Mux(new_bww, new.base_c, new.base_b))
        return m
