"""The FP32 optimizer engine: check pass + update pass (or one fused pass) over the
scratchpads W, M, V, G.

The engine holds no memory: it reaches W, M, V and G through four word ports
(:class:`~hdl.lib.memport.WordPort`, members ``w``, ``m``, ``v``, ``g``). The registered block
``optim_engine`` is :class:`~hdl.optim.standalone.OptimEngineWithMemories`, which puts four
on-chip memories behind them; the training core puts the ports onto its shared scratchpad.

Commands arrive on ``cmd`` (:class:`~hdl.optim.config.Op`); data on ``wdata``/``rdata``.
``STEP`` runs two passes over ``G[0:N]`` (docs/datapaths.md):

1. **Check pass** (reads G only): ``u = G * 2**-k`` (exact), ``sumsq`` of ``u`` in
   :class:`~hdl.lib.lanesum.LaneSum` order, sticky Inf/NaN detection on the raw ``G``. With
   clipping enabled, one more element through the update pipeline turns ``sumsq`` into the
   factor (:func:`~hdl.optim.clip.clip_factor`). Skip when any ``G`` is Inf/NaN, or clipping
   is on and ``sumsq`` is Inf/NaN.
2. **Update pass** (only when not skipped): ``W, M, V, G`` at the same address stream through
   :class:`~hdl.optim.datapath.OptimDatapath`, one element per cycle (one every
   ``config.ii`` cycles with shared FP32 units), and the results are written back
   ``latency`` cycles later. A skipped step performs no memory write at all.

``STEP1`` (one pass) with clipping off and ``skip_in = 0`` when it is accepted fuses the two:
one pass reads ``W, M, V, G`` once, updates as above (``clip = 1``) and feeds the same
sum of squares beside it (so every status field equals a non-skipped ``STEP``'s). It does not
look for a non-finite ``G``: the skip decision is ``skip_in`` at acceptance, and the caller
guarantees that it covers the gradients (the training core's write snooping, docs/core.md).
With clipping on or ``skip_in = 1``, ``STEP1`` is exactly ``STEP``.

The check pass and the clip factor have no FP32 units of their own: they run on
:class:`~hdl.optim.datapath.OptimDatapath`'s (the update never runs at the same time). The
check pass streams ``G`` through it with ``CLIP = 1`` and sums its ``g*g`` tap; the clip factor
is one element with ``alt = 1``: ``max_norm / (sqrt(sumsq) * 1 + clip_eps)`` on the update's
square root, adder and divider. Elements that are not an update are never written back.

Loss-scale bookkeeping (scale halves on a skip, doubles after ``GROWTH`` clean steps) and the
counters are updated at the end of the step. Golden model:
:class:`sim.model.optim.OptimEngineModel`.
"""
from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from ..lib.blockfifo import BufferedFIFO
from amaranth.lib.wiring import In, Out

from ..config import check_int
from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..lib.dataflow import Dataflow, unit_members
from ..lib.delay import delay
from ..lib.fp32bits import is_inf_or_nan
from ..lib.lanesum import LaneSum
from ..lib.memport import WordPort
from ..lib.mustuse import mark_used
from .clip import ONE_F32, clip_factor
from .config import SCALE_EXP_MAX, STATUS_FIELDS, Mem, Mode, Op, OptimConfig, Reg
from .datapath import HYPER_FIELDS, OptimDatapath

__all__ = ["OptimEngine", "cmd_layout", "OPTIM_STATUS_LAYOUT", "READ_LATENCY",
           "step1_busy_cycles"]

ADDR_BITS = 16
#: cycles from a scratchpad read address to the registered read data the datapaths see (the
#: port's one-cycle read latency, then a register on ``r_data``)
READ_LATENCY = 2
COUNT_BITS = 17


def cmd_layout() -> data.StructLayout:
    return data.StructLayout({"op": 3, "mem": 2, "first": 1, "addr": ADDR_BITS,
                              "count": COUNT_BITS, "data": 32})


OPTIM_STATUS_LAYOUT = data.StructLayout(dict(STATUS_FIELDS))

_REG_NAMES = {Reg.LR: "lr", Reg.B1: "b1", Reg.OMB1: "omb1", Reg.B2: "b2", Reg.OMB2: "omb2",
              Reg.RC2: "rc2", Reg.EPS: "eps", Reg.WDEC: "wdec", Reg.MAX_NORM: "max_norm",
              Reg.CLIP_EPS: "clip_eps"}


