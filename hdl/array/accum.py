"""Output accumulator: exact array results -> FP32 (edge converters) -> RNE add into the output
scratchpad (read-modify-write of one line per cycle)."""
from __future__ import annotations

from amaranth.hdl import Array, Cat, Const, Module, Mux, Signal, Value, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..edge_converter import EdgeConfig, EdgeConverter, edge_value_shape
from ..fp32.add import FP32Add
from ..lib.blockfifo import RegBlockFIFO
from .config import ArrayConfig

__all__ = ["acc_in_layout", "line_ahead_signature", "OutputAccumulator"]


def acc_in_layout(config: ArrayConfig) -> data.StructLayout:
    """One result line: exact chains ``value[l]`` (two's complement, or magnitude and sign
    with ``config.out_magnitude``) with exponents ``exp[l]`` (value
    ``value * 2**exp``), the target line ``addr``, lanes to write ``mask``, ``first`` (add to
    ``+0.0`` instead of the stored word) and ``write`` (0: drop the line, e.g. padding rows)."""
    S = config.size
    return data.StructLayout({
        "value": data.ArrayLayout(edge_value_shape(config.acc_bits, config.out_magnitude), S),
        "exp": data.ArrayLayout(signed(config.edge_exp_bits), S),
        "addr": range(config.mem_depth), "mask": S, "first": 1, "write": 1,
    })


def line_ahead_signature(config: ArrayConfig) -> wiring.Signature:
    """The producer's next two lines for the accumulator's ``i``, each its ``valid`` (the
    producer knows the line), ``addr`` and ``write`` flag: ``head``, the line on ``i`` (while
    ``i.valid`` is low: the line it will present next), and ``next``, the line after it. A
    producer that knows no line ahead drives ``head`` from ``i`` (valid with ``i.valid``)
    and leaves ``next.valid`` low."""
    line = wiring.Signature({"valid": Out(1), "addr": Out(range(config.mem_depth)),
                             "write": Out(1)})
    return wiring.Signature({"head": Out(line), "next": Out(line)})


