"""Matmul engine: FP32 scratchpads, on-the-fly BFP quantization, tiling, the systolic array,
FP32 accumulation and a host command stream."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..registry import Block
from .accum import OutputAccumulator, acc_in_layout
from .array import SystolicArray
from .config import BWD_DATA, BWD_WEIGHT, FWD, ArrayConfig
from .pe import width_shape
from .quant import LineQuantizer
from .wtile import TileAligner

__all__ = ["OP_WRITE", "OP_READ", "OP_START", "OP_STATUS", "MEM_A", "MEM_B", "MEM_C",
           "STATUS_OK", "STATUS_ERR_MODE", "STATUS_ERR_SHAPE", "STATUS_ERR_WIDTH",
           "STATUS_ERR_ROUNDING", "STATUS_ERR_ADDR",
           "cmd_layout", "rsp_layout", "counters_layout", "MatmulEngine"]

OP_WRITE, OP_READ, OP_START, OP_STATUS = 0, 1, 2, 3
MEM_A, MEM_B, MEM_C = 0, 1, 2
STATUS_OK, STATUS_ERR_MODE, STATUS_ERR_SHAPE, STATUS_ERR_WIDTH = 0, 1, 2, 3
STATUS_ERR_ROUNDING, STATUS_ERR_ADDR = 4, 5


def _addr_bits(config: ArrayConfig) -> int:
    return (config.mem_depth - 1).bit_length() + 1     # one spare bit: out-of-range addresses


def cmd_layout(config: ArrayConfig) -> data.StructLayout:
    """Host command (LSB first): ``op`` | ``mem`` | ``addr`` | ``data`` (``S`` FP32 words) |
    ``mode`` | ``M`` | ``K`` | ``N`` | ``width_a`` | ``width_b`` | ``rounding`` | ``accumulate`` |
    ``base_a`` | ``base_b`` | ``base_c``. ``WRITE``/``READ`` use ``mem``/``addr``(/``data``),
    ``START`` the rest."""
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


class _Loops:
    """Four nested counters ``c[0]`` (outer) .. ``c[3]`` (inner) with run-time limits."""

    def __init__(self, m, name, bits, limits):
        self.c = [Signal(bits, name=f"{name}_c{j}") for j in range(4)]
        self.limits = limits
        self.last = [Signal(name=f"{name}_last{j}") for j in range(4)]
        self.done = Signal(name=f"{name}_done", init=1)
        for j in range(4):
            m.d.comb += self.last[j].eq(self.c[j] == self.limits[j] - 1)
        self.m = m

    def restart(self):
        return [c.eq(0) for c in self.c] + [self.done.eq(0)]

    def step(self):
        m = self.m
        with m.If(self.last[3]):
            m.d.sync += self.c[3].eq(0)
            with m.If(self.last[2]):
                m.d.sync += self.c[2].eq(0)
                with m.If(self.last[1]):
                    m.d.sync += self.c[1].eq(0)
                    with m.If(self.last[0]):
                        m.d.sync += [self.c[0].eq(0), self.done.eq(1)]
                    with m.Else():
                        m.d.sync += self.c[0].eq(self.c[0] + 1)
                with m.Else():
                    m.d.sync += self.c[1].eq(self.c[1] + 1)
            with m.Else():
                m.d.sync += self.c[2].eq(self.c[2] + 1)
        with m.Else():
            m.d.sync += self.c[3].eq(self.c[3] + 1)


class MatmulEngine(wiring.Component):
    """FP32 matmul engine around the in-place transposed systolic array (DESIGN-NOTES §3).

    Scratchpads (``amaranth.lib.memory``, ``mem_depth`` lines of ``S`` FP32 words): ``A``
    holds ``X``/``dX`` (``M x K``), ``B`` holds ``W``/``dW`` (``K x N``), ``C`` holds
    ``Y``/``dY`` (``M x N``); a matrix occupies ``rows * ceil(cols / S)`` consecutive lines from
    its base line, each row padded to whole lines. Passes (``START``):

    * ``FWD``: ``C (+)= A . B`` (``Y = X . W``),
    * ``BWD_DATA``: ``A (+)= C . B^T`` (``dX = dY . W^T``, the same stationary ``W`` tiles,
      loaded exactly as in ``FWD``),
    * ``BWD_WEIGHT``: ``B (+)= A^T . C`` (``dW = X^T . dY``).

    Operands are quantized on the fly by two :class:`hdl.bfp.converter.BFPConverter` (groups of
    ``S`` along each pass's contraction dimension; weight tiles share one exponent via
    :class:`TileAligner`); the array's exact integer chains become FP32 in
    :class:`OutputAccumulator` and are added (RNE) into the output matrix, which starts from
    ``+0.0`` or, with ``accumulate``, from its contents. Tile order and numerics are those of
    :func:`sim.array.matmul_pass` (bit-exact).

    Host protocol: one response per command, in order. ``WRITE`` (line ``addr`` of ``mem``
    := ``data``), ``READ`` (response ``data``), ``START`` (response when the pass is complete,
    with its ``status``; an invalid command - mode, shape, width, rounding or an address range
    outside its scratchpad - is answered at once with an error status and touches nothing),
    ``STATUS`` (no-op, answers ``OK``). A bad ``mem``/``addr`` on ``WRITE``/``READ`` answers
    ``STATUS_ERR_ADDR`` and writes nothing.

    Back-to-back passes: while a pass runs, ``cmd`` takes one more command into a pending
    register. A pending ``START`` that passes validation and has the running pass's ``mode``,
    widths and rounding starts as soon as the running pass has issued its scratchpad reads
    (its weight/dY generator once the running one's is done, its operand generator once that
    one's is), so its reads, quantization and first weight tile overlap the running pass's last
    beats and drain (the two passes then share the pipeline in order; a pass reads two scratchpads and
    writes the third, so passes of one mode never read what the other writes, and the
    accumulator's address check orders updates of the same output line). Any other pending
    command runs when the engine is idle. Responses stay one per command, in order.

    Members
    -------
    cmd : In(stream.Signature(cmd_layout(config)))
        Host commands.
    rsp : Out(stream.Signature(rsp_layout(config)))
        Responses.
    busy : Out(1)
        A pass is running.
    counters : Out(counters_layout())
        The last pass's counters (valid from its response on).
    """

    DESC_DEPTH_EXTRA = 8

    def __init__(self, *, config: ArrayConfig):
        if not isinstance(config, ArrayConfig):
            self._MustUse__silence = True        # no "never used" warning when rejected
            raise TypeError(f"MatmulEngine.config must be an ArrayConfig, not {config!r}")
        self.config = config
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(config))),
            "rsp": Out(stream.Signature(rsp_layout(config))),
            "busy": Out(1),
            "counters": Out(counters_layout()),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, depth, mm = cfg.size, cfg.mem_depth, cfg.max_mantissa
        lg = (S - 1).bit_length()
        ab = _addr_bits(cfg)
        db = cfg.dim_bits
        wide = ab + 2 * db + 2

        # ---- scratchpads --------------------------------------------------------------------
        mems, rports, wports = [], [], []
        for name in ("a", "b", "c"):
            mem = Memory(shape=S * 32, depth=depth, init=[])
            m.submodules[f"mem_{name}"] = mem
            rports.append(mem.read_port())
            wports.append(mem.write_port(granularity=32))
            mems.append(mem)

        # ---- blocks -------------------------------------------------------------------------
        side0 = data.StructLayout({"addr": range(depth), "mask": S, "first": 1, "last": 1,
                                   "rows": range(S + 1), "stride": db})
        q0 = m.submodules.quant0 = LineQuantizer(config=cfg, index=0, side_bits=side0.size)
        q1 = m.submodules.quant1 = LineQuantizer(config=cfg, index=1, side_bits=1)
        aligner = m.submodules.aligner = TileAligner(config=cfg, side_bits=1)
        arr = m.submodules.array = SystolicArray(config=cfg)
        acc = m.submodules.accum = OutputAccumulator(config=cfg)
        #: sub-blocks of the last elaboration (for simulation-time introspection in tests)
        self.blocks = {"quant0": q0, "quant1": q1, "aligner": aligner, "array": arr,
                       "accum": acc}
        desc_l = acc_in_layout(cfg)
        desc_fields = data.StructLayout({
            "exp": desc_l["exp"].shape, "addr": range(depth), "mask": S, "first": 1,
            "write": 1})
        desc = m.submodules.desc = SyncFIFO(width=desc_fields.size,
                                            depth=4 * S + self.DESC_DEPTH_EXTRA)

        # ---- pass registers -----------------------------------------------------------------
        # One command can wait in ``pend`` while a pass runs; ``c`` is the command under
        # consideration: the pending one if there is one, else the one on ``cmd``.
        pend = Signal(cmd_layout(cfg), name="pend")
        pend_valid = Signal(name="pend_valid")
        c = Signal(cmd_layout(cfg), name="cur_cmd")
        m.d.comb += c.eq(Mux(pend_valid, pend.as_value(), self.cmd.payload.as_value()))
        mode = Signal(2, name="mode")
        dM, dK, dN = (Signal(db, name=n) for n in ("dim_m", "dim_k", "dim_n"))
        wa = Signal(width_shape(cfg), name="width_a")
        wbw = Signal(width_shape(cfg), name="width_b")
        rnd = Signal(2, name="rounding")
        accum = Signal(name="accumulate")
        base_a, base_b, base_c = (Signal(ab, name=n) for n in ("base_a", "base_b", "base_c"))
        lda, ldb = Signal(db, name="ld_a"), Signal(db, name="ld_bc")   # lines per row
        MT, KT, NT = (Signal(db, name=n) for n in ("tiles_m", "tiles_k", "tiles_n"))
        beat_cyc = Signal(range(mm * mm // 4 + 1), name="beat_cycles")
        shift = Signal(range(2 * mm), name="exp_shift")

        def cdiv(x):
            return (x + (S - 1)) >> lg

        # ---- command validation (combinational on the command payload) -----------------------
        status = Signal(3, name="cmd_status")

        def width_ok(w):
            return (w >= 2) & (w <= mm) & ~w[0]

        lines_a = Signal(wide, name="cmd_lines_a")
        lines_b = Signal(wide, name="cmd_lines_b")
        lines_c = Signal(wide, name="cmd_lines_c")
        m.d.comb += [
            lines_a.eq(c.M * cdiv(c.K)), lines_b.eq(c.K * cdiv(c.N)), lines_c.eq(c.M * cdiv(c.N)),
        ]
        with m.If(c.mode > 2):
            m.d.comb += status.eq(STATUS_ERR_MODE)
        with m.Elif((c.M == 0) | (c.K == 0) | (c.N == 0)):
            m.d.comb += status.eq(STATUS_ERR_SHAPE)
        with m.Elif(~width_ok(c.width_a) | ~width_ok(c.width_b)):
            m.d.comb += status.eq(STATUS_ERR_WIDTH)
        with m.Elif(c.rounding > 2):
            m.d.comb += status.eq(STATUS_ERR_ROUNDING)
        with m.Elif((c.base_a + lines_a > depth) | (c.base_b + lines_b > depth)
                    | (c.base_c + lines_c > depth)):
            m.d.comb += status.eq(STATUS_ERR_ADDR)
        with m.Else():
            m.d.comb += status.eq(STATUS_OK)

        # ---- host FSM -----------------------------------------------------------------------
        rsp = self.rsp.payload
        rsp_valid = Signal(name="rsp_valid")
        m.d.comb += self.rsp.valid.eq(rsp_valid)
        with m.If(self.rsp.valid & self.rsp.ready):
            m.d.sync += rsp_valid.eq(0)
        running = Signal(name="running")
        read_wait = Signal(name="host_read_wait")
        read_mem = Signal(2, name="host_read_mem")
        finish = Signal(name="finish")
        m.d.comb += self.busy.eq(running)
        start = Signal(name="start")          # a pass starts on an idle engine
        ov_start = Signal(name="ov_start")    # a pass starts under the running pass's tail
        ov_pre = Signal(name="ov_pre")        # ... its weight/dY generator a little earlier
        g1_ahead = Signal(name="g1_ahead")    # the pending pass's generator 1 has started
        launch = Signal(name="launch")
        g1_launch = Signal(name="g1_launch")
        m.d.comb += [launch.eq(start | ov_start), g1_launch.eq(start | ov_pre)]
        # While a pass runs, one command is taken into ``pend``; on an idle engine a command is
        # executed at once (the pending one first).
        m.d.comb += self.cmd.ready.eq(~pend_valid & ~read_wait & (running | ~rsp_valid))
        take = Signal(name="cmd_take")
        host_go = Signal(name="host_go")
        m.d.comb += [
            take.eq(self.cmd.valid & self.cmd.ready),
            host_go.eq((take & ~running) | (pend_valid & ~running & ~rsp_valid & ~read_wait)),
        ]
        with m.If(take & running):
            m.d.sync += [pend.eq(self.cmd.payload), pend_valid.eq(1)]
        with m.If((host_go | ov_start) & pend_valid):
            m.d.sync += pend_valid.eq(0)
        addr_ok = Signal(name="host_addr_ok")
        m.d.comb += addr_ok.eq((c.mem <= 2) & (c.addr < depth))
        cmd_total = Signal(32, name="cmd_total_beats")
        m.d.comb += cmd_total.eq(Mux(c.mode == BWD_WEIGHT,
                                     (cdiv(c.M) * cdiv(c.K) * cdiv(c.N)) << lg,
                                     cdiv(c.K) * cdiv(c.N) * c.M))

        # Pass slots: ``a`` = the oldest pass (the next response), ``b`` = a pass started under
        # a's tail. Beats and retired lines are counted from the idle start on; a pass ends at
        # a cumulative beat count (``end``): issued beats below a's end belong to a, the rest
        # to b, and a is complete when that many lines have left the accumulator.
        slot_f = {"end": 32, "beats": 32, "macs": 48, "cycles": 32, "inv": 1, "ovf": 1}
        sa = {k: Signal(w, name=f"pass_a_{k}") for k, w in slot_f.items()}
        sb = {k: Signal(w, name=f"pass_b_{k}") for k, w in slot_f.items()}
        b_valid = Signal(name="pass_b_valid")
        interval = Signal(32, name="interval")
        beats_iss = Signal(32, name="beats_issued")
        lines_ret = Signal(32, name="lines_retired")
        beat_inv = Signal(name="beat_invalid")      # flags of the beat issued this cycle
        beat_ovf = Signal(name="beat_overflow")
        issue = Signal(name="issue")
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

        def new_pass(slot, end):      # slot := the pass of command ``c``, ending at ``end``
            return [slot["end"].eq(end), slot["beats"].eq(cmd_total),
                    slot["macs"].eq(c.M * c.K * c.N), slot["cycles"].eq(0),
                    slot["inv"].eq(0), slot["ovf"].eq(0)]

        host_rd = [Signal(name=f"host_rd_{j}") for j in range(3)]
        host_wr = [Signal(name=f"host_wr_{j}") for j in range(3)]
        with m.If(host_go):
            m.d.sync += [rsp.op.eq(c.op), rsp.data.eq(0), rsp.invalid.eq(0), rsp.overflow.eq(0)]
            with m.Switch(c.op):
                with m.Case(OP_WRITE):
                    m.d.sync += [rsp_valid.eq(1),
                                 rsp.status.eq(Mux(addr_ok, STATUS_OK, STATUS_ERR_ADDR))]
                    for j in range(3):
                        m.d.comb += host_wr[j].eq(addr_ok & (c.mem == j))
                with m.Case(OP_READ):
                    with m.If(addr_ok):
                        m.d.sync += [read_wait.eq(1), read_mem.eq(c.mem),
                                     rsp.status.eq(STATUS_OK)]
                        for j in range(3):
                            m.d.comb += host_rd[j].eq(c.mem == j)
                    with m.Else():
                        m.d.sync += [rsp_valid.eq(1), rsp.status.eq(STATUS_ERR_ADDR)]
                with m.Case(OP_START):
                    with m.If(status == STATUS_OK):
                        m.d.comb += start.eq(1)
                    with m.Else():
                        m.d.sync += [rsp_valid.eq(1), rsp.status.eq(status)]
                with m.Default():
                    m.d.sync += [rsp_valid.eq(1), rsp.status.eq(STATUS_OK)]
        with m.If(read_wait):
            m.d.sync += [read_wait.eq(0), rsp_valid.eq(1)]
            with m.Switch(read_mem):
                for j in range(3):
                    with m.Case(j):
                        m.d.sync += rsp.data.eq(rports[j].data)
        # The generators' registers: the new pass's shape and addresses. Generator 0 uses all
        # of them (loaded when the pass starts); generator 1 has its own copy of the ones it
        # uses, so it can start the next pass while generator 0 still works on the running one.
        shape_next = {"dM": c.M, "dK": c.K, "dN": c.N, "MT": cdiv(c.M), "KT": cdiv(c.K),
                      "NT": cdiv(c.N), "lda": cdiv(c.K), "ldb": cdiv(c.N),
                      "base_a": c.base_a, "base_b": c.base_b, "base_c": c.base_c,
                      "accum": c.accumulate}
        g0r = {"dM": dM, "dK": dK, "dN": dN, "MT": MT, "KT": KT, "NT": NT, "lda": lda,
               "ldb": ldb, "base_a": base_a, "base_b": base_b, "base_c": base_c,
               "accum": accum}
        g1r = {k: Signal.like(g0r[k], name=f"g1_{k}")
               for k in ("MT", "KT", "NT", "dM", "dK", "dN", "base_b", "base_c", "ldb")}
        for regs, when in ((g0r, launch), (g1r, g1_launch)):
            with m.If(when):
                m.d.sync += [r.eq(shape_next[k]) for k, r in regs.items()]
        with m.If(start):       # idle engine: the datapath settings, counters and slot a
            m.d.sync += [
                running.eq(1), mode.eq(c.mode),
                wa.eq(c.width_a), wbw.eq(c.width_b), rnd.eq(c.rounding),
                beat_cyc.eq(((c.width_a >> 1) * (c.width_b >> 1) + (cfg.lanes - 1))
                            >> (cfg.lanes - 1).bit_length()),
                shift.eq(c.width_a + c.width_b - 2),
                *new_pass(sa, cmd_total),
                interval.eq(0), beats_iss.eq(0), lines_ret.eq(0), b_valid.eq(0),
            ]
        with m.If(ov_pre):
            m.d.sync += g1_ahead.eq(1)
        with m.If(ov_start):    # same settings: only slot b
            m.d.sync += [
                g1_ahead.eq(0),
                b_valid.eq(1), *new_pass(sb, sa["end"] + cmd_total),
            ]
        with m.If(acc.retire):
            m.d.sync += lines_ret.eq(lines_ret + 1)
        m.d.comb += finish.eq(running & (lines_ret >= sa["end"]) & ~rsp_valid & ~g1_ahead)
        with m.If(running):
            m.d.sync += [sa["cycles"].eq(sa["cycles"] + 1), interval.eq(interval + 1),
                         sb["cycles"].eq(sb["cycles"] + 1)]
        with m.If(finish):
            m.d.sync += [rsp_valid.eq(1), rsp.op.eq(OP_START), rsp.status.eq(STATUS_OK),
                         rsp.data.eq(0), rsp.invalid.eq(sa["inv"]), rsp.overflow.eq(sa["ovf"]),
                         self.counters.macs.eq(sa["macs"]),
                         self.counters.cycles.eq(sa["cycles"] + 1),
                         self.counters.interval.eq(interval + 1),
                         self.counters.beats.eq(sa["beats"]),
                         self.counters.stalls.eq(sa["cycles"] + 1 - sa["beats"] * beat_cyc)]
            with m.If(b_valid):     # b becomes the oldest pass
                m.d.sync += [b_valid.eq(0), interval.eq(0),
                             sa["end"].eq(sb["end"]), sa["beats"].eq(sb["beats"]),
                             sa["macs"].eq(sb["macs"]), sa["cycles"].eq(sb["cycles"] + 1),
                             sa["inv"].eq(b_inv), sa["ovf"].eq(b_ovf)]
            with m.Else():
                m.d.sync += running.eq(0)

        # ---- static settings of the datapath ------------------------------------------------
        is_fwd, is_bwd, is_bww = (Signal(name=n) for n in ("is_fwd", "is_bwd_data", "is_bww"))
        m.d.comb += [is_fwd.eq(mode == FWD), is_bwd.eq(mode == BWD_DATA),
                     is_bww.eq(mode == BWD_WEIGHT)]
        m.d.comb += [
            q0.width.eq(wa), q0.rounding.eq(rnd), q0.transpose.eq(is_bww),
            q1.width.eq(wbw), q1.rounding.eq(rnd), q1.transpose.eq(is_bww),
            arr.mode.eq(mode), arr.width_a.eq(wa), arr.width_b.eq(wbw),
            aligner.clear.eq(start),
        ]

        def lanes_below(limit, name):
            mk = Signal(S, name=name)
            m.d.comb += mk.eq(Cat(*[limit > j for j in range(S)]))
            return mk

        # ---- generator 0: streamed operand lines ----------------------------------------------
        g0 = _Loops(m, "g0", db + 1, [
            Mux(is_bww, MT, 1),
            Mux(is_bwd, NT, KT),
            Mux(is_bwd, KT, NT),
            Mux(is_bww, S, dM),
        ])
        g0_kt = Signal(db + 1, name="g0_kt")
        g0_nt = Signal(db + 1, name="g0_nt")
        g0_m = Signal(db + lg + 1, name="g0_row")
        m.d.comb += [
            g0_kt.eq(Mux(is_bwd, g0.c[2], g0.c[1])),
            g0_nt.eq(Mux(is_bwd, g0.c[1], g0.c[2])),
            g0_m.eq(Mux(is_bww, (g0.c[0] << lg) | g0.c[3], g0.c[3])),
        ]
        r0 = q0.req.payload
        s0 = Signal(side0, name="g0_side")
        krem0 = Signal(signed(db + 2), name="g0_krem")
        nrem0 = Signal(signed(db + 2), name="g0_nrem")
        m.d.comb += [krem0.eq(dK - (g0_kt << lg)), nrem0.eq(dN - (g0_nt << lg))]
        kmask0 = lanes_below(krem0, "g0_kmask")
        nmask0 = lanes_below(nrem0, "g0_nmask")
        with m.Switch(mode):
            with m.Case(FWD):
                m.d.comb += [
                    r0.addr.eq(base_a + g0_m * lda + g0_kt), r0.zero.eq(0), r0.mask.eq(kmask0),
                    s0.addr.eq(base_c + g0_m * ldb + g0_nt), s0.mask.eq(nmask0),
                    s0.first.eq((g0_kt == 0) & ~accum), s0.last.eq(g0.last[3]),
                ]
            with m.Case(BWD_DATA):
                m.d.comb += [
                    r0.addr.eq(base_c + g0_m * ldb + g0_nt), r0.zero.eq(0), r0.mask.eq(nmask0),
                    s0.addr.eq(base_a + g0_m * lda + g0_kt), s0.mask.eq(kmask0),
                    s0.first.eq((g0_nt == 0) & ~accum), s0.last.eq(g0.last[3]),
                ]
            with m.Default():
                m.d.comb += [
                    r0.addr.eq(base_a + g0_m * lda + g0_kt), r0.zero.eq(g0_m >= dM),
                    r0.mask.eq(kmask0),
                    s0.addr.eq(base_b + ((g0_kt << lg) * ldb) + g0_nt), s0.mask.eq(nmask0),
                    s0.first.eq((g0.c[0] == 0) & ~accum), s0.last.eq(1),
                    s0.rows.eq(Mux(krem0 > S, S, krem0)), s0.stride.eq(ldb),
                ]
        m.d.comb += [r0.side.eq(s0), q0.req.valid.eq(running & ~g0.done)]
        with m.If(q0.req.valid & q0.req.ready):
            g0.step()

        # ---- generator 1: weight-tile rows (FWD/BWD_DATA) or dY block rows (BWD_WEIGHT) -------
        g1 = _Loops(m, "g1", db + 1, [
            Mux(is_bww, g1r["MT"], 1),
            Mux(is_bwd, g1r["NT"], g1r["KT"]),
            Mux(is_bwd, g1r["KT"], g1r["NT"]),
            S,
        ])
        g1_kt = Signal(db + 1, name="g1_kt")
        g1_nt = Signal(db + 1, name="g1_nt")
        g1_row = Signal(db + lg + 1, name="g1_row")
        m.d.comb += [
            g1_kt.eq(Mux(is_bwd, g1.c[2], g1.c[1])),
            g1_nt.eq(Mux(is_bwd, g1.c[1], g1.c[2])),
            g1_row.eq(Mux(is_bww, (g1.c[0] << lg) | g1.c[3], (g1_kt << lg) | g1.c[3])),
        ]
        r1 = q1.req.payload
        nrem1 = Signal(signed(db + 2), name="g1_nrem")
        m.d.comb += nrem1.eq(g1r["dN"] - (g1_nt << lg))
        nmask1 = lanes_below(nrem1, "g1_nmask")
        with m.If(is_bww):
            m.d.comb += [r1.addr.eq(g1r["base_c"] + g1_row * g1r["ldb"] + g1_nt),
                         r1.zero.eq(g1_row >= g1r["dM"])]
        with m.Else():
            m.d.comb += [r1.addr.eq(g1r["base_b"] + g1_row * g1r["ldb"] + g1_nt),
                         r1.zero.eq(g1_row >= g1r["dK"])]
        m.d.comb += [r1.mask.eq(nmask1), r1.side.eq(0), q1.req.valid.eq(running & ~g1.done)]
        with m.If(q1.req.valid & q1.req.ready):
            g1.step()
        with m.If(launch):
            m.d.sync += g0.restart()
        with m.If(g1_launch):
            m.d.sync += g1.restart()
        # a pending START overlaps the running pass when the datapath settings are the same
        # (mode, widths, rounding: nothing in flight sees a change) and the running pass has
        # issued all its reads; the new pass then reads only memories the running one does
        # not write (a mode reads two scratchpads and writes the third)
        same = Signal(name="pend_same_settings")
        m.d.comb += [
            same.eq((c.mode == mode) & (c.width_a == wa) & (c.width_b == wbw)
                    & (c.rounding == rnd)),
            ov_pre.eq(pend_valid & running & (c.op == OP_START) & (status == STATUS_OK)
                      & same & g1.done & ~b_valid & ~g1_ahead),
            ov_start.eq(pend_valid & running & g1_ahead & g0.done & ~b_valid & ~finish),
        ]

        # ---- weight tiles into the array (FWD/BWD_DATA) -----------------------------------------
        tiles_loaded = Signal(32, name="tiles_loaded")
        tiles_issued = Signal(32, name="tiles_issued")
        tile_exp = [Signal(signed(cfg.exp_bits), name=f"tile_exp_{b}") for b in range(2)]
        tile_inv = [Signal(name=f"tile_invalid_{b}") for b in range(2)]
        tile_ovf = [Signal(name=f"tile_overflow_{b}") for b in range(2)]
        m.d.comb += [
            aligner.i.payload.eq(q1.o.payload),
            aligner.i.valid.eq(q1.o.valid & ~is_bww),
            arr.wload.payload.eq(aligner.o.payload.wl),
            arr.wload.valid.eq(aligner.o.valid & (tiles_loaded <= tiles_issued + 1)),
            aligner.o.ready.eq(arr.wload.ready & (tiles_loaded <= tiles_issued + 1)),
        ]
        with m.If(arr.wload.valid & arr.wload.ready):
            with m.If(aligner.o.payload.last):
                m.d.sync += tiles_loaded.eq(tiles_loaded + 1)
            # the tile's flags travel with its bank and reach the pass with its beats
            ao = aligner.o.payload
            for b in range(2):
                with m.If(ao.wl.bank == b):
                    m.d.sync += tile_exp[b].eq(ao.exp)
                    with m.If(ao.wl.row == 0):
                        m.d.sync += [tile_inv[b].eq(ao.invalid), tile_ovf[b].eq(ao.overflow)]
                    with m.Else():
                        m.d.sync += [tile_inv[b].eq(tile_inv[b] | ao.invalid),
                                     tile_ovf[b].eq(tile_ovf[b] | ao.overflow)]

        # ---- beat assembly + descriptors ---------------------------------------------------------
        inp = arr.inp.payload
        dsc = Signal(desc_fields, name="desc_in")
        o0 = q0.o.payload
        s0o = Signal(side0, name="q0_side")
        m.d.comb += s0o.eq(o0.side)
        # BWD_WEIGHT block registers: S X groups (columns k) and S dY groups (columns n)
        elem_l = data.ArrayLayout(data.StructLayout({"mag": mm, "sign": 1}), S)
        xblk = [[Signal(elem_l, name=f"xblk_{b}_{j}") for j in range(S)] for b in range(2)]
        dblk = [[Signal(elem_l, name=f"dblk_{b}_{j}") for j in range(S)] for b in range(2)]
        xexp = [[Signal(signed(cfg.exp_bits), name=f"xexp_{b}_{j}") for j in range(S)]
                for b in range(2)]
        dexp = [[Signal(signed(cfg.exp_bits), name=f"dexp_{b}_{j}") for j in range(S)]
                for b in range(2)]
        xside = [Signal(side0, name=f"xblk_{b}_side") for b in range(2)]
        xfull = [Signal(name=f"xblk_{b}_full") for b in range(2)]
        # flags of the groups in each block (reach the pass with the block's beats)
        xflag = [Signal(2, name=f"xblk_{b}_flags") for b in range(2)]
        dflag = [Signal(2, name=f"dblk_{b}_flags") for b in range(2)]
        dfull = [Signal(name=f"dblk_{b}_full") for b in range(2)]
        xcnt = Signal(range(S), name="xblk_count")
        dcnt = Signal(range(S), name="dblk_count")
        xbank = Signal(name="xblk_bank")
        dbank = Signal(name="dblk_bank")
        ebank = Signal(name="emit_bank")
        emit = Signal(range(S), name="bww_beat")
        issue_v = Signal(name="issue_valid")
        m.d.comb += issue.eq(arr.inp.valid & arr.inp.ready)
        tile_ok = Signal(name="tile_loaded")
        m.d.comb += tile_ok.eq(tiles_issued < tiles_loaded)
        bank = Signal(name="issue_bank")
        m.d.comb += bank.eq(tiles_issued[0])
        cur_texp = Signal(signed(cfg.exp_bits), name="cur_tile_exp")
        m.d.comb += cur_texp.eq(Mux(bank, tile_exp[1], tile_exp[0]))

        with m.If(~is_bww):
            m.d.comb += [
                issue_v.eq(q0.o.valid & tile_ok & desc.w_rdy),
                q0.o.ready.eq(issue),
                q1.o.ready.eq(aligner.i.ready),
                inp.bank.eq(bank), inp.first.eq(0), inp.last.eq(0),
                dsc.addr.eq(s0o.addr), dsc.mask.eq(s0o.mask), dsc.first.eq(s0o.first),
                dsc.write.eq(1),
            ]
            for j in range(S):
                m.d.comb += [
                    dsc.exp[j].eq(o0.group.exp + cur_texp - shift),
                    inp.h[j].eq(Mux(is_fwd, o0.group.elems[j].as_value(), 0)),
                    inp.v[j].eq(Mux(is_bwd, o0.group.elems[j].as_value(), 0)),
                ]
            m.d.comb += [
                beat_inv.eq(o0.invalid | Mux(bank, tile_inv[1], tile_inv[0])),
                beat_ovf.eq(o0.overflow | Mux(bank, tile_ovf[1], tile_ovf[0])),
            ]
            with m.If(issue):
                with m.If(s0o.last):
                    m.d.sync += tiles_issued.eq(tiles_issued + 1)
        with m.Else():
            # double-buffered X and dY blocks: bank `xbank`/`dbank` fills, bank `ebank` is emitted
            x_room = Signal(name="x_room")
            d_room = Signal(name="d_room")
            m.d.comb += [x_room.eq(~Mux(xbank, xfull[1], xfull[0])),
                         d_room.eq(~Mux(dbank, dfull[1], dfull[0])),
                         q0.o.ready.eq(x_room), q1.o.ready.eq(d_room)]
            for blk_, exp_, full_, cnt_, bank_, src, room, side_, flag_ in (
                    (xblk, xexp, xfull, xcnt, xbank, q0.o, x_room, xside, xflag),
                    (dblk, dexp, dfull, dcnt, dbank, q1.o, d_room, None, dflag)):
                with m.If(src.valid & room):
                    fl = Cat(src.payload.invalid, src.payload.overflow)
                    for b in range(2):
                        with m.If(bank_ == b):
                            for j in range(S):
                                with m.If(cnt_ == j):
                                    m.d.sync += [blk_[b][j].eq(src.payload.group.elems),
                                                 exp_[b][j].eq(src.payload.group.exp)]
                            if side_ is not None:
                                m.d.sync += side_[b].eq(src.payload.side)
                            with m.If(cnt_ == 0):
                                m.d.sync += flag_[b].eq(fl)
                            with m.Else():
                                m.d.sync += flag_[b].eq(flag_[b] | fl)
                            with m.If(cnt_ == S - 1):
                                m.d.sync += full_[b].eq(1)
                    with m.If(cnt_ == S - 1):
                        m.d.sync += [cnt_.eq(0), bank_.eq(~bank_)]
                    with m.Else():
                        m.d.sync += cnt_.eq(cnt_ + 1)
            cur_xexp = Signal(signed(cfg.exp_bits), name="cur_xexp")
            for j in range(S):
                with m.If(emit == j):
                    m.d.comb += cur_xexp.eq(Mux(ebank, xexp[1][j], xexp[0][j]))
            es = Signal(side0, name="emit_side")
            m.d.comb += es.eq(Mux(ebank, xside[1], xside[0]))
            m.d.comb += [
                issue_v.eq(Mux(ebank, xfull[1] & dfull[1], xfull[0] & dfull[0]) & desc.w_rdy),
                inp.bank.eq(0), inp.first.eq(emit == 0), inp.last.eq(emit == S - 1),
                dsc.addr.eq(es.addr + emit * es.stride), dsc.mask.eq(es.mask),
                dsc.first.eq(es.first), dsc.write.eq(emit < es.rows),
            ]
            bflag = Signal(2, name="emit_flags")
            m.d.comb += [
                bflag.eq(Mux(ebank, xflag[1] | dflag[1], xflag[0] | dflag[0])),
                beat_inv.eq(bflag[0]), beat_ovf.eq(bflag[1]),
            ]
            for j in range(S):
                xs = Signal(elem_l, name=f"emit_x_{j}")
                ds = Signal(elem_l, name=f"emit_d_{j}")
                m.d.comb += [
                    xs.eq(Mux(ebank, xblk[1][j], xblk[0][j])),
                    ds.eq(Mux(ebank, dblk[1][j], dblk[0][j])),
                    inp.h[j].eq(xs[emit].as_value()),
                    inp.v[j].eq(ds[emit].as_value()),
                    dsc.exp[j].eq(cur_xexp + Mux(ebank, dexp[1][j], dexp[0][j]) - shift),
                ]
            with m.If(issue):
                with m.If(emit == S - 1):
                    m.d.sync += [emit.eq(0), ebank.eq(~ebank)]
                    for b in range(2):
                        with m.If(ebank == b):
                            m.d.sync += [xfull[b].eq(0), dfull[b].eq(0)]
                with m.Else():
                    m.d.sync += emit.eq(emit + 1)
        m.d.comb += [arr.inp.valid.eq(issue_v & running),
                     desc.w_en.eq(issue), desc.w_data.eq(dsc)]
        with m.If(start):
            m.d.sync += [tiles_loaded.eq(0), tiles_issued.eq(0), emit.eq(0), xcnt.eq(0),
                         dcnt.eq(0), xbank.eq(0), dbank.eq(0), ebank.eq(0)]
            m.d.sync += [f.eq(0) for f in xfull + dfull]

        # ---- results: array out + descriptor -> accumulator ------------------------------------
        dh = Signal(desc_fields, name="desc_head")
        m.d.comb += dh.eq(desc.r_data)
        ai = acc.i.payload
        m.d.comb += [
            acc.i.valid.eq(arr.out.valid & desc.r_rdy),
            arr.out.ready.eq(acc.i.ready & desc.r_rdy),
            desc.r_en.eq(arr.out.valid & acc.i.ready & desc.r_rdy),
            ai.value.eq(arr.out.payload.value), ai.exp.eq(dh.exp), ai.addr.eq(dh.addr),
            ai.mask.eq(dh.mask), ai.first.eq(dh.first), ai.write.eq(dh.write),
        ]

        # ---- memory port muxes ----------------------------------------------------------------
        # read ports: A: q0 (FWD, BWD_WEIGHT) / accum (BWD_DATA); B: q1 (FWD, BWD_DATA) / accum
        # (BWD_WEIGHT); C: accum (FWD) / q0 (BWD_DATA) / q1 (BWD_WEIGHT). Host when idle.
        users = {0: {FWD: q0, BWD_DATA: acc, BWD_WEIGHT: q0},
                 1: {FWD: q1, BWD_DATA: q1, BWD_WEIGHT: acc},
                 2: {FWD: acc, BWD_DATA: q0, BWD_WEIGHT: q1}}
        for j in range(3):
            rp = rports[j]
            with m.If(~running):
                m.d.comb += [rp.addr.eq(c.addr), rp.en.eq(host_rd[j])]
            with m.Else():
                with m.Switch(mode):
                    for md, user in users[j].items():
                        with m.Case(md):
                            m.d.comb += [rp.addr.eq(user.rd_addr), rp.en.eq(user.rd_en)]
        m.d.comb += [
            q0.rd_data.eq(Mux(is_bwd, rports[2].data, rports[0].data)),
            q1.rd_data.eq(Mux(is_bww, rports[2].data, rports[1].data)),
            acc.rd_data.eq(Mux(is_fwd, rports[2].data,
                               Mux(is_bwd, rports[0].data, rports[1].data))),
        ]
        out_mem = {FWD: 2, BWD_DATA: 0, BWD_WEIGHT: 1}
        for j in range(3):
            wp = wports[j]
            with m.If(~running):
                m.d.comb += [wp.addr.eq(c.addr), wp.data.eq(c.data),
                             wp.en.eq(Mux(host_wr[j], (1 << S) - 1, 0))]
            with m.Else():
                md = [k for k, v in out_mem.items() if v == j][0]
                m.d.comb += [wp.addr.eq(acc.wr_addr), wp.data.eq(acc.wr_data),
                             wp.en.eq(Mux(mode == md, acc.wr_en, 0))]
        return m


def _params(preset: str) -> dict:
    cfg = ArrayConfig.preset(preset)

    def fields(layout):
        return {name: [f.offset, f.width] for name, f in layout}

    return {
        **cfg.to_dict(), "acc_bits": cfg.acc_bits,
        "latency": 1,
        "latency_note": "WRITE/STATUS and rejected commands answer 1 cycle after acceptance, "
                        "READ 2 cycles; a START answers when its pass is complete "
                        "(counters.cycles)",
        "cmd_layout": fields(cmd_layout(cfg)), "rsp_layout": fields(rsp_layout(cfg)),
        "counters_layout": fields(counters_layout()),
    }


TESSERA_BLOCKS = [
    Block(name="matmul_engine",
          build=lambda preset: MatmulEngine(config=ArrayConfig.preset(preset)),
          params=_params),
]
