"""Matmul engine pass control: the host protocol (command validation, pending command, responses,
host scratchpad accesses), pass start and overlap, the two pass slots and the counters."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..lib.delay import delay_stages
from ..lib.dspmul import (RegisteredMul, registered_partial_products, registered_product,
                          sum_products)
from .config import BWD_WEIGHT, ArrayConfig
from .pe import width_shape

__all__ = ["OP_WRITE", "OP_READ", "OP_START", "OP_STATUS", "MEM_A", "MEM_B", "MEM_C",
           "STATUS_OK", "STATUS_ERR_MODE", "STATUS_ERR_SHAPE", "STATUS_ERR_WIDTH",
           "STATUS_ERR_ROUNDING", "STATUS_ERR_ADDR",
           "line_bits", "cmd_layout", "rsp_layout", "counters_layout", "pass_shape_layout",
           "PassControl"]

OP_WRITE, OP_READ, OP_START, OP_STATUS = 0, 1, 2, 3
MEM_A, MEM_B, MEM_C = 0, 1, 2
STATUS_OK, STATUS_ERR_MODE, STATUS_ERR_SHAPE, STATUS_ERR_WIDTH = 0, 1, 2, 3
STATUS_ERR_ROUNDING, STATUS_ERR_ADDR = 4, 5


def line_bits(config: ArrayConfig) -> int:
    """Width of a line address of the scratchpad ports (``mem_depth`` lines)."""
    return (config.mem_depth - 1).bit_length()


def _addr_bits(config: ArrayConfig) -> int:
    return line_bits(config) + 1     # command fields: one spare bit for out-of-range addresses


def cmd_layout(config: ArrayConfig) -> data.StructLayout:
    """Host command (LSB first): ``op`` | ``mem`` | ``addr`` | ``data`` (``S`` FP32 words) |
    ``mode`` | ``M`` | ``K`` | ``N`` | ``width_a`` | ``width_b`` | ``rounding`` | ``accumulate`` |
    ``base_a`` | ``base_b`` | ``base_c``. ``WRITE``/``READ`` use ``mem``/``addr``(/``data``),
    ``START`` the rest. Addresses are ``line_bits(config) + 1`` bits wide (one spare bit, so
    an out-of-range address is representable and rejected)."""
    ab, db, wb = _addr_bits(config), config.dim_bits, width_shape(config)
    return data.StructLayout({
        "op": 2, "mem": 2, "addr": ab, "data": config.size * 32,
        "mode": 2, "M": db, "K": db, "N": db, "width_a": wb, "width_b": wb,
        "rounding": 2, "accumulate": 1, "base_a": ab, "base_b": ab, "base_c": ab,
    })


def rsp_layout(config: ArrayConfig) -> data.StructLayout:
    """Response, one per command (LSB first): ``op`` | ``status`` | ``data`` (``READ``) |
    ``invalid`` | ``overflow`` (a NaN / Inf reached a converter during the ``START``)."""
    return data.StructLayout({"op": 2, "status": 3, "data": config.size * 32,
                              "invalid": 1, "overflow": 1})


def counters_layout() -> data.StructLayout:
    """Counters of the last pass: ``macs`` (useful, ``M*K*N``), ``beats`` (valid array beats,
    batch-tile padding included), ``cycles`` (pass launch to response valid: its latency),
    ``stalls`` (``cycles - beats * beat_cycles``), ``interval`` (cycles from the later of the
    pass's launch and the previous pass's response to this response: what the pass adds to a
    sequence of back-to-back passes; equal to ``cycles`` for a pass that did not overlap)."""
    return data.StructLayout({"macs": 48, "beats": 32, "cycles": 32, "stalls": 32,
                              "interval": 32})


def pass_shape_layout(config: ArrayConfig) -> data.StructLayout:
    """Shape and addresses of a pass, as the line generators load them: ``dM``, ``dK``, ``dN``
    (dimensions), ``MT``, ``KT``, ``NT`` (tiles of ``S``), ``lda`` (lines per row of A),
    ``ldb`` (lines per row of B and C), ``base_a``, ``base_b``, ``base_c``, ``accum``, and the
    pass's ``mode`` (the generators keep their own copy: the loop limits they load with it
    are right from the launch on)."""
    ab, db = _addr_bits(config), config.dim_bits
    return data.StructLayout({
        "dM": db, "dK": db, "dN": db, "MT": db, "KT": db, "NT": db, "lda": db, "ldb": db,
        "base_a": ab, "base_b": ab, "base_c": ab, "accum": 1, "mode": 2,
    })


class PassControl(wiring.Component):
    """Host protocol and pass bookkeeping of :class:`hdl.array.engine.MatmulEngine`.

    Validates the command under consideration (the pending one, else the one on ``cmd``),
    answers ``WRITE``/``READ``/``STATUS`` and rejected commands, starts a pass on an idle
    engine (``start``) or under the running pass's tail (``launch_rows`` once generator 1 of
    the running pass is done, ``launch`` once generator 0 is), keeps the two pass slots (a
    beat belongs to the older pass until its beat count is reached; a pass is complete when
    that many result lines have retired) and answers a ``START`` with its flags and counters.
    With ``config.cmd_reg`` every command is first taken into the pending register and
    executed from there one cycle later; a ``START`` :attr:`CMD_CHECK_CYCLES` cycles after it
    was taken: the products its checks and counts need are
    :class:`~hdl.lib.dspmul.RegisteredMul` blocks loaded on the way in, the counts products of
    those products, and the checks' status and the counts registered.

    Parameters
    ----------
    config : ArrayConfig

    Attributes
    ----------
    CMD_CHECK_CYCLES : int
        With ``config.cmd_reg``: a ``START`` taken in cycle ``t`` executes in ``t + 5`` at the
        earliest (the first products two cycles after the take, the counts' products two
        more, their sum registered).

    Members
    -------
    cmd : In(stream.Signature(cmd_layout(config)))
    rsp : Out(stream.Signature(rsp_layout(config)))
    busy : Out(1)
        A pass is running (same as ``running``).
    counters : Out(counters_layout())
    running : Out(1)
        A pass is running: the datapath's memory ports belong to it.
    start : Out(1)
        A pass starts on an idle engine (clears the weight-tile and beat bookkeeping).
    launch : Out(1)
        Generator 0 (and the new pass's slot) starts: load ``shape``.
    launch_rows : Out(1)
        Generator 1 starts: load ``shape``.
    shape : Out(pass_shape_layout(config))
        The shape of the command under consideration (valid with ``launch``/``launch_rows``;
        with ``cmd_reg`` a register following ``pend`` a cycle behind).
    mode, width_a, width_b, rounding : Out
        Datapath settings of the running pass (registers).
    transpose : Out(1)
        ``mode == BWD_WEIGHT`` as a register of its own (the quantizers' block mode: the mode
        register's decode in front of their input handshake was the S = 4 FPGA core's routed
        critical path at bf3e26c, 14.86 ns).
    shift : Out(range(2 * max_mantissa))
        ``width_a + width_b - 2``: subtracted from a beat's exponent sum.
    gen0_done, gen1_done : In(1)
        The generators have issued all their line requests.
    issue : In(1)
        A beat enters the array this cycle.
    beat_invalid, beat_overflow : In(1)
        NaN / Inf flags of that beat.
    retire : In(1)
        A result line leaves the accumulator.
    host_addr : Out(line_bits(config)), host_data : Out(32 * S)
        Host ``READ``/``WRITE`` line address and data.
    host_rd : Out(3), host_wr : Out(3)
        Host read / write of scratchpad A, B, C this cycle (only while not ``running``).
    host_rsel : Out(2)
        Scratchpad whose read data ``host_rdata`` must show.
    host_rdata : In(32 * S)
    """

    CMD_CHECK_CYCLES = 1 + 2 * RegisteredMul.latency

    def __init__(self, *, config: ArrayConfig):
        self.config = config
        S = config.size
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(config))),
            "rsp": Out(stream.Signature(rsp_layout(config))),
            "busy": Out(1),
            "counters": Out(counters_layout()),
            "running": Out(1),
            "start": Out(1), "launch": Out(1), "launch_rows": Out(1),
            "shape": Out(pass_shape_layout(config)),
            "mode": Out(2), "transpose": Out(1), "width_a": Out(width_shape(config)),
            "width_b": Out(width_shape(config)), "rounding": Out(2),
            "shift": Out(range(2 * config.max_mantissa)),
            "gen0_done": In(1), "gen1_done": In(1),
            "issue": In(1), "beat_invalid": In(1), "beat_overflow": In(1),
            "retire": In(1),
            "host_addr": Out(line_bits(config)), "host_data": Out(32 * S),
            "host_rd": Out(3), "host_wr": Out(3), "host_rsel": Out(2),
            "host_rdata": In(32 * S),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, depth, mm = cfg.size, cfg.mem_depth, cfg.max_mantissa
        lg = (S - 1).bit_length()
        ab = _addr_bits(cfg)
        db = cfg.dim_bits
        wide = ab + 2 * db + 2

        # ---- pass registers -----------------------------------------------------------------
        # One command can wait in ``pend`` while a pass runs; ``c`` is the command under
        # consideration: the pending one if there is one, else the one on ``cmd``.
        pend = Signal(cmd_layout(cfg), name="pend")
        pend_valid = Signal(name="pend_valid")
        c = Signal(cmd_layout(cfg), name="cur_cmd")
        if cfg.cmd_reg:     # every command waits a cycle in ``pend``, validated on the way in
            m.d.comb += c.eq(pend)
        else:
            m.d.comb += c.eq(Mux(pend_valid, pend.as_value(), self.cmd.payload.as_value()))
        mode = Signal(2, name="mode")
        wa = Signal(width_shape(cfg), name="width_a")
        wbw = Signal(width_shape(cfg), name="width_b")
        rnd = Signal(2, name="rounding")
        beat_cyc = Signal(range(mm * mm // 4 + 1), name="beat_cycles")
        shift = Signal(range(2 * mm), name="exp_shift")
        m.d.comb += [self.mode.eq(mode), self.width_a.eq(wa), self.width_b.eq(wbw),
                     self.rounding.eq(rnd), self.shift.eq(shift)]

        def cdiv(x):
            return (x + (S - 1)) >> lg

        # ---- command validation --------------------------------------------------------------
        def width_ok(w):
            return (w >= 2) & (w <= mm) & ~w[0]

        # In two steps (the FPGA build, ``cmd_reg``, registers what the first gives as the
        # command enters ``pend`` and takes the second from ``pend`` the cycle after, when the
        # command can first start; otherwise both are combinational on ``c``): the products
        # first, so no multiplier output reaches an adder, a compare or a pass register in the
        # cycle it is computed.
        def times(a, b, name):
            return a * b

        def validate_products(v, mul=times):
            """The status of every check but the address one (``STATUS_OK`` if they pass),
            the lines each operand spans, ``cdiv(K) * cdiv(N)``, ``M * K`` and the room
            above each operand's base, ``depth - base`` (signed: negative past the end; no
            adder then lies between a product and the address check)."""
            pre = Signal(3, name="cmd_status_pre")
            with m.If(v.mode > 2):
                m.d.comb += pre.eq(STATUS_ERR_MODE)
            with m.Elif((v.M == 0) | (v.K == 0) | (v.N == 0)):
                m.d.comb += pre.eq(STATUS_ERR_SHAPE)
            with m.Elif(~width_ok(v.width_a) | ~width_ok(v.width_b)):
                m.d.comb += pre.eq(STATUS_ERR_WIDTH)
            with m.Elif(v.rounding > 2):
                m.d.comb += pre.eq(STATUS_ERR_ROUNDING)
            with m.Else():
                m.d.comb += pre.eq(STATUS_OK)
            lines = [Signal(wide, name=f"cmd_lines_{x}") for x in "abc"]
            m.d.comb += [lines[0].eq(mul(v.M, cdiv(v.K), "cmd_lines_a")),
                         lines[1].eq(mul(v.K, cdiv(v.N), "cmd_lines_b")),
                         lines[2].eq(mul(v.M, cdiv(v.N), "cmd_lines_c"))]
            tiles_kn = Signal(2 * db, name="cmd_tiles_kn")
            mk = Signal(2 * db, name="cmd_mk")
            m.d.comb += [tiles_kn.eq(mul(cdiv(v.K), cdiv(v.N), "cmd_tiles_kn")),
                         mk.eq(mul(v.M, v.K, "cmd_mk"))]
            # the third factor of the total beats: M tiles for BWD_WEIGHT (times S, below),
            # else M rows; chosen here so the total is one multiplier on registers
            rows = Signal(db + 1, name="cmd_beat_rows")
            m.d.comb += rows.eq(Mux(v.mode == BWD_WEIGHT, cdiv(v.M), v.M))
            rooms = [Signal(signed(ab + 2), name=f"cmd_room_{x}") for x in "abc"]
            m.d.comb += [r.eq(depth - b) for r, b in zip(rooms, (v.base_a, v.base_b, v.base_c))]
            return [pre, *lines, tiles_kn, mk, rows, *rooms]

        def validate_rest(v, pre, la, lb, lc, tiles_kn, mk, rows, room_a, room_b, room_c,
                          mul=times):
            """Status, total beats and MACs of the command ``v`` from its products."""
            st = Signal(3, name="cmd_status_now")
            with m.If(pre != STATUS_OK):
                m.d.comb += st.eq(pre)
            with m.Elif((la > room_a) | (lb > room_b) | (lc > room_c)):
                m.d.comb += st.eq(STATUS_ERR_ADDR)
            with m.Else():
                m.d.comb += st.eq(STATUS_OK)
            total = Signal(32, name="cmd_total_beats")
            beats = mul(tiles_kn, rows, "cmd_beats")
            m.d.comb += total.eq(Mux(v.mode == BWD_WEIGHT, beats << lg, beats))
            macs = Signal(48, name="cmd_macs")
            m.d.comb += macs.eq(mul(mk, v.N, "cmd_macs"))
            return st, total, macs

        if cfg.cmd_reg:
            # Every product in RegisteredMul blocks (on an ECP5 their operand and product
            # registers inside the DSP blocks: between fabric registers the products were the
            # S = 4 FPGA core's largest matmul group, about 134 routed end points at 11.7-12.2
            # ns at bf3e26c). The first products' operand registers load as the command enters
            # ``pend`` (its other checks' values are registered then too); their products stand
            # two cycles after the take. The checks' status is registered from them, and the
            # pass's counts, ``tiles_kn * rows`` and ``mk * N``, are products of those products
            # (two more cycles, then their partial products' sum registered): a START is
            # executed once ``pend`` has held its command CMD_CHECK_CYCLES cycles (``checked``).
            take_now = Signal(name="cmd_take_now")
            m.d.comb += take_now.eq(self.cmd.valid & self.cmd.ready)

            def first(a, b, name):
                return registered_product(m, a, b, ce_in=take_now, ce_out=1, name=name)

            def second(a, b, name):
                return sum_products(registered_partial_products(m, a, b, ce_in=1, ce_out=1,
                                                                name=name))

            products = validate_products(self.cmd.payload, first)
            held = []
            for k, x in enumerate(products):
                if k in (1, 2, 3, 4, 5):            # lines a, b, c, tiles_kn, mk: the DSPs'
                    held.append(x)
                    continue
                r = Signal.like(x, name=x.name + "_reg")
                with m.If(take_now):
                    m.d.sync += r.eq(x)
                held.append(r)
            checks = validate_rest(c, *held, mul=second)
            status, cmd_total, cmd_macs = (Signal.like(x, name=x.name + "_reg") for x in checks)
            m.d.sync += [r.eq(x) for r, x in zip((status, cmd_total, cmd_macs), checks)]
            checked = Signal(name="pend_checked")
            # pend holds its command while it is valid: checked once it has been valid for
            # CMD_CHECK_CYCLES - 1 cycles before this one (a command taken right after the
            # last one left sees pend_valid low in between)
            held_for = delay_stages(m, pend_valid, self.CMD_CHECK_CYCLES - 1, "pend_valid")
            m.d.comb += checked.eq(Cat(*held_for[1:]).all())
        else:
            status, cmd_total, cmd_macs = validate_rest(c, *validate_products(c))

        # ---- host FSM -----------------------------------------------------------------------
        rsp = self.rsp.payload
        rsp_valid = Signal(name="rsp_valid")
        m.d.comb += self.rsp.valid.eq(rsp_valid)
        with m.If(self.rsp.valid & self.rsp.ready):
            m.d.sync += rsp_valid.eq(0)
        running = Signal(name="running")
        # a host READ in flight: one stage per cycle of the port's read latency
        read_wait = Signal(name="host_read_wait")
        rw = [Signal(name=f"host_read_wait{k}") for k in range(cfg.mem_latency)]
        m.d.comb += read_wait.eq(Cat(*rw).any())
        m.d.sync += [rw[k].eq(rw[k - 1]) for k in range(1, len(rw))]
        read_mem = Signal(2, name="host_read_mem")
        finish = Signal(name="finish")
        m.d.comb += [self.busy.eq(running), self.running.eq(running)]
        start = Signal(name="start")          # a pass starts on an idle engine
        ov_start = Signal(name="ov_start")    # a pass starts under the running pass's tail
        ov_pre = Signal(name="ov_pre")        # ... its weight/dY generator a little earlier
        g1_ahead = Signal(name="g1_ahead")    # the pending pass's generator 1 has started
        launch = Signal(name="launch")
        g1_launch = Signal(name="g1_launch")
        m.d.comb += [launch.eq(start | ov_start), g1_launch.eq(start | ov_pre)]
        m.d.comb += [self.start.eq(start), self.launch.eq(launch),
                     self.launch_rows.eq(g1_launch)]
        # While a pass runs, one command is taken into ``pend``; on an idle engine a command is
        # executed at once (the pending one first).
        # With ``cmd_reg`` every command is taken into ``pend`` and executed from there.
        take = Signal(name="cmd_take")
        host_go = Signal(name="host_go")
        pend_go = Signal(name="pend_go")
        m.d.comb += [pend_go.eq(pend_valid & ~running & ~rsp_valid & ~read_wait),
                     take.eq(self.cmd.valid & self.cmd.ready)]
        if cfg.cmd_reg:
            # a START waits for its registered checks; WRITE, READ and STATUS do not need them
            m.d.comb += [self.cmd.ready.eq(~pend_valid),
                         host_go.eq(pend_go & (checked | (c.op != OP_START)))]
            with m.If(take):
                m.d.sync += [pend.eq(self.cmd.payload), pend_valid.eq(1)]
        else:
            m.d.comb += [
                self.cmd.ready.eq(~pend_valid & ~read_wait & (running | ~rsp_valid)),
                host_go.eq((take & ~running) | pend_go),
            ]
            with m.If(take & running):
                m.d.sync += [pend.eq(self.cmd.payload), pend_valid.eq(1)]
        with m.If((host_go | ov_start) & pend_valid):
            m.d.sync += pend_valid.eq(0)
        addr_ok = Signal(name="host_addr_ok")
        m.d.comb += addr_ok.eq((c.mem <= 2) & (c.addr < depth))

        # Pass slots: ``a`` = the oldest pass (the next response), ``b`` = a pass started under
        # a's tail. Beats and retired lines are counted from the idle start on; a pass ends at
        # a cumulative beat count (``end``, slot a only): issued beats below a's end belong to
        # a, the rest to b, and a is complete when that many lines have left the accumulator.
        # When b becomes the oldest pass its end is a's plus its beats (an adder on registers,
        # not behind the total-beats multiplier as b starts).
        slot_f = {"end": 32, "beats": 32, "macs": 48, "cycles": 32, "inv": 1, "ovf": 1}
        sa = {k: Signal(w, name=f"pass_a_{k}") for k, w in slot_f.items()}
        sb = {k: Signal(w, name=f"pass_b_{k}") for k, w in slot_f.items() if k != "end"}
        b_valid = Signal(name="pass_b_valid")
        interval = Signal(32, name="interval")
        beats_iss = Signal(32, name="beats_issued")
        lines_ret = Signal(32, name="lines_retired")
        issue, beat_inv, beat_ovf = self.issue, self.beat_invalid, self.beat_overflow
        to_a = Signal(name="issue_to_a")
        m.d.comb += to_a.eq(beats_iss < sa["end"])
        b_inv = Signal(name="pass_b_inv_next")
        b_ovf = Signal(name="pass_b_ovf_next")
        m.d.comb += [b_inv.eq(sb["inv"] | (issue & ~to_a & beat_inv)),
                     b_ovf.eq(sb["ovf"] | (issue & ~to_a & beat_ovf))]
        m.d.sync += [sb["inv"].eq(b_inv), sb["ovf"].eq(b_ovf)]
        with m.If(issue):
            m.d.sync += beats_iss.eq(beats_iss + 1)
            with m.If(to_a):
                m.d.sync += [sa["inv"].eq(sa["inv"] | beat_inv),
                             sa["ovf"].eq(sa["ovf"] | beat_ovf)]

        def new_pass(slot):      # slot := the pass of command ``c``
            return [slot["beats"].eq(cmd_total),
                    slot["macs"].eq(cmd_macs), slot["cycles"].eq(0),
                    slot["inv"].eq(0), slot["ovf"].eq(0)]

        m.d.comb += [self.host_addr.eq(c.addr), self.host_data.eq(c.data),
                     self.host_rsel.eq(read_mem)]
        with m.If(host_go):
            m.d.sync += [rsp.op.eq(c.op), rsp.data.eq(0), rsp.invalid.eq(0), rsp.overflow.eq(0)]
            with m.Switch(c.op):
                with m.Case(OP_WRITE):
                    m.d.sync += [rsp_valid.eq(1),
                                 rsp.status.eq(Mux(addr_ok, STATUS_OK, STATUS_ERR_ADDR))]
                    for j in range(3):
                        m.d.comb += self.host_wr[j].eq(addr_ok & (c.mem == j))
                with m.Case(OP_READ):
                    with m.If(addr_ok):
                        m.d.sync += [rw[0].eq(1), read_mem.eq(c.mem),
                                     rsp.status.eq(STATUS_OK)]
                        for j in range(3):
                            m.d.comb += self.host_rd[j].eq(c.mem == j)
                    with m.Else():
                        m.d.sync += [rsp_valid.eq(1), rsp.status.eq(STATUS_ERR_ADDR)]
                with m.Case(OP_START):
                    with m.If(status == STATUS_OK):
                        m.d.comb += start.eq(1)
                    with m.Else():
                        m.d.sync += [rsp_valid.eq(1), rsp.status.eq(status)]
                with m.Default():
                    m.d.sync += [rsp_valid.eq(1), rsp.status.eq(STATUS_OK)]
        with m.If(rw[0]):
            m.d.sync += rw[0].eq(0)
        with m.If(rw[-1]):
            m.d.sync += [rsp_valid.eq(1), rsp.data.eq(self.host_rdata)]
        # The generators load the new pass's shape and addresses when they start (generator 1
        # has its own copy, so it can start the next pass while generator 0 still works on
        # the running one).
        shape_next = {"dM": c.M, "dK": c.K, "dN": c.N, "MT": cdiv(c.M), "KT": cdiv(c.K),
                      "NT": cdiv(c.N), "lda": cdiv(c.K), "ldb": cdiv(c.N),
                      "base_a": c.base_a, "base_b": c.base_b, "base_c": c.base_c,
                      "accum": c.accumulate, "mode": c.mode}
        # With ``cmd_reg`` the shape is a register that follows ``pend`` a cycle behind: a
        # START launches only from a command ``pend`` has held for CMD_CHECK_CYCLES - 1
        # cycles (``checked``; ``ov_start`` a cycle after ``ov_pre``), so the register holds
        # that command's shape by then, and the generators' loads (every cycle while they are
        # done) start at it instead of behind the tile-count adders (the command register
        # through ``cdiv`` and the loop-limit selects into the generators' ``last``, walk and
        # mask registers: 15.0 ns estimated at S = 8, about 50 routed end points at 10.7-11.3
        # ns at S = 4, 9de3820)
        shape_eqs = [self.shape[k].eq(v) for k, v in shape_next.items()]
        if cfg.cmd_reg:
            m.d.sync += shape_eqs
        else:
            m.d.comb += shape_eqs
        with m.If(start):       # idle engine: the datapath settings, counters and slot a
            m.d.sync += [
                running.eq(1), mode.eq(c.mode), self.transpose.eq(c.mode == BWD_WEIGHT),
                wa.eq(c.width_a), wbw.eq(c.width_b), rnd.eq(c.rounding),
                beat_cyc.eq(((c.width_a >> 1) * (c.width_b >> 1) + (cfg.lanes - 1))
                            >> (cfg.lanes - 1).bit_length()),
                shift.eq(c.width_a + c.width_b - 2),
                *new_pass(sa),
                interval.eq(0), beats_iss.eq(0), b_valid.eq(0),
            ]
        with m.If(ov_pre):
            m.d.sync += g1_ahead.eq(1)
        with m.If(ov_start):    # same settings: only slot b
            m.d.sync += [
                g1_ahead.eq(0),
                b_valid.eq(1), *new_pass(sb),
            ]
        # slot a is complete when ``lines_ret >= sa["end"]``: that compare is a register
        # (``pass_a_at_end``), made a cycle ahead from both counts' next values, so ``finish``,
        # which loads the ~200 registers of the slots, the counters and the response, is one
        # gate of registers (the compare of the two 32-bit counts into them was the S = 8
        # matmul engine's routed critical path at 0140979, 13.01 ns, 181 end points).
        # A line retiring as a pass starts counts (the start sets 0 only without one), and a
        # finish that moves slot b up sets the end even as a pass starts.
        ret_next = Signal.like(lines_ret, name="lines_retired_next")
        end_next = Signal.like(sa["end"], name="pass_a_end_next")
        at_end = Signal(name="pass_a_at_end", init=1)       # lines_ret >= sa["end"]
        m.d.comb += [
            ret_next.eq(Mux(self.retire, lines_ret + 1, Mux(start, 0, lines_ret))),
            end_next.eq(Mux(finish & b_valid, sa["end"] + sb["beats"],
                            Mux(start, cmd_total, sa["end"]))),
        ]
        m.d.sync += [lines_ret.eq(ret_next), sa["end"].eq(end_next),
                     at_end.eq(ret_next >= end_next)]
        m.d.comb += finish.eq(running & at_end & ~rsp_valid & ~g1_ahead)
        # slot a's beats x beat cycles from a register for the stalls counter: slot a's beats
        # change as a pass starts on an idle engine and at a finish, and the next finish is
        # two or more cycles later (the response is up for a cycle in between), so the
        # product of the cycle before is current (the multiplier and the subtraction into
        # the counters were 13.08 ns routed, 31 end points, at 4d67e27)
        a_work = Signal(len(sa["beats"]) + len(beat_cyc), name="pass_a_work")
        m.d.sync += a_work.eq(sa["beats"] * beat_cyc)
        with m.If(running):
            m.d.sync += [sa["cycles"].eq(sa["cycles"] + 1), interval.eq(interval + 1)]
            with m.If(~ov_start):   # (new_pass above restarts slot b's count; not overridden)
                m.d.sync += sb["cycles"].eq(sb["cycles"] + 1)
        with m.If(finish):
            m.d.sync += [rsp_valid.eq(1), rsp.op.eq(OP_START), rsp.status.eq(STATUS_OK),
                         rsp.data.eq(0), rsp.invalid.eq(sa["inv"]), rsp.overflow.eq(sa["ovf"]),
                         self.counters.macs.eq(sa["macs"]),
                         self.counters.cycles.eq(sa["cycles"] + 1),
                         self.counters.interval.eq(interval + 1),
                         self.counters.beats.eq(sa["beats"]),
                         self.counters.stalls.eq(sa["cycles"] + 1 - a_work)]
            with m.If(b_valid):     # b becomes the oldest pass
                m.d.sync += [b_valid.eq(0), interval.eq(0), sa["beats"].eq(sb["beats"]),
                             sa["macs"].eq(sb["macs"]), sa["cycles"].eq(sb["cycles"] + 1),
                             sa["inv"].eq(b_inv), sa["ovf"].eq(b_ovf)]
            with m.Else():
                m.d.sync += running.eq(0)

        # a pending START overlaps the running pass when the datapath settings are the same
        # (mode, widths, rounding: nothing in flight sees a change) and the running pass has
        # issued all its reads; the new pass then reads only memories the running one does
        # not write (a mode reads two scratchpads and writes the third)
        same = Signal(name="pend_same_settings")
        m.d.comb += [
            same.eq((c.mode == mode) & (c.width_a == wa) & (c.width_b == wbw)
                    & (c.rounding == rnd)),
            ov_pre.eq(pend_valid & running & (c.op == OP_START) & (status == STATUS_OK)
                      & (checked if cfg.cmd_reg else 1)
                      & same & self.gen1_done & ~b_valid & ~g1_ahead),
            ov_start.eq(pend_valid & running & g1_ahead & self.gen0_done & ~b_valid & ~finish),
        ]
        return m