class OutputAccumulator(wiring.Component):
    """``mem[addr][l] = fp32(mem[addr][l] or +0.0) + fp32(value[l] * 2**exp[l])`` per line.

    ``P = config.acc_lanes`` (``S`` when 0) :class:`hdl.edge_converter.EdgeConverter` (RNE) and
    ``P`` :class:`hdl.fp32.add.FP32Add` (RNE, bit-exact with numpy float32) work in lockstep on
    ``P`` words of a line per cycle: one line per cycle with ``P = S``, one per ``S / P``
    cycles with fewer lanes (a line's parts, lanes ``k*P .. k*P + P - 1``, enter in order
    while the line waits on ``i``; its old value is read once, each part written with its
    lanes' enables). A line whose
    ``addr`` is still in flight (read but not yet written back) waits, so repeated updates of
    one line are applied in arrival order (the golden model's accumulation order). At most
    ``DEPTH`` lines are in flight.

    The in-flight check is a register: each cycle it is computed for the line on ``i`` in
    the next cycle (``ahead.next`` if the line on ``i`` is taken now, else ``ahead.head``)
    against the in-flight set of the next cycle (the line starting now added, the line
    retiring now removed), so no address compare lies between ``i`` and the edge converters,
    the scratchpad read or the ring, and ``i.valid`` only selects between two finished
    checks. A line whose check was not computed ahead (that line's ``valid`` was low) waits
    one cycle at its first part while it is.

    Members
    -------
    i : In(stream.Signature(acc_in_layout(config)))
        Result lines.
    rd_addr : Out(range(mem_depth)), rd_en : Out(1), rd_data : In(S * 32)
        Read port of the output scratchpad (``mem_latency``), driven from registers: a
        line's old value is read in the cycle after the line is accepted (with
        ``mem_latency = 3`` in the cycle it starts, into the port's request register).
    wr_addr : Out(range(mem_depth)), wr_en : Out(S), wr_data : Out(S * 32)
        Write port (one enable per 32-bit lane).
    busy : Out(1)
        Lines in flight.
    retire : Out(1)
        A line leaves the accumulator this cycle (written back, or dropped when its ``write``
        flag is clear): one strobe per accepted line, in order.
    hazard : Out(1)
        A valid input waits for an in-flight line (for the stall counter).
    ahead : In(line_ahead_signature(config))
        The producer's next two lines (:func:`line_ahead_signature`). With only ``head``
        (driven from ``i``), each line waits one cycle for its check.
    """

    DEPTH = 16

    def __init__(self, *, config: ArrayConfig):
        self.config = config
        self.edge_config = EdgeConfig(int_bits=config.acc_bits, exp_bits=config.edge_exp_bits)
        super().__init__({
            "i": In(stream.Signature(acc_in_layout(config))),
            "rd_addr": Out(range(config.mem_depth)), "rd_en": Out(1),
            "rd_data": In(config.size * 32),
            "wr_addr": Out(range(config.mem_depth)), "wr_en": Out(config.size),
            "wr_data": Out(config.size * 32),
            "busy": Out(1), "retire": Out(1), "hazard": Out(1),
            "ahead": In(line_ahead_signature(config)),
        })

    @property
    def latency(self) -> int:
        """Cycles from a line's first part entering the edge converters to its last part's
        write: ``EdgeConverter.LATENCY + FP32Add latency + 1 + (parts - 1)``."""
        parts = self.config.size // (self.config.acc_lanes or self.config.size)
        return EdgeConverter.LATENCY + FP32Add().latency + 1 + parts - 1

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, D = cfg.size, self.DEPTH
        P = cfg.acc_lanes or S            # edge converter + adder lanes
        F = S // P                        # parts of a line, one per cycle
        edges = [EdgeConverter(config=self.edge_config, magnitude=cfg.out_magnitude)
                 for _ in range(P)]
        adds = [FP32Add() for _ in range(P)]
        for lane in range(P):
            m.submodules[f"edge_{lane}"] = edges[lane]
            m.submodules[f"add_{lane}"] = adds[lane]

        # one entry per part of a line in the metadata FIFOs (``part``, ``last``: the line's
        # last part), one per line in the old-line FIFO
        meta = data.StructLayout({"addr": range(cfg.mem_depth), "mask": S, "first": 1,
                                  "write": 1, "part": range(F), "last": 1})
        # In block RAM with the head in a register (RegBlockFIFO: an entry is readable
        # VISIBLE = 3 cycles after its write; the block RAM's slow read data reaches only that
        # register, not the old-word select and the adders' inputs), each read no earlier: a
        # part's meta1 entry (written as it enters the edge converters) at its join,
        # EdgeConverter.LATENCY later; the old line's part k (written k + 2 cycles after the
        # line starts) at part k's join; a part's meta2 entry (written at its join) when its sum
        # leaves the adder. So no cycle changes. Each holds at most the few entries of those
        # windows, far below its depth - 2 (the depth a RegBlockFIFO always takes one below).
        # With ``decouple`` (a second register stage; the block RAM part read only into it
        # while it is empty) the join (or write back) that reads them does not reach their
        # block RAM parts' read ports, pointers and levels (the old-line FIFO's level, 14.23 ns,
        # was the S = 4 FPGA core's routed critical path at dd69ac6: the join through the
        # head's refill into the block RAM part); one more entry each keeps the block RAM
        # part's size and the room of depth - 2.
        V = RegBlockFIFO.VISIBLE
        # the old line's read: one cycle after the line starts, from registers (below), or
        # with a port of read latency 3 in the start cycle itself, so that its data still
        # reaches the old-line FIFO's head by the join (the port registers the request
        # before the crossbar then: the in-flight check stays off a bank's address)
        early = 1 + cfg.mem_latency + V > EdgeConverter.LATENCY
        assert EdgeConverter.LATENCY >= (not early) + cfg.mem_latency + V
        assert adds[0].latency >= V
        meta1 = m.submodules.meta1 = RegBlockFIFO(width=meta.size, depth=D * F + 1,
                                                  decouple=True)
        meta2 = m.submodules.meta2 = RegBlockFIFO(width=meta.size, depth=D * F + 1,
                                                  decouple=True)
        # the old line, one entry per part (P words; its parts written on consecutive cycles,
        # below): the adders' old operand is the head register itself, with no F:1 part
        # select between it and their unpack step (that select, from ``join_part``, began the
        # S = 8 FPGA core's estimated accumulator paths, 15.6 ns)
        old = m.submodules.old = RegBlockFIFO(width=P * 32, depth=D * F + 1, decouple=True)

        # ---- in-flight addresses (in order: a ring of DEPTH entries) -------------------------
        ring_addr = [Signal(range(cfg.mem_depth), name=f"inflight_{j}_addr") for j in range(D)]
        ring_valid = [Signal(name=f"inflight_{j}_valid") for j in range(D)]
        tail = Signal(range(D), name="ring_tail")
        count = Signal(range(D + 1), name="inflight")
        p = self.i.payload
        # a line enters the edge converters one part per cycle (part 0 .. F - 1) while it
        # stays on ``i``; it is checked (in-flight, room) at part 0 and taken at part F - 1
        # (``part == 0`` and ``part == F - 1`` in registers of their own beside ``part``: the
        # check's gate and ``accept`` start at a flip-flop, not at a compare of ``part``)
        part = Signal(range(F), name="in_part")
        first_part = Signal(name="in_first_part", init=1)
        last_part = Signal(name="in_last_part", init=int(F == 1))
        in_ok = Signal(name="in_ok")
        feed = Signal(name="feed")              # a part enters the edge converters
        start = Signal(name="line_start")       # ... the line's first
        accept = Signal(name="accept")          # ... its last: the line leaves ``i``
        # the check of the line on ``i``, computed in the cycle before (below): ``known``
        # (computed for this line), ``wait`` (it writes a line still in flight)
        known = Signal(name="check_known")
        wait = Signal(name="check_wait")
        room = Signal(name="ring_room", init=1)    # count + the new entry < D (below)
        m.d.comb += [
            in_ok.eq(~first_part | (room & known & ~wait)),
            self.hazard.eq(self.i.valid & first_part & known & wait),
            # the edge converters and adders are never stalled (below), so always ready
            feed.eq(self.i.valid & in_ok),
            start.eq(feed & first_part),
        ]
        if F > 1:
            # the last part is never the first: the check does not gate it, so ``accept``
            # (the select of the next check, below; the descriptor FIFO's read) comes from the
            # last-part register and ``i.valid`` alone, not through ``in_ok`` from the check's
            # registers (the S = 8 matmul engine's routed critical path at 9fbddb2, 11.83 ns,
            # ran in_part -> in_ok -> accept -> the check's select into check_wait)
            m.d.comb += self.i.ready.eq(last_part)
            with m.If(feed):
                m.d.sync += [part.eq(Mux(last_part, 0, part + 1)), first_part.eq(last_part),
                             last_part.eq(part == F - 2)]
        else:
            m.d.comb += self.i.ready.eq(in_ok)
        m.d.comb += accept.eq(self.i.valid & self.i.ready)

        def of_part(items, index):
            """``items[index]`` (one item per part; the only item when F = 1)."""
            items = list(items)
            return Array(items)[index] if F > 1 else items[0]

        # the old line is read one cycle after the line starts, from registers: the in-flight
        # check (16 address compares) does not reach a bank's address in the same cycle. Its
        # data reaches the old-line FIFO two cycles after the line starts and its head
        # 2 + RegBlockFIFO.VISIBLE cycles after, no later than the edge converters' output
        # (asserted above), so no line waits for it.
        rd_en = Signal(name="read_issue")
        rd_addr = Signal.like(self.rd_addr, name="read_addr")
        rd_first = Signal(name="read_first")    # the line's ``first``: its old value is +0
        m.d["comb" if early else "sync"] += [rd_en.eq(start), rd_addr.eq(p.addr),
                                             rd_first.eq(p.first)]
        m.d.comb += [self.rd_addr.eq(rd_addr), self.rd_en.eq(rd_en)]
        for lane in range(P):
            value = of_part((Value.cast(p.value[k * P + lane]) for k in range(F)), part)
            exp = of_part((p.exp[k * P + lane] for k in range(F)), part)
            m.d.comb += [
                edges[lane].i.valid.eq(self.i.valid & in_ok),
                edges[lane].i.payload.eq(Cat(value, exp)),
            ]
        m.d.comb += [meta1.w_en.eq(feed),
                     meta1.w_data.eq(Cat(p.addr, p.mask, p.first, p.write, part, last_part))]
        read_pending = rd_en                    # the old line's data is on rd_data now
        read_first = rd_first
        for k in range(cfg.mem_latency):
            nxt = Signal(name=f"read_pending{k}")
            nxt_first = Signal(name=f"read_first{k}")
            m.d.sync += [nxt.eq(read_pending), nxt_first.eq(read_first)]
            read_pending, read_first = nxt, nxt_first
        # a ``first`` line's old value enters the FIFO as +0, so the adders' input is the FIFO
        # head's part, with no ``first`` select behind the part select (the S = 4 FPGA core's
        # routed critical path at 125a66b, 13.77 ns: meta1's ``first`` through the select
        # into the adder's unpack step)
        old_line = Signal(S * 32, name="old_line")
        m.d.comb += old_line.eq(Mux(read_first, 0, self.rd_data))
        if F == 1:
            m.d.comb += [old.w_en.eq(read_pending), old.w_data.eq(old_line)]
        else:
            # part 0 is written as the line's data arrives, parts 1 .. F - 1 on the next
            # F - 1 cycles from a register shifted by a part per cycle. Reads arrive at most
            # one per F cycles (a line holds ``i`` for its F parts), so the shift is done
            # before the next line's data. Part k reaches the FIFO's head k cycles after part
            # 0, and its join is no earlier than that: no line waits for it.
            rest = Signal((F - 1) * P * 32, name="old_rest")
            rest_parts = Signal(range(F), name="old_rest_parts")
            with m.If(read_pending):
                m.d.sync += [rest.eq(old_line[P * 32:]), rest_parts.eq(F - 1)]
            with m.Elif(rest_parts != 0):
                m.d.sync += [rest.eq(rest >> (P * 32)), rest_parts.eq(rest_parts - 1)]
            m.d.comb += [old.w_en.eq(read_pending | (rest_parts != 0)),
                         old.w_data.eq(Mux(read_pending, old_line[:P * 32], rest[:P * 32]))]
        # The line starting now enters the ring a cycle later, from registers (``new_*``):
        # ``start`` (behind the producer's valid and the check) then loads these few, not
        # every entry's address and valid and the tail (the S = 4 FPGA core's 16 + 148 end
        # points at 10.7-11.9 ns routed at 9de3820); the check below counts the new entry
        # beside the ring's, and the count of lines in flight takes it in with the ring.
        new_valid = Signal(name="ring_new_valid")
        new_addr = Signal.like(ring_addr[0], name="ring_new_addr")
        new_write = Signal(name="ring_new_write")
        m.d.sync += new_valid.eq(start)
        with m.If(start):
            m.d.sync += [new_addr.eq(p.addr), new_write.eq(p.write)]
        with m.If(new_valid):
            for j in range(D):
                with m.If(tail == j):
                    m.d.sync += [ring_addr[j].eq(new_addr), ring_valid[j].eq(new_write)]
            m.d.sync += tail.eq(Mux(tail == D - 1, 0, tail + 1))

        # ---- join edge outputs with the old line: FP32 adds ---------------------------------
        # No backpressure inside: a part leaves the edge converters into the adders, and the
        # adders into the write port, the cycle it is ready. What a join needs is there by
        # then: the old line (at the head of its FIFO 2 + RegBlockFIFO.VISIBLE cycles after the
        # line started, no later than its first part's result), the part's meta1 entry
        # (written as it entered), room in meta2 (D * F entries; it holds the parts inside
        # the adders, a few). So no ready
        # chain runs back through the S pipelines into ``i.ready`` and the crossbar. (Were one
        # of these not ready, the part would be dropped: its line never retires and the pass
        # never answers, which every test's deadline catches.)
        join = Signal(name="add_join")
        m.d.comb += join.eq(Cat(*[e.o.valid for e in edges]).all() & old.r_rdy & meta1.r_rdy
                            & meta2.w_rdy)
        # the joins take the parts in order, 0 .. F - 1 for every line (meta1's entries are
        # written in that order, and the old line's parts): each join reads one entry of each
        for lane in range(P):
            m.d.comb += [
                edges[lane].o.ready.eq(1),
                adds[lane].i.valid.eq(join),
                adds[lane].i.payload.a.eq(old.r_data.word_select(lane, 32)),
                adds[lane].i.payload.b.eq(edges[lane].o.payload),
                adds[lane].i.payload.sub.eq(0),
            ]
        m.d.comb += [old.r_en.eq(join), meta1.r_en.eq(join),
                     meta2.w_en.eq(join), meta2.w_data.eq(meta1.r_data)]

        # ---- write back: each part's lanes (the P sums repeated across the line) ------------
        m2 = Signal(meta, name="meta2_head")
        m.d.comb += m2.eq(meta2.r_data)
        done = Signal(name="write_back")
        m.d.comb += done.eq(Cat(*[a.o.valid for a in adds]).all() & meta2.r_rdy)
        for lane in range(P):
            m.d.comb += adds[lane].o.ready.eq(1)
            for k in range(F):
                m.d.comb += self.wr_data.word_select(k * P + lane, 32).eq(adds[lane].o.payload)
        part_lanes = Signal(S, name="write_part_lanes")
        m.d.comb += part_lanes.eq(of_part((Const(((1 << P) - 1) << (k * P), S)
                                           for k in range(F)), m2.part))
        retire = Signal(name="retire_line")
        m.d.comb += [
            meta2.r_en.eq(done),
            self.wr_addr.eq(m2.addr),
            self.wr_en.eq(Mux(done & m2.write, m2.mask & part_lanes, 0)),
            retire.eq(done & m2.last),
            self.retire.eq(retire),
        ]
        # the ring's head (oldest entry) as a one-hot register: the in-flight check below ORs
        # the entries' compares with it, with no decode of a head index and no D:1 select
        head_oh = Signal(D, name="ring_head_onehot", init=1)
        with m.If(retire):
            for j in range(D):
                with m.If(head_oh[j]):
                    m.d.sync += ring_valid[j].eq(0)
            m.d.sync += head_oh.eq(head_oh.rotate_left(1))

        # ---- the check for the next cycle's line ----------------------------------------------
        # The in-flight set of the next cycle: each entry still valid and not retiring now,
        # plus the line starting now. The next cycle's line is ``ahead.next`` if the line on
        # ``i`` is taken now; else ``ahead.head``: the line on ``i`` (it keeps its address, a
        # stream rule; if it started now, F > 1, its later parts are not checked), or the
        # line to come while ``i`` is idle (nothing starts then).
        # The retiring line (the head entry) is taken out last: the entries' compares are
        # ORed in two sets, the head entry's and the others' (AND-OR with the head's one-hot
        # register), so the adders' output valid (add_1.o.valid -> retire, 15.45 ns est. into
        # check_wait at 827b689's S = 4 FPGA core) enters at the last gate
        # The new entry (a line that started in the cycle before) is never the retiring one:
        # a line takes the edge converters' and the adders' latency to retire.
        def in_flight(addr):
            match = [ring_valid[j] & (ring_addr[j] == addr) for j in range(D)]
            others = Cat(*[match[j] & ~head_oh[j] for j in range(D)],
                         new_valid & new_write & (new_addr == addr)).any()
            at = Cat(*[match[j] & head_oh[j] for j in range(D)]).any()
            return others | (at & ~retire)

        hd, nx = self.ahead.head, self.ahead.next
        wait_head = Signal(name="check_wait_head")
        wait_next = Signal(name="check_wait_next")
        m.d.comb += [
            wait_head.eq(hd.write & in_flight(hd.addr)),
            # the line on ``i``, starting now, is in flight next cycle. ``wait_next`` is used
            # only when that line is taken now (``accept``): with F > 1 it cannot also start now
            # (its first and last parts are different cycles), with F = 1 it starts then
            # (``start`` = ``accept``), so ``start`` is no term of it: the check's select is
            # the only gate ``accept`` passes
            wait_next.eq(nx.write & (in_flight(nx.addr) if F > 1 else
                                     in_flight(nx.addr) | (p.write & (p.addr == nx.addr)))),
        ]
        m.d.sync += [known.eq(Mux(accept, nx.valid, hd.valid)),
                     wait.eq(Mux(accept, wait_next, wait_head))]
        # ``count`` counts the ring's lines (the new entry's a cycle after its start); room
        # for one more is count + new_valid < D, a register: next cycle's count (this one's,
        # one up or down) plus next cycle's new entry (``start``) below D, as compares of
        # ``count`` with constants selected by the three (so ``in_ok`` starts at flip-flops)
        up = new_valid & ~retire
        down = retire & ~new_valid
        with m.If(up):
            m.d.sync += count.eq(count + 1)
        with m.Elif(down):
            m.d.sync += count.eq(count - 1)

        def next_below(k):                  # next cycle's count < k
            return Mux(up, count < k - 1, Mux(down, count < k + 1, count < k))

        m.d.sync += room.eq(Mux(start, next_below(D - 1), next_below(D)))
        m.d.comb += self.busy.eq((count != 0) | new_valid)
        return m
