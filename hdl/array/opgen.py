"""Generator 0 of the matmul engine: the streamed operand's line requests, with the result
line each one contributes to (quantizer 0's sideband)."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .config import BWD_DATA, FWD, ArrayConfig
from .control import pass_shape_layout
from .loops import LineWalk, NestedLoops, mode_flags, tile_loop_limits
from .quant import line_req_layout

__all__ = ["operand_side_layout", "OperandLineGen"]


def operand_side_layout(config: ArrayConfig) -> data.StructLayout:
    """Sideband of a streamed operand line: the output line ``addr`` and lanes ``mask`` of its
    beat, ``first`` (the first contribution to that line: add to ``+0.0``), ``last`` (the
    last line of a weight tile's beats); BWD_WEIGHT: ``rows`` (valid rows of the dW block) and
    ``stride`` (lines per row of B)."""
    S, depth, db = config.size, config.mem_depth, config.dim_bits
    return data.StructLayout({"addr": range(depth), "mask": S, "first": 1, "last": 1,
                              "rows": range(S + 1), "stride": db})


def lanes_below(walk, S, name):
    """``S``-bit mask of the lanes ``j < limit``, ``limit`` the :class:`LineWalk` ``walk``'s
    address (signed): a register the walk keeps (:meth:`LineWalk.track`), so the compares
    are ahead of it, not between the walk's register and the request (108 end points, 10
    LUT levels, at 14.9 ns estimated into the request register of the S = 8 FPGA core)."""
    return walk.track(lambda v: Cat(*[v.as_signed() > j for j in range(S)]), S, name)


class OperandLineGen(wiring.Component):
    """Line requests of the streamed operand (path 0), in the pass's fixed order.

    * FWD: ``for kt: for nt: for m``: line ``(m, kt)`` of X (A); the beat's output is line
      ``(m, nt)`` of Y (C).
    * BWD_DATA: ``for nt: for kt: for m``: line ``(m, nt)`` of dY (C); output line ``(m, kt)``
      of dX (A).
    * BWD_WEIGHT: ``for mt: for kt: for nt: for j < S``: line ``(mt*S + j, kt)`` of X (A,
      zeros past ``M``), one block of ``S`` lines per dW tile ``(kt, nt)`` of B.

    The shape and mode are loaded from ``shape`` on ``launch``; requests are offered while
    ``running`` until the loop nest is done.

    Parameters
    ----------
    config : ArrayConfig

    Members
    -------
    req : Out(stream.Signature(line_req_layout(config, operand_side_layout(config).size)))
        To quantizer 0; ``side`` is an :func:`operand_side_layout`.
    running : In(1)
    launch : In(1)
    shape : In(pass_shape_layout(config))
    done : Out(1)
        All requests of the pass issued (1 after reset).
    """

    def __init__(self, *, config: ArrayConfig):
        self.config = config
        super().__init__({
            "req": Out(stream.Signature(
                line_req_layout(config, operand_side_layout(config).size))),
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
        mode = Signal(2, name="g0_mode")
        is_bwd, is_bww = Signal(name="is_bwd_data"), Signal(name="is_bww")
        side0 = operand_side_layout(cfg)

        shp = pass_shape_layout(cfg)
        names = {"dM": "dim_m", "dK": "dim_k", "dN": "dim_n", "MT": "tiles_m", "KT": "tiles_k",
                 "NT": "tiles_n", "lda": "ld_a", "ldb": "ld_bc", "base_a": "base_a",
                 "base_b": "base_b", "base_c": "base_c", "accum": "accumulate"}
        regs = {k: Signal(shp[k].shape, name=n) for k, n in names.items()}
        dM, dK, dN = regs["dM"], regs["dK"], regs["dN"]
        MT, KT, NT = regs["MT"], regs["KT"], regs["NT"]
        lda, ldb, accum = regs["lda"], regs["ldb"], regs["accum"]
        base_a, base_b, base_c = regs["base_a"], regs["base_b"], regs["base_c"]

        def limits(bwd, bww, s):
            return [*tile_loop_limits(bwd, bww, s), Mux(bww, S, s["dM"])]

        g0 = NestedLoops(m, "g0", db + 1)
        m.d.comb += self.done.eq(g0.done)
        g0_kt = Signal(db + 1, name="g0_kt")
        g0_nt = Signal(db + 1, name="g0_nt")
        g0_m = Signal(db + lg + 1, name="g0_row")
        m.d.comb += [
            g0_kt.eq(Mux(is_bwd, g0.c[2], g0.c[1])),
            g0_nt.eq(Mux(is_bwd, g0.c[1], g0.c[2])),
            g0_m.eq(Mux(is_bww, (g0.c[0] << lg) | g0.c[3], g0.c[3])),
        ]
        r0 = self.req.payload
        s0 = Signal(side0, name="g0_side")
        # the rows and columns left, dK - kt * S and dN - nt * S, walks too (registers: the
        # lane masks' compares start at them, not behind the counter select and a subtract)
        k_wts = [Signal(db + 2, name=f"g0_krem_stride{j}") for j in range(4)]
        n_wts = [Signal(db + 2, name=f"g0_nrem_stride{j}") for j in range(4)]
        krem_walk = LineWalk(g0, "g0_krem", db + 2, k_wts)
        nrem_walk = LineWalk(g0, "g0_nrem", db + 2, n_wts)
        kmask0 = lanes_below(krem_walk, S, "g0_kmask")
        nmask0 = lanes_below(nrem_walk, S, "g0_nmask")
        # BWD_WEIGHT's valid rows of the dW block, min(dK - kt * S, S), kept the same way
        rows0 = krem_walk.track(lambda v: Mux(v.as_signed() > S, S, v.as_signed()),
                                range(S + 1), "g0_rows")
        # both lines as walks of the nest (registers, no multiplier on the way to the
        # request): FWD r = (m, kt) of A: base_a + c3 * lda + c1, s = (m, nt) of C: base_c +
        # c3 * ldb + c2; BWD_DATA the same with A and C swapped (nt = c1, kt = c2);
        # BWD_WEIGHT r = (c0 * S + c3, kt) of A: base_a + c0 * S * lda + c3 * lda + c1, s =
        # (kt * S, nt) of B: base_b + c1 * S * ldb + c2
        aw = len(r0.addr)
        r_wts = [Signal(aw, name=f"g0_r_stride{j}") for j in range(4)]
        s_wts = [Signal(aw, name=f"g0_s_stride{j}") for j in range(4)]
        r_walk = LineWalk(g0, "g0_r_line", aw, r_wts)
        s_walk = LineWalk(g0, "g0_s_line", aw, s_wts)
        with m.Switch(mode):
            with m.Case(FWD):
                m.d.comb += [
                    r0.addr.eq(r_walk.addr), r0.zero.eq(0), r0.mask.eq(kmask0),
                    s0.addr.eq(s_walk.addr), s0.mask.eq(nmask0),
                    s0.first.eq((g0_kt == 0) & ~accum), s0.last.eq(g0.last[3]),
                ]
            with m.Case(BWD_DATA):
                m.d.comb += [
                    r0.addr.eq(r_walk.addr), r0.zero.eq(0), r0.mask.eq(nmask0),
                    s0.addr.eq(s_walk.addr), s0.mask.eq(kmask0),
                    s0.first.eq((g0_nt == 0) & ~accum), s0.last.eq(g0.last[3]),
                ]
            with m.Default():
                # rows past M are zeros: their read stays inside the matrix (line base_a),
                # so an engine on a shared scratchpad never touches another matrix's lines
                m.d.comb += [
                    r0.addr.eq(Mux(g0_m >= dM, base_a, r_walk.addr)),
                    r0.zero.eq(g0_m >= dM), r0.mask.eq(kmask0),
                    s0.addr.eq(s_walk.addr), s0.mask.eq(nmask0),
                    s0.first.eq((g0.c[0] == 0) & ~accum), s0.last.eq(1),
                    s0.rows.eq(rows0), s0.stride.eq(ldb),
                ]
        m.d.comb += [r0.side.eq(s0), self.req.valid.eq(self.running & ~g0.done)]
        with m.If(self.req.valid & self.req.ready):
            g0.step()
        # the registers follow ``shape`` while the nest is done; the launch (only then)
        # clears ``done`` (NestedLoops.load)
        with m.If(self.launch):
            m.d.sync += g0.done.eq(0)
        with m.If(g0.done):
            new = self.shape
            new_bwd, new_bww = mode_flags(new.mode)
            m.d.sync += g0.load(limits(new_bwd, new_bww, {k: new[k] for k in regs}))
            m.d.sync += [r.eq(new[k]) for k, r in regs.items()]
            m.d.sync += [mode.eq(new.mode), is_bwd.eq(new_bwd), is_bww.eq(new_bww)]
            # strides (see the walks above); c0 only moves in BWD_WEIGHT
            a_s, b_s = new.lda << lg, new.ldb << lg
            m.d.sync += [
                r_wts[0].eq(a_s), r_wts[1].eq(1), r_wts[2].eq(0),
                r_wts[3].eq(Mux(new_bwd, new.ldb, new.lda)),
                s_wts[0].eq(0), s_wts[1].eq(Mux(new_bww, b_s, 0)),
                s_wts[2].eq(1),
                s_wts[3].eq(Mux(new_bww, 0, Mux(new_bwd, new.lda, new.ldb))),
                # kt is c1 (c2 in BWD_DATA), nt c2 (c1 in BWD_DATA)
                k_wts[0].eq(0), k_wts[1].eq(Mux(new_bwd, 0, -S)),
                k_wts[2].eq(Mux(new_bwd, -S, 0)), k_wts[3].eq(0),
                n_wts[0].eq(0), n_wts[1].eq(Mux(new_bwd, -S, 0)),
                n_wts[2].eq(Mux(new_bwd, 0, -S)), n_wts[3].eq(0),
            ]
            m.d.sync += [*krem_walk.restart(new.dK), *nrem_walk.restart(new.dN)]
            m.d.sync += r_walk.restart(Mux(new_bwd, new.base_c, new.base_a))
            m.d.sync += s_walk.restart(Mux(new_bww, new.base_b, Mux(new_bwd, new.base_a,
                                                                      new.base_c)))
        return m
