"""Weight-tile aligner: ``S`` row groups -> one shared tile exponent -> stationary rows."""
from __future__ import annotations

import operator
from functools import reduce

from amaranth.hdl import Cat, Module, Mux, Signal, signed
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
        # alignment shift are registers, loaded a cycle ahead: row 0's as the tile's last row
        # arrives (with the tile exponent that row makes), row r + 1's as row r leaves. So the
        # row select and the exponent subtract are not on the path into the array's weight
        # load; the rows leave in the same cycles.
        # The shift ``d = E_t - E_r`` is kept one-hot (``sh[j]``: d == j; none for d > mm,
        # which rounds every magnitude to 0) and as its thermometer code (``gt[j]``: d > j),
        # and beside each element's magnitude a table of it that needs no shift, loaded with
        # it: ``ones[j, k]`` (bits j .. j + k - 1 all ones). The rounding is then AND-OR terms
        # of registers: q = mag >> d (q[k] = mag[d + k]), half = mag[d - 1], sticky = any
        # mag[j] with d > j + 1, up = half & (sticky | q[0]), and q + up flips bit k when up
        # and q's bits below k are all ones (ones[d, k]), five LUT levels by the estimate
        # where the shift, the compares and the increment were ten (the S = 8 FPGA core's 59
        # end points into the array's weight register at 16.05 ns estimated). (A table of
        # "any bit below j" for the sticky bit, tried first, was mapped as a ripple of ORs
        # behind the row select: 13.55 ns estimated in the S = 8 core.)
        assert S >= 2
        cur = Signal.like(rows[0], name="cur_elems")
        # sh[:mm + 1] one-hot, sh[mm + 1:] the thermometer code (d > j for j < mm)
        sh = Signal(2 * mm + 1, name="align_shift_codes")
        keys = [(j, k) for k in range(1, mm) for j in range(mm - k + 1)]
        ones = [Signal(len(keys), name=f"cur_{n}_ones") for n in range(S)]

        def tables(elems):
            """``ones`` of every element of a row value."""
            return [Cat(*(elems[n].mag[j:j + k].all() for j, k in keys)) for n in range(S)]

        lo = (mm + 1).bit_length()

        def diff_of(tile_exp, row_exp, tag):
            diff = Signal(signed(eb + 1), name=f"exp_diff_{tag}")
            m.d.comb += diff.eq(tile_exp - row_exp)
            return diff

        def shift_of(diff):
            # the shift one-hot (0 for diff < 0; no bit for a shift of mm + 1 or more, which
            # gives 0: q, half and sticky are all 0 then) and its thermometer code: the low
            # bits' decode and compares, with the clamp from the high bits and the sign (no
            # second carry chain after the subtract's)
            neg = diff[-1]
            high = diff[lo:-1].any()
            small = ~neg & ~high
            return Cat(*([neg | (small & (diff[:lo] == 0))]
                         + [small & (diff[:lo] == j) for j in range(1, mm + 1)]
                         + [~neg & (high | (diff[:lo] > j)) for j in range(mm)]))

        # the shifts of rows 0 and 1 are registers loaded as the tile's last row (exponent x)
        # arrives, with the tile exponent max(E_t, x) it makes: both differences at once, and
        # x > E_t (a third carry chain beside them) selects one, so no compare of the clamped
        # shifts comes after the subtracts (15.43 ns into the shift register at 125a66b); rows
        # 2 .. S - 1's from registers that take every row's shift each cycle (valid from the
        # tile's second cycle out: the exponents do not change while it is held). No row
        # select is in front of a subtract (emit_row -> next row's exponent -> subtract ->
        # shift register, 16.2 ns in the aligner alone at S = 8)
        last_in = Signal(name="last_row_in")
        m.d.comb += last_in.eq(self.i.valid & self.i.ready & at_last)
        x = self.i.payload.group.exp
        x_gt = Signal(name="last_row_exp_gt")
        m.d.comb += x_gt.eq(x > e_t)

        def arriving(row_exp, tag):
            return Mux(x_gt, shift_of(diff_of(x, row_exp, f"{tag}_last")),
                       shift_of(diff_of(e_t, row_exp, f"{tag}_kept")))

        sh_1 = Signal.like(sh, name="row_1_shift_onehot")
        with m.If(last_in):                     # (at S = 2, row 1 is the arriving row)
            m.d.sync += sh_1.eq(arriving(x if S == 2 else exps[1], "row_1"))
        sh_next = Signal.like(sh, name="next_row_shift_onehot")
        sh_rows = [sh_1]
        for r in range(2, S):
            sh_r = Signal.like(sh, name=f"row_{r}_shift_onehot")
            m.d.sync += sh_r.eq(shift_of(diff_of(e_t, exps[r], f"row_{r}")))
            sh_rows.append(sh_r)
        # the row that loads next, one-hot (``load_row``: row 0 as the tile's last row
        # arrives, then each next row as one leaves; it turns on every load), so the elements
        # and their tables come through one AND-OR select from registers
        load = Signal(name="load_row_now")
        m.d.comb += load.eq(last_in | (self.o.valid & self.o.ready & (emit != S - 1)))
        load_oh = Signal(S, name="load_row", init=1)
        with m.If(load):
            m.d.sync += load_oh.eq(load_oh.rotate_left(1))
        m.d.comb += sh_next.eq(reduce(operator.or_, (sh_rows[r - 1] & load_oh[r].replicate(len(sh))
                                                     for r in range(1, S))))
        src = Signal.like(rows[0], name="load_row_elems")
        width = len(src.as_value())
        m.d.comb += src.as_value().eq(
            reduce(operator.or_, (rows[r].as_value() & load_oh[r].replicate(width)
                                  for r in range(S))))
        src_ones = tables(src)
        with m.If(last_in):
            m.d.sync += sh.eq(arriving(exps[0], "row_0"))
        with m.Elif(load):
            m.d.sync += sh.eq(sh_next)
        with m.If(load):
            m.d.sync += [cur.eq(src)]
            m.d.sync += [o.eq(v) for o, v in zip(ones, src_ones)]
        out = self.o.payload
        sh_is, sh_gt = sh[:mm + 1], sh[mm + 1:]
        for n in range(S):
            mag = cur[n].mag
            q = Signal(mm, name=f"q_{n}")
            half = Signal(name=f"half_{n}")
            sticky = Signal(name=f"sticky_{n}")
            up = Signal(name=f"up_{n}")
            m.d.comb += [
                q.eq(Cat(*(Cat(*(mag[k + j] & sh_is[j] for j in range(mm - k))).any()
                           for k in range(mm)))),
                half.eq(Cat(*(mag[j] & sh_is[j + 1] for j in range(mm))).any()),
                sticky.eq(Cat(*(mag[j] & sh_gt[j + 1] for j in range(mm - 1))).any()),
                up.eq(half & (sticky | q[0])),
            ]
            for k in range(mm):
                carry = (up if k == 0 else
                         up & Cat(*(ones[n][keys.index((j, k))] & sh_is[j]
                                    for j in range(mm - k + 1))).any())
                m.d.comb += out.wl.w[n].mag[k].eq(q[k] ^ carry)
            m.d.comb += out.wl.w[n].sign.eq(cur[n].sign)
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
            m.d.sync += [bank.eq(0), emit.eq(0), load_oh.eq(1)]
            m.d.comb += count_next.eq(0)
        return m
