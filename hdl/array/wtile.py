"""Weight-tile aligner: ``S`` row groups -> one shared tile exponent -> stationary rows."""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .array import wload_layout
from .config import ArrayConfig
from .quant import group_out_layout

__all__ = ["tile_row_layout", "TileAligner"]


def tile_row_layout(config: ArrayConfig) -> data.StructLayout:
    """One aligned row: the array's ``wload`` payload, the tile exponent, ``last`` row flag and
    the tile's invalid/overflow flags."""
    return data.StructLayout({
        "wl": wload_layout(config), "exp": signed(config.exp_bits), "last": 1,
        "invalid": 1, "overflow": 1,
    })


def gt_const(v, c: int):
    """``v > c`` for an unsigned ``v`` and a constant ``c``, as AND/OR logic over ``v``'s bits
    from the LSB up (yosys maps a ``>`` to a carry chain)."""
    res = Const(0, 1)
    for i in range(len(v)):
        res = (v[i] & res) if (c >> i) & 1 else (v[i] | res)
    if c >> len(v):
        return Const(0, 1)
    return res


class TileAligner(wiring.Component):
    """Collects the ``S`` row groups of a weight tile (row ``r`` = ``W[k0 + r, n0:n0+S]``,
    exponent ``E_r``), takes ``E_t = max_r E_r`` and emits the rows with every magnitude
    aligned to ``E_t``: ``M' = round(M / 2**(E_t - E_r))``, round to nearest even (shifts
    above ``max_mantissa + 1`` clamp there and give 0). Bit-exact with
    :func:`sim.model.array.align_rne` / :func:`sim.model.array.quantize_weight_tile`.

    Tiles alternate between stationary banks 0, 1, 0, ... from ``clear`` on. One tile is held
    at a time: ``S`` cycles to collect, ``S`` cycles to emit.

    Members
    -------
    i : In(stream.Signature(group_out_layout(config, 1, side_bits)))
        Row groups from converter 1.
    o : Out(stream.Signature(tile_row_layout(config)))
        Aligned rows (``o.payload.wl`` is the array's ``wload`` payload).
    clear : In(1)
        Restart at bank 0 (pass start).
    """

    def __init__(self, *, config: ArrayConfig, side_bits: int):
        self.config = config
        self.side_bits = side_bits
        super().__init__({
            "i": In(stream.Signature(group_out_layout(config, 1, side_bits))),
            "o": Out(stream.Signature(tile_row_layout(config))),
            "clear": In(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, mm, eb = cfg.size, cfg.max_mantissa, cfg.exp_bits
        exps = [Signal(signed(eb), name=f"row_{r}_exp") for r in range(S)]
        rows = [Signal(data.ArrayLayout(data.StructLayout({"mag": mm, "sign": 1}), S),
                       name=f"row_{r}_elems") for r in range(S)]
        count = Signal(range(S + 1), name="collected")
        emit = Signal(range(S), name="emit_row")
        bank = Signal(name="bank")
        inv = Signal(name="tile_invalid")
        ovf = Signal(name="tile_overflow")
        # ``count == S`` and ``count == S - 1`` as registers beside the count (decoded from its
        # next value): the tile's last row's arrival was ahead of the alignment shift's load,
        # the S = 8 FPGA core's slowest estimated paths into this block (15.45 ns at 73bcd20)
        full = Signal(name="full")
        at_last = Signal(name="collected_last")
        count_next = Signal.like(count, name="collected_next")
        m.d.sync += [count.eq(count_next), full.eq(count_next == S),
                     at_last.eq(count_next == S - 1)]
        m.d.comb += count_next.eq(count)

        m.d.comb += self.i.ready.eq(~full)
        with m.If(self.i.valid & self.i.ready):
            for r in range(S):
                with m.If(count == r):
                    m.d.sync += [exps[r].eq(self.i.payload.group.exp),
                                 rows[r].eq(self.i.payload.group.elems)]
            m.d.comb += count_next.eq(count + 1)
            with m.If(count == 0):
                m.d.sync += [inv.eq(self.i.payload.invalid), ovf.eq(self.i.payload.overflow)]
            with m.Else():
                m.d.sync += [inv.eq(inv | self.i.payload.invalid),
                             ovf.eq(ovf | self.i.payload.overflow)]

        # tile exponent: the maximum of the row exponents, kept as a running maximum while
        # the rows arrive (a register when the tile is emitted, not a comparator tree in
        # front of the alignment: that tree was on the path into the array's weight load)
        e_t = Signal(signed(eb), name="tile_exp")
        with m.If(self.i.valid & self.i.ready):
            x = self.i.payload.group.exp
            m.d.sync += e_t.eq(Mux((count == 0) | (x > e_t), x, e_t))

        # the row being emitted, aligned with round-to-nearest-even. Its elements and its
        # alignment shift ``min(E_t - E_r, mm + 1)`` are registers, loaded a cycle ahead: row 0's
        # as the tile's last row arrives (with the tile exponent that row makes), row r + 1's
        # as row r leaves. So the row select and the exponent subtract are not on the path
        # into the array's weight load; the rows leave in the same cycles.
        assert S >= 2
        cur = Signal.like(rows[0], name="cur_elems")
        d = Signal(range(mm + 2), name="align_shift")
        # ``align_shift > j`` for j = 0 .. mm, registered beside the shift (its thermometer
        # code): the rounding's half and sticky bits are AND-OR terms of it and the magnitude
        # instead of a compare behind the shift (nine LUT levels from the shift register into
        # the array's weight load register at 125a66b, 14.7 ns, the S = 8 FPGA core's 47 end
        # points)
        t = Signal(mm + 1, name="align_shift_gt")

        lo = (mm + 1).bit_length()

        def diff_of(tile_exp, row_exp, tag):
            diff = Signal(signed(eb + 1), name=f"exp_diff_{tag}")
            m.d.comb += diff.eq(tile_exp - row_exp)
            return diff

        def gt(diff, c):
            # diff > c for a constant 0 <= c < 2**lo: tests the bits of the difference (no
            # second carry chain after the subtract's)
            return ~diff[-1] & (diff[lo:-1].any() | gt_const(diff[:lo], c))

        def shift_of(diff):
            # min(diff, mm + 1) for diff >= 0 (0 for diff < 0) and its thermometer code
            return (Mux(diff[-1], 0, Mux(gt(diff, mm + 1), mm + 1, diff[:lo])),
                    Cat(*(gt(diff, j) for j in range(mm + 1))))

        nxt_elems = Signal.like(rows[0], name="next_row_elems")
        with m.Switch(emit):
            for r in range(1, S):
                with m.Case(r - 1):
                    m.d.comb += nxt_elems.eq(rows[r])
        # the next row's shift: row 1's from the tile exponent as row 0 leaves (the tile's
        # first cycle out, the tile exponent a register since the cycle before), rows 2 ..
        # S - 1's from registers that take every row's shift each cycle (valid from the
        # tile's second cycle out: the exponents do not change while it is held). The row
        # select is not in front of the subtract (emit_row -> next row's exponent -> subtract
        # -> shift register, 16.2 ns in the aligner alone at S = 8)
        d_next = Signal.like(d, name="next_row_shift")
        t_next = Signal.like(t, name="next_row_shift_gt")
        d_1, t_1 = shift_of(diff_of(e_t, exps[1], "row_1"))
        d_rows, t_rows = [d_1], [t_1]
        for r in range(2, S):
            d_r = Signal.like(d, name=f"row_{r}_shift")
            t_r = Signal.like(t, name=f"row_{r}_shift_gt")
            d_c, t_c = shift_of(diff_of(e_t, exps[r], f"row_{r}"))
            m.d.sync += [d_r.eq(d_c), t_r.eq(t_c)]
            d_rows.append(d_r)
            t_rows.append(t_r)
        with m.Switch(emit):
            for r in range(1, S):
                with m.Case(r - 1):
                    m.d.comb += [d_next.eq(d_rows[r - 1]), t_next.eq(t_rows[r - 1])]
        last_in = Signal(name="last_row_in")
        m.d.comb += last_in.eq(self.i.valid & self.i.ready & at_last)
        x = self.i.payload.group.exp
        # row 0's shift with the tile exponent max(E_t, x) that the last row x makes: both
        # differences at once, and x > E_t (a third carry chain beside them) selects one, so no
        # compare of the clamped shifts comes after the subtracts (15.43 ns into the shift
        # register at 125a66b)
        x_gt = Signal(name="last_row_exp_gt")
        m.d.comb += x_gt.eq(x > e_t)
        d_kept, t_kept = shift_of(diff_of(e_t, exps[0], "kept"))
        d_last, t_last = shift_of(diff_of(x, exps[0], "last"))
        with m.If(last_in):
            m.d.sync += [cur.eq(rows[0]), d.eq(Mux(x_gt, d_last, d_kept)),
                         t.eq(Mux(x_gt, t_last, t_kept))]
        with m.Elif(self.o.valid & self.o.ready & (emit != S - 1)):
            m.d.sync += [cur.eq(nxt_elems), d.eq(d_next), t.eq(t_next)]
        out = self.o.payload
        # round to nearest even of mag / 2**d: q = mag >> d, half = mag[d - 1],
        # sticky = any of mag[0 .. d - 2], up = half & (sticky | q[0]); with t[j] = d > j,
        # d == j + 1 is t[j] & ~t[j + 1] and j < d - 1 is t[j + 1] (d = mm + 1: half is
        # mag[mm] = 0, so the clamp gives 0)
        def d_is(k):                                 # d == k, 0 <= k <= mm
            return ~t[0] if k == 0 else t[k - 1] & ~t[k]
        for n in range(S):
            mag = cur[n].mag
            q = Signal(mm, name=f"q_{n}")
            half = Signal(name=f"half_{n}")
            sticky = Signal(name=f"sticky_{n}")
            q0 = Signal(name=f"q0_{n}")
            m.d.comb += [
                q.eq(mag >> d),
                half.eq(Cat(*(mag[j] & d_is(j + 1) for j in range(mm))).any()),
                sticky.eq(Cat(*(mag[j] & t[j + 1] for j in range(mm - 1))).any()),
                q0.eq(Cat(*(mag[j] & d_is(j) for j in range(mm))).any()),
                out.wl.w[n].mag.eq(q + (half & (sticky | q0))),
                out.wl.w[n].sign.eq(cur[n].sign),
            ]
        m.d.comb += [
            self.o.valid.eq(full),
            out.wl.row.eq(emit), out.wl.bank.eq(bank), out.exp.eq(e_t),
            out.last.eq(emit == S - 1), out.invalid.eq(inv), out.overflow.eq(ovf),
        ]
        with m.If(self.o.valid & self.o.ready):
            with m.If(emit == S - 1):
                m.d.sync += [emit.eq(0), bank.eq(~bank)]
                m.d.comb += count_next.eq(0)
            with m.Else():
                m.d.sync += emit.eq(emit + 1)
        with m.If(self.clear):
            m.d.sync += [bank.eq(0), emit.eq(0)]
            m.d.comb += count_next.eq(0)
        return m