class OptimEngine(wiring.Component):
    """FP32 optimizer engine (SGD, momentum, Adam, AdamW) over four word-port scratchpads.

    Parameters
    ----------
    config : OptimConfig
    fp32_config : FP32Config
    divsqrt_config : FP32DivSqrtConfig
    data_cmds : bool
        Build ``WRITE``, ``READ`` and ``ACCUM`` (the ``wdata``/``rdata`` streams, the read FIFO
        and the accumulate adder). Without them (the training core, whose host and sequencer
        issue only ``SETREG``, ``STEP`` and ``STEP1``) those commands are rejected like an
        invalid op (``error``), ``wdata`` is never ready and ``rdata`` never valid.
    units : tuple of str
        :class:`OptimDatapath`'s ``units`` (``config.ii > 1``): its first shared units of
        these kinds are outside the engine, behind members ``unit_<kind><n>``
        (:class:`~hdl.lib.dataflow.UnitPort`); the training core's FPGA build pools them with
        the vector unit's. Default none.
    port_skew : int
        Extra read latency of the ports ``w, m, v, g`` (default 0: one cycle): the training
        core's FPGA build puts them behind one scratchpad client
        (:class:`~hdl.lib.memport.WordPortsToLine`, ``skew = 4``), which answers a read
        ``1 + port_skew`` cycles after it and writes up to ``port_skew`` cycles late. The
        engine delays its read bookkeeping to match and its drain covers the late writes:
        the same words, ``latency`` and a command's busy cycles ``port_skew`` more (twice
        that for an update pass's drain). Needs ``data_cmds = False``. (The engine's four
        ports access memory together, at most once every ``config.ii`` cycles: the adapter
        needs ``ii >= 4``, which the core checks.)

    Attributes
    ----------
    read_latency : int
        Cycles from a read to its word in the engine's read-data register: ``2 +
        port_skew``.
    latency : int
        Latency of the update pipeline (memory read, the read-data register, then
        :class:`OptimDatapath`): an element read in cycle ``t`` is written back in cycle
        ``t + latency``. Both passes stream one element per cycle (per ``config.ii``
        cycles): a ``STEP`` is busy about ``2N + Lsum + latency`` cycles, a one-pass
        ``STEP1`` about ``N + latency`` (:meth:`step1_cycles`; ``N`` counts ``ii`` cycles
        an element with shared units).
    sumsq_latency : int
        Cycles from the read of the last gradient word to the sum of squares being registered
        (read, the datapath's three multiplies to ``g*g``, :class:`~hdl.lib.lanesum.LaneSum`
        flush, the register).
    clip_latency : int
        Cycles of the clip factor (states ``CLIP`` and ``CLIP_WAIT``): the datapath's
        ``ratio_latency`` plus 1.

    Members
    -------
    w, m, v, g : Out(WordPort(addr_bits=config.addr_bits))
        The scratchpads W, M, V, G (word addresses ``0 .. config.depth - 1``; one-cycle read
        latency, :mod:`hdl.lib.memport`, or ``1 + port_skew``). All four carry the same
        ``r_addr`` and the same ``w_addr`` in every cycle; each has its own ``r_en``,
        ``w_en`` and ``w_data``. ``r_en``
        is raised only for the words a command uses (READ: the selected memory; ACCUM and the
        check pass: G; the update pass: all four). The engine writes only what it
        computed: ACCUM writes G, the update pass W (and M with momentum/Adam, V with Adam),
        WRITE the selected memory; a skipped step writes nothing.
    cmd : In(stream.Signature(cmd_layout()))
        ``op, mem, first, addr, count, data``; accepted only while idle (``busy = 0``).
    wdata : In(stream.Signature(32))
        Words for ``WRITE`` and ``ACCUM`` (FP32).
    rdata : Out(stream.Signature(32))
        Words of ``READ`` (FP32), through a FIFO; backpressure stalls the reads.
    busy : Out(1)
        A command is executing.
    skip_in : In(1)
        An outside non-finite flag: a STEP whose check pass ends while it is 1 is skipped like
        one with a non-finite gradient; a STEP1 accepted while it is 1 runs as STEP (and so is
        skipped). The training core ties it to its run's ``flags`` (the BFP converters' NaN /
        Inf flags and the gradient-write snoop); the standalone block leaves it 0.
    status : Out(OPTIM_STATUS_LAYOUT)
        ``scale_exp`` (loss scale ``2**scale_exp``), ``good_count`` (clean steps since the last
        scale change), ``step_count`` / ``skip_count`` (applied / skipped steps),
        ``last_skipped``, ``clipped`` (last step's factor < 1), ``error`` (sticky: a command
        with an out-of-range address/count/N or an invalid mode was ignored), ``sumsq`` and
        ``clip_factor`` (FP32, last step).
    """

    def __init__(self, *, config: OptimConfig | None = None,
                 fp32_config: FP32Config | None = None,
                 divsqrt_config: FP32DivSqrtConfig | None = None, data_cmds: bool = True,
                 units: tuple = (), port_skew: int = 0):
        self.config = config or OptimConfig()
        if not isinstance(data_cmds, bool):
            mark_used(self)                  # rejected: no "never used" warning
            raise TypeError(f"data_cmds must be a bool, not {type(data_cmds).__name__} "
                            f"{data_cmds!r}")
        self.data_cmds = data_cmds
        if not isinstance(self.config, OptimConfig):
            raise TypeError(f"config must be an OptimConfig, not {type(self.config).__name__}")
        self.fp32_config = fp32_config or FP32Config()
        self.divsqrt_config = divsqrt_config or FP32DivSqrtConfig()
        la = self.fp32_config.latency("fp32_add")
        if la >= self.config.reduce_lanes:
            mark_used(self)                  # rejected: no "never used" warning
            raise ValueError(f"OptimConfig.reduce_lanes ({self.config.reduce_lanes}) must exceed "
                             f"the FP32 adder latency ({la})")
        try:
            self.units = OptimDatapath.check_units_for(units, self.fp32_config,
                                                       self.divsqrt_config, self.config.ii,
                                                       owner="OptimEngine")
            check_int("OptimEngine", "port_skew", port_skew, lo=0)
            if port_skew and data_cmds:
                raise ValueError(f"OptimEngine.port_skew ({port_skew}) needs data_cmds = False")
        except (TypeError, ValueError):
            mark_used(self)                  # rejected: no "never used" warning
            raise
        self.port_skew = port_skew
        #: cycles from a read to its word in the engine's read-data register
        self.read_latency = READ_LATENCY + port_skew
        port = WordPort(addr_bits=self.config.addr_bits)
        super().__init__({
            **unit_members(self.units),
            **{Mem.NAMES[sel]: Out(port) for sel in Mem.ALL},
            "cmd": In(stream.Signature(cmd_layout())),
            "wdata": In(stream.Signature(32)),
            "rdata": Out(stream.Signature(32)),
            "busy": Out(1),
            "skip_in": In(1),
            "status": Out(OPTIM_STATUS_LAYOUT),
        })
        ii = self.config.ii
        self.latency = self.read_latency + OptimDatapath.latency_for(self.fp32_config,
                                                                     self.divsqrt_config, ii)
        self.sumsq_latency = _sumsq_latency(self.config.reduce_lanes, self.fp32_config,
                                            self.divsqrt_config, ii, port_skew)
        self.clip_latency = OptimDatapath.latencies_for(self.fp32_config,
                                                        self.divsqrt_config, ii)[2] + 1

    def step1_cycles(self, n: int) -> int:
        """Cycles ``busy`` is high for a one-pass ``STEP1`` over ``n`` words (clipping off, not
        skipped; the accepting cycle has ``busy = 0``): ``n`` reads one every ``ii`` cycles,
        then the later of the last write-back (``latency`` and the drain counter, which also
        covers the ports' ``port_skew``) and the sum of squares."""
        return step1_busy_cycles(n, reduce_lanes=self.config.reduce_lanes,
                                 fp32_config=self.fp32_config,
                                 divsqrt_config=self.divsqrt_config, ii=self.config.ii,
                                 port_skew=self.port_skew)

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        depth, ab = cfg.depth, cfg.addr_bits
        st = self.status

        # ---- scratchpad ports ---------------------------------------------------------------
        ports = [getattr(self, Mem.NAMES[sel]) for sel in Mem.ALL]
        raddr = Signal(ab, name="raddr")
        waddr = Signal(ab, name="waddr")
        ren = [Signal(name=f"ren_{Mem.NAMES[s]}") for s in Mem.ALL]
        for s in Mem.ALL:
            m.d.comb += [ports[s].r_addr.eq(raddr), ports[s].r_en.eq(ren[s]),
                         ports[s].w_addr.eq(waddr)]
        # Every scratchpad's read data is registered before any logic sees it: a block RAM's
        # output is slow (about 5.8 ns clock-to-out on the ECP5 without its output register),
        # and the FP32 unpack logic behind it made the engine close at 56 MHz.
        rdata = [Signal(32, name=f"rdata_{Mem.NAMES[s]}") for s in Mem.ALL]
        m.d.sync += [rdata[s].eq(ports[s].r_data) for s in Mem.ALL]

        # ---- registers ----------------------------------------------------------------------
        mode_reg = Signal(4, name="mode_reg")
        n_reg = Signal(COUNT_BITS, name="n_reg")
        growth = Signal(16, name="growth")
        fregs = {a: Signal(32, name=f"reg_{n}") for a, n in _REG_NAMES.items()}
        upd_mode = mode_reg[0:2]
        clip_en = mode_reg[2]
        dyn = mode_reg[3]
        inv_scale = Signal(32, name="inv_scale")
        # 2**-k: exponent field 127 - k (k <= 126 keeps it normal)
        m.d.comb += inv_scale.eq(Cat(Const(0, 23), (127 - st.scale_exp)[0:8], Const(0, 1)))
        clip = Signal(32, name="clip_factor", init=ONE_F32)
        m.d.comb += st.clip_factor.eq(clip)

        # ---- datapaths ----------------------------------------------------------------------
        # The tag is the write-back address and, on top, whether the element is an update (the
        # check pass and the clip factor run through the same pipeline and write nothing).
        m.submodules.dp = dp = OptimDatapath(tag_bits=ab + 1, fp32_config=self.fp32_config,
                                             divsqrt_config=self.divsqrt_config, ii=cfg.ii,
                                             units=self.units)
        for name in unit_members(self.units):
            wiring.connect(m, getattr(dp, name), wiring.flipped(getattr(self, name)))
        # Shared units (ii > 1): every element enters the datapath in a cycle congruent
        # modulo ii. The slot counter is 0 in the first cycle of a command and counts
        # cycles modulo ii; the passes read only when it is 0 (their elements enter the
        # datapath read_latency cycles later), the clip factor's element enters when it is
        # read_latency mod ii.
        if cfg.ii > 1:
            slot = Signal(range(cfg.ii), name="ii_slot")
            read_go = Signal(name="ii_read_go")
            clip_ok = Signal(name="ii_clip_ok")
            m.d.comb += [read_go.eq(slot == 0), clip_ok.eq(slot == self.read_latency % cfg.ii)]
            m.d.sync += slot.eq(Mux(slot == cfg.ii - 1, 0, slot + 1))
        else:
            slot, read_go, clip_ok = None, Const(1, 1), Const(1, 1)
        sq_phase = Signal(name="sq_phase")         # check pass: the pipeline runs with CLIP = 1
        alt_phase = Signal(name="alt_phase")       # clip factor: sqrt(sumsq), max_norm / ...
        for name in HYPER_FIELDS:
            if name == "inv_scale":
                m.d.comb += dp.inv_scale.eq(inv_scale)
            elif name == "clip":
                m.d.comb += dp.clip.eq(Mux(sq_phase, ONE_F32, clip))
            elif name == "rc2":
                m.d.comb += dp.rc2.eq(Mux(alt_phase, ONE_F32, fregs[Reg.RC2]))
            elif name == "eps":
                m.d.comb += dp.eps.eq(Mux(alt_phase, fregs[Reg.CLIP_EPS], fregs[Reg.EPS]))
            else:
                addr = next(a for a, n in _REG_NAMES.items() if n == name)
                m.d.comb += getattr(dp, name).eq(fregs[addr])
        m.d.comb += [dp.mode.eq(upd_mode), dp.alt.eq(alt_phase), dp.alt_sqrt.eq(st.sumsq),
                     dp.alt_num.eq(fregs[Reg.MAX_NORM])]

        # its inputs are the datapath's squares g*g (>= +0 or NaN)
        m.submodules.sumsq = ss = LaneSum(lanes=cfg.reduce_lanes, nonnegative=True,
                                          fp32_config=self.fp32_config)

        # Check-pass front end: G (read) -> the datapath's g*g (g = G * 2**-k * 1) -> LaneSum
        # (always ready while streaming).
        chk_valid = Signal(name="chk_valid")       # read data of the check pass is valid
        chk_last = Signal(name="chk_last")
        cdf = Dataflow(m, chk_valid, fp32_config=self.fp32_config,
                       divsqrt_config=self.divsqrt_config, prefix="chk")
        g_raw = rdata[Mem.G]
        last_n = cdf.input(chk_last, "last")
        m.d.comb += [ss.i.valid.eq(cdf.valid_at(dp.sq_latency)), ss.i.payload.x.eq(dp.sq),
                     ss.i.payload.last.eq(cdf.at(last_n, dp.sq_latency))]

        # Clip-factor front end: one element into the datapath, its quotient ratio_latency later.
        clip_go = Signal(name="clip_go")
        clf = Dataflow(m, clip_go, fp32_config=self.fp32_config,
                       divsqrt_config=self.divsqrt_config, prefix="clipf")
        clip_done = clf.valid_at(dp.ratio_latency)
        # The quotient in a register every cycle, and the factor (its compare with 1 and the
        # select) taken from it in UPDATE_START, the cycle after CLIP_WAIT sees it: nothing
        # reads the factor before the update's first element enters the datapath, cycles
        # later (the quotient through the compare into the 32-bit factor register was 32 of
        # the S = 4 FPGA core's routed end points at 11.7 ns, 339a669)
        ratio_q = Signal(32, name="clip_ratio")
        clip_pending = Signal(name="clip_pending")
        m.d.sync += ratio_q.eq(dp.ratio)
        clip_q, clip_lt = clip_factor(m, ratio_q)
        nonfinite = Signal(name="nonfinite")
        fused = Signal(name="fused")           # a one-pass STEP1 is running
        ss_got = Signal(name="sumsq_got")      # its sum of squares has arrived

        # Accumulate front end: G (read) + g (delayed) -> write back.
        acc_valid = Signal(name="acc_valid")
        acc_first = Signal(name="acc_first")
        acc_g = Signal(32, name="acc_g")
        acc_addr = Signal(ab, name="acc_addr")
        acc_wvalid = None
        if self.data_cmds:
            adf = Dataflow(m, acc_valid, fp32_config=self.fp32_config,
                           divsqrt_config=self.divsqrt_config, prefix="acc")
            gin = adf.input(acc_g, "gin")
            gsum = adf.add(adf.input(rdata[Mem.G], "gold"), gin, name="gsum")
            acc_out = Signal(32, name="acc_out")
            m.d.comb += acc_out.eq(Mux(acc_first, adf.at(gin, gsum.t), adf.at(gsum, gsum.t)))
            acc_wvalid = adf.valid_at(gsum.t)
            acc_waddr = adf.at(adf.input(acc_addr, "addr"), gsum.t)

        # Update front end.
        upd_valid = Signal(name="upd_valid")
        upd_addr = Signal(ab, name="upd_addr")
        m.d.comb += [
            dp.i.valid.eq(upd_valid | chk_valid | clip_go),
            dp.i.payload.w.eq(rdata[Mem.W]),
            dp.i.payload.m.eq(rdata[Mem.M]),
            dp.i.payload.v.eq(rdata[Mem.V]),
            dp.i.payload.g.eq(rdata[Mem.G]),
            dp.i.payload.tag.eq(Cat(upd_addr, upd_valid)),
        ]

        # ---- READ FIFO ------------------------------------------------------------------------
        rd_pending = Signal(name="rd_pending")
        rd_sel = Signal(2, name="rd_sel")
        if self.data_cmds:
            m.submodules.rfifo = rf = BufferedFIFO(width=32, depth=cfg.rd_fifo_depth)
            m.d.comb += [
                rf.w_en.eq(rd_pending),
                rf.w_data.eq(_sel_data(rdata, rd_sel)),
                self.rdata.valid.eq(rf.r_rdy),
                self.rdata.payload.eq(rf.r_data),
                rf.r_en.eq(self.rdata.ready),
            ]

        # ---- control --------------------------------------------------------------------------
        cur = Signal(cmd_layout(), name="cur")
        idx = Signal(COUNT_BITS, name="idx")
        remaining = Signal(COUNT_BITS, name="remaining")
        drain = Signal(range(self.latency + self.port_skew + 8), name="drain")
        cmd = self.cmd.payload
        in_range = Signal(name="cmd_in_range")
        m.d.comb += in_range.eq((cmd.count != 0) & (cmd.addr + cmd.count <= depth))
        # The FSM sets the ``*_rd`` flags in the cycle the read data leaves the memory; the
        # flags the front ends use are one register later, with ``rdata``.
        chk_valid_rd, chk_last_rd, acc_valid_rd, upd_valid_rd, rd_pending_rd = (
            Signal(name=f"{n}_rd") for n in ("chk_valid", "chk_last", "acc_valid", "upd_valid",
                                             "rd_pending"))
        acc_g_rd = Signal(32, name="acc_g_rd")
        acc_addr_rd = Signal(ab, name="acc_addr_rd")
        acc_first_rd = Signal(name="acc_first_rd")
        upd_addr_rd = Signal(ab, name="upd_addr_rd")
        rd_sel_rd = Signal(2, name="rd_sel_rd")
        # (port_skew: the ports answer port_skew cycles later, and so do these)
        def skewed(sig):
            return delay(m, sig, self.port_skew, f"{sig.name}_skew")
        m.d.sync += [chk_valid.eq(skewed(chk_valid_rd)), chk_last.eq(skewed(chk_last_rd)),
                     acc_valid.eq(acc_valid_rd), acc_g.eq(acc_g_rd), acc_addr.eq(acc_addr_rd),
                     acc_first.eq(acc_first_rd), upd_valid.eq(skewed(upd_valid_rd)),
                     upd_addr.eq(skewed(upd_addr_rd)), rd_pending.eq(rd_pending_rd),
                     rd_sel.eq(rd_sel_rd)]
        m.d.sync += [chk_valid_rd.eq(0), chk_last_rd.eq(0), acc_valid_rd.eq(0),
                     upd_valid_rd.eq(0), rd_pending_rd.eq(0)]

        # Memory writes (defaults: none).
        wdata_words = [Signal(32, name=f"wdata_{Mem.NAMES[s]}") for s in Mem.ALL]
        for s in Mem.ALL:
            m.d.comb += ports[s].w_data.eq(wdata_words[s])

        with m.FSM(name="ctrl") as ctrl:
            with m.State("IDLE"):
                m.d.comb += self.cmd.ready.eq(1)
                if slot is not None:
                    m.d.sync += slot.eq(0)
                with m.If(self.cmd.valid):
                    m.d.sync += [cur.eq(cmd), idx.eq(0), remaining.eq(cmd.count)]
                    with m.Switch(cmd.op):
                        with m.Case(Op.SETREG):
                            with m.Switch(cmd.addr):
                                with m.Case(Reg.MODE):
                                    with m.If(cmd.data[0:2] == 3):
                                        m.d.sync += st.error.eq(1)
                                    with m.Else():
                                        m.d.sync += mode_reg.eq(cmd.data[0:4])
                                with m.Case(Reg.N):
                                    with m.If((cmd.data == 0) | (cmd.data > depth)):
                                        m.d.sync += st.error.eq(1)
                                    with m.Else():
                                        m.d.sync += n_reg.eq(cmd.data)
                                with m.Case(Reg.SCALE_EXP):
                                    k = cmd.data[0:8]
                                    m.d.sync += [st.scale_exp.eq(
                                        Mux(k > SCALE_EXP_MAX, SCALE_EXP_MAX, k)),
                                        st.good_count.eq(0)]
                                with m.Case(Reg.GROWTH):
                                    m.d.sync += growth.eq(cmd.data[0:16])
                                with m.Case(Reg.CLEAR):
                                    m.d.sync += [st.step_count.eq(0), st.skip_count.eq(0)]
                                for a, sig in fregs.items():
                                    with m.Case(a):
                                        m.d.sync += sig.eq(cmd.data)
                                with m.Default():
                                    m.d.sync += st.error.eq(1)
                        for op in ((Op.WRITE, Op.READ, Op.ACCUM) if self.data_cmds else ()):
                            with m.Case(op):
                                with m.If(in_range):
                                    m.next = {Op.WRITE: "WRITE", Op.READ: "READ",
                                              Op.ACCUM: "ACCUM"}[op]
                                with m.Else():
                                    m.d.sync += st.error.eq(1)
                        with m.Case(Op.STEP, Op.STEP1):
                            with m.If(n_reg == 0):
                                m.d.sync += st.error.eq(1)
                            with m.Elif((cmd.op == Op.STEP1) & ~clip_en & ~self.skip_in):
                                # one pass: update and sum of squares together, clip = 1
                                m.d.sync += [remaining.eq(n_reg), nonfinite.eq(0),
                                             clip.eq(ONE_F32), st.clipped.eq(0),
                                             fused.eq(1), ss_got.eq(0)]
                                m.next = "UPDATE"
                            with m.Else():
                                m.d.sync += [remaining.eq(n_reg), nonfinite.eq(0)]
                                m.next = "CHECK"
                        with m.Default():
                            m.d.sync += st.error.eq(1)

            if self.data_cmds:
                with m.State("WRITE"):
                    m.d.comb += self.wdata.ready.eq(1)
                    with m.If(self.wdata.valid):
                        m.d.comb += waddr.eq(cur.addr + idx)
                        for s in Mem.ALL:
                            m.d.comb += [wdata_words[s].eq(self.wdata.payload),
                                         ports[s].w_en.eq(cur.mem == s)]
                        m.d.sync += [idx.eq(idx + 1), remaining.eq(remaining - 1)]
                        with m.If(remaining == 1):
                            m.next = "IDLE"

                with m.State("READ"):
                    m.d.comb += raddr.eq(cur.addr + idx)
                    with m.If(rf.level + rd_pending + rd_pending_rd < cfg.rd_fifo_depth):
                        m.d.comb += [ren[s].eq(cur.mem == s) for s in Mem.ALL]
                        m.d.sync += [rd_pending_rd.eq(1), rd_sel_rd.eq(cur.mem), idx.eq(idx + 1),
                                     remaining.eq(remaining - 1)]
                        with m.If(remaining == 1):
                            m.next = "IDLE"

                with m.State("ACCUM"):
                    m.d.comb += [self.wdata.ready.eq(1), raddr.eq(cur.addr + idx)]
                    with m.If(self.wdata.valid):
                        m.d.comb += ren[Mem.G].eq(1)
                        m.d.sync += [acc_valid_rd.eq(1), acc_g_rd.eq(self.wdata.payload),
                                     acc_addr_rd.eq(cur.addr + idx), acc_first_rd.eq(cur.first),
                                     idx.eq(idx + 1), remaining.eq(remaining - 1)]
                        with m.If(remaining == 1):
                            m.d.sync += drain.eq(gsum.t + self.read_latency + 1)
                            m.next = "ACC_DRAIN"
                with m.State("ACC_DRAIN"):
                    m.d.sync += drain.eq(drain - 1)
                    with m.If(drain == 0):
                        m.next = "IDLE"

            with m.State("CHECK"):
                with m.If(read_go):
                    m.d.comb += [raddr.eq(idx), ren[Mem.G].eq(1)]
                    m.d.sync += [chk_valid_rd.eq(1), chk_last_rd.eq(remaining == 1),
                                 idx.eq(idx + 1), remaining.eq(remaining - 1)]
                    with m.If(remaining == 1):
                        m.next = "SUMSQ"
            with m.State("SUMSQ"):
                m.d.comb += ss.o.ready.eq(1)
                with m.If(ss.o.valid):
                    sumsq = ss.o.payload.r
                    sq_bad = is_inf_or_nan(sumsq)
                    m.d.sync += st.sumsq.eq(sumsq)
                    with m.If(nonfinite | self.skip_in | (clip_en & sq_bad)):
                        m.next = "SKIP"
                    with m.Elif(clip_en):
                        m.next = "CLIP"
                    with m.Else():
                        m.d.sync += [clip.eq(ONE_F32), st.clipped.eq(0)]
                        m.next = "UPDATE_START"
            with m.State("CLIP"):
                with m.If(clip_ok):
                    m.d.comb += clip_go.eq(1)
                    m.next = "CLIP_WAIT"
            with m.State("CLIP_WAIT"):
                with m.If(clip_done):
                    m.d.sync += clip_pending.eq(1)
                    m.next = "UPDATE_START"
            with m.State("SKIP"):
                m.d.sync += [st.skip_count.eq(st.skip_count + 1), st.last_skipped.eq(1),
                             st.good_count.eq(0), clip.eq(ONE_F32), st.clipped.eq(0)]
                with m.If(dyn & (st.scale_exp != 0)):
                    m.d.sync += st.scale_exp.eq(st.scale_exp - 1)
                m.next = "IDLE"
            with m.State("UPDATE_START"):
                m.d.sync += [idx.eq(0), remaining.eq(n_reg)]
                with m.If(clip_pending):
                    m.d.sync += [clip.eq(clip_q), st.clipped.eq(clip_lt), clip_pending.eq(0)]
                m.next = "UPDATE"
            with m.State("UPDATE"):
                with m.If(read_go):
                    m.d.comb += [raddr.eq(idx)] + [ren[s].eq(1) for s in Mem.ALL]
                    m.d.sync += [upd_valid_rd.eq(1), upd_addr_rd.eq(idx), idx.eq(idx + 1),
                                 remaining.eq(remaining - 1)]
                    # one pass: the same G words also feed the sum of squares
                    m.d.sync += [chk_valid_rd.eq(fused),
                                 chk_last_rd.eq(fused & (remaining == 1))]
                    with m.If(remaining == 1):
                        # (and the ports' skew: a write lands up to port_skew cycles late)
                        m.d.sync += drain.eq(self.latency + 2 + self.port_skew)
                        m.next = "UPD_DRAIN"
            with m.State("UPD_DRAIN"):
                m.d.comb += ss.o.ready.eq(fused)
                with m.If(fused & ss.o.valid):
                    m.d.sync += [st.sumsq.eq(ss.o.payload.r), ss_got.eq(1)]
                with m.If(drain != 0):
                    m.d.sync += drain.eq(drain - 1)
                with m.Elif(~fused | ss_got):
                    m.d.sync += [st.step_count.eq(st.step_count + 1), st.last_skipped.eq(0),
                                 fused.eq(0)]
                    with m.If(dyn):
                        with m.If(st.good_count + 1 >= growth):
                            m.d.sync += st.good_count.eq(0)
                            with m.If(st.scale_exp != SCALE_EXP_MAX):
                                m.d.sync += st.scale_exp.eq(st.scale_exp + 1)
                        with m.Else():
                            m.d.sync += st.good_count.eq(st.good_count + 1)
                    m.next = "IDLE"

        # The datapath's registered copies lag these by a cycle: the first check element reaches
        # the CLIP multiply, and the clip element the square root, several cycles later.
        m.d.comb += [sq_phase.eq(ctrl.ongoing("CHECK") | ctrl.ongoing("SUMSQ")),
                     alt_phase.eq(ctrl.ongoing("CLIP") | ctrl.ongoing("CLIP_WAIT"))]

        # Sticky Inf/NaN of the raw gradients read in the check pass.
        with m.If(chk_valid & is_inf_or_nan(g_raw)):
            m.d.sync += nonfinite.eq(1)

        # Write-back of ACCUM and of the update pass (never both at once: one command at a time).
        if acc_wvalid is not None:
            with m.If(acc_wvalid):
                m.d.comb += [waddr.eq(acc_waddr), wdata_words[Mem.G].eq(acc_out),
                             ports[Mem.G].w_en.eq(1)]
        with m.If(dp.o.valid & dp.o.payload.tag[ab]):
            m.d.comb += [
                waddr.eq(dp.o.payload.tag[:ab]),
                wdata_words[Mem.W].eq(dp.o.payload.w),
                wdata_words[Mem.M].eq(dp.o.payload.m),
                wdata_words[Mem.V].eq(dp.o.payload.v),
                ports[Mem.W].w_en.eq(1),
                ports[Mem.M].w_en.eq(upd_mode != Mode.SGD),
                ports[Mem.V].w_en.eq(upd_mode == Mode.ADAM),
            ]

        m.d.comb += self.busy.eq(~self.cmd.ready)
        return m


def _sumsq_latency(lanes: int, fp32_config: FP32Config,
                   divsqrt_config: FP32DivSqrtConfig, ii: int = 1, port_skew: int = 0) -> int:
    ls = LaneSum(lanes=lanes, fp32_config=fp32_config)
    mark_used(ls)                            # only asked for its latency
    sq = OptimDatapath.latencies_for(fp32_config, divsqrt_config, ii)[1]
    return READ_LATENCY + port_skew + sq + ls.latency + 1


def step1_busy_cycles(n: int, *, reduce_lanes: int = 8, fp32_config: FP32Config | None = None,
                      divsqrt_config: FP32DivSqrtConfig | None = None, ii: int = 1,
                      port_skew: int = 0) -> int:
    """:meth:`OptimEngine.step1_cycles` without building an engine (defaults: those of the
    training core's engine)."""
    fc = fp32_config or FP32Config()
    dc = divsqrt_config or FP32DivSqrtConfig()
    latency = READ_LATENCY + port_skew + OptimDatapath.latency_for(fc, dc, ii)
    return ii * (n - 1) + 1 + max(latency + 3 + port_skew,
                                  _sumsq_latency(reduce_lanes, fc, dc, ii, port_skew))


def _sel_data(words, sel):
    out = words[0]
    for s in range(1, len(words)):
        out = Mux(sel == s, words[s], out)
    return out
