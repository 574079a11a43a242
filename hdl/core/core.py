"""The training core: host port, sequencer, matmul engine, vector unit and optimizer engine
around one banked FP32 scratchpad (docs/core.md)."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out, connect

from ..array.engine import MatmulEngine
from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..fp32.log_config import FP32LogConfig
from ..grad.config import GradConfig
from ..lib.delay import delay
from ..lib.memport import LinePort, SharedLinePort, WordPortsToLine, WordToLine
from ..lib.mustuse import mark_used
from ..multi.endpoint import LinkEndpoint
from ..multi.collective import CollectiveEngine
from ..optim.config import STATUS_FIELDS, OptimConfig
from ..optim.engine import OptimEngine
from ..registry import Block
from .config import CoreConfig
from .host import HostPort, host_cmd_layout, host_rsp_layout
from .isa import stat_slots
from .scratchpad import Scratchpad
from .sequencer import COUNTERS, Sequencer
from .vector import VectorUnit

__all__ = ["TrainingCore", "REGS", "CLIENTS", "STATE_LAYOUT", "STAT_REG_BASE", "stat_reg",
           "clients_of", "POISON_BITS", "SNOOPED", "SNOOP_LATENCY"]

#: Registers the host reads with ``REG`` (index = position): ``(name, meaning)``.
REGS = (
    ("state", "`STATE_LAYOUT`: status of the last run (4 bits), err_pc (16), running (1), "
              "conflict (1: two clients hit one bank port, or two ports that share a client "
              "reached memory in one cycle, or, with OutRegRAM banks (the FPGA build without "
              "a collective engine), a bank's line was read and written in one cycle), and "
              "the last ALLREDUCE's or "
              "SENDRECV's response: "
              "coll_status (3, `CollStatus`), coll_step (5, the ring step of a TIMEOUT), "
              "coll_flags (2: a BFP group this core sent held a NaN / an Inf)"),
    *((name, meaning) for name, _, meaning in COUNTERS),
    *((f"optim_{name}", f"optimizer status field {name} ({w} bits)")
      for name, w in STATUS_FIELDS),
)

#: ``REG`` index of the first FAST statistic word (docs/fast.md): statistic ``k =
#: stat_slot(layer, mode, operand)`` is read as two 64-bit words, ``STAT_REG_BASE + 2 k``
#: (bits 0..63 of its :func:`hdl.bfp.stat.stat_layout` value: ``num``, ``den``) and
#: ``STAT_REG_BASE + 2 k + 1`` (bits 64..: ``exp``, ``seen``).
STAT_REG_BASE = 256


def stat_reg(slot: int, word: int) -> int:
    """``REG`` index of word ``word`` (0, 1) of statistic ``slot``."""
    return STAT_REG_BASE + 2 * slot + word


#: The ``state`` register (``REG`` 0).
STATE_LAYOUT = data.StructLayout({"status": 4, "err_pc": 16, "running": 1, "conflict": 1,
                                  "coll_status": 3, "coll_step": 5, "coll_flags": 2})

#: Scratchpad clients in crossbar priority order (a core with ``ranks >= 2`` adds ``COLL_CLIENT``
#: last). Ports that are never busy together share a client (docs/core.md, *Memory system*):
#: ``host`` is the host port and the optimizer's first port (``OPT_CLIENT``, or ``opt_w``) behind
#: a :class:`~hdl.lib.memport.SharedLinePort` (the host reaches memory only while no program
#: runs, the optimizer only while one does); ``vec_ae`` is the vector unit's ``a`` port, which
#: only reads, on a client's read side and its ``e`` port, which only writes, on the write side
#: (a crossbar client has one of each); ``vec_bd`` is its ``b`` port (reads only) and ``d``
#: port behind a ``SharedLinePort`` (``b`` reads in ``VEC`` and ``SOFTMAX_XENT``, ``d`` in
#: ``REDUCE BIAS_GRAD`` with ``acc``, and the unit runs one instruction at a time).
CLIENTS = ("host", "mm_q0", "mm_q1", "mm_acc", "vec_ae", "vec_bd",
           "opt_m", "opt_v", "opt_g")

#: The clients whose writes the gradient-write snoop tests (docs/core.md, "One-pass OPT").
SNOOPED = ("mm_acc", "vec_ae", "vec_bd")
#: Cycles from a snooped write of a non-finite word into the gradient window to the first
#: cycle `flags` bit 2 (and the optimizer's ``skip_in``) shows it: the words' tests and the
#: window compare, the hit, `flags`.
SNOOP_LATENCY = 3
#: The optimizer's one client with ``CoreConfig.optim_one_port`` (instead of opt_w .. opt_g).
OPT_CLIENT = "opt"
#: The optimizer's ports with ``optim_one_port``, and their extra read latency
#: (:class:`~hdl.lib.memport.WordPortsToLine`'s ``skew``; one more with ``spad_reg``, whose
#: crossbar registers the client's requests, and one more with ``spad_out_reg``).
OPT_PORTS = 4
OPT_PORT_SKEW = 4
COLL_CLIENT = "coll"
#: What the collective engine reads as word 0 of a poisoned ``ALLREDUCE`` (canonical NaN).
POISON_BITS = 0x7FC00000


def clients_of(config: CoreConfig) -> tuple[str, ...]:
    """The scratchpad clients of a core of ``config``, in crossbar priority order."""
    base = CLIENTS[:6] if config.optim_one_port else CLIENTS
    return base + ((COLL_CLIENT,) if config.collective is not None else ())


class TrainingCore(wiring.Component):
    """One training core.

    Parameters
    ----------
    config : CoreConfig
    grad_config, fp32_config, divsqrt_config, log_config :
        Configurations of the vector unit's and optimizer's FP32 datapaths.
    optim_config : OptimConfig
        Only ``reduce_lanes``, ``rd_fifo_depth`` and ``ii`` (shared FP32 units, the FPGA
        build's ``CoreConfig.FPGA_OPTIM_II``) are used; the depth is the 16-bit word address
        range of a region (65536).

    Members
    -------
    cmd : In(stream.Signature(host_cmd_layout(config)))
    rsp : Out(stream.Signature(host_rsp_layout(config)))
    done : Out(1)
        One-cycle pulse when a program stops (the interrupt line); START's response follows.
    running : Out(1)
    link_tx : Out(stream.Signature(config.link_width)), only with ``config.ranks >= 2``
        Flits to the next core of the ring (rank ``r + 1``): the collective engine's words or
        BFP groups through the transmit codec (:mod:`hdl.multi.codec`).
    link_rx : In(stream.Signature(config.link_width)), only with ``config.ranks >= 2``
        Flits from the previous core (rank ``r - 1``).
    rank : In(range(config.ranks)), only with ``config.ranks >= 2``
        This core's rank, held constant (the multi-core top ties it).
    link_tx_rev : Out(stream.Signature(32)), only with ``config.reverse_links``
        FP32 words to the previous core (rank ``r - 1``): a ``SENDRECV`` with ``sdir = 1``.
        Words, not flits: the reverse link cuts them into flits itself (no codec, FP32 only).
    link_rx_rev : In(stream.Signature(32)), only with ``config.reverse_links``
        FP32 words from the next core (rank ``r + 1``): a ``SENDRECV`` with ``rdir = 1``.

    A ``REG`` is answered four cycles after the host port takes it (:class:`HostPort`
    ``reg_latency`` 3: the register file's mux in two register steps, :attr:`REG_GROUP`
    registers each, then the group, and a register after it), with the registers' values of
    the cycle after it.
    """

    #: Registers per group of the register file's first mux step (a power of two).
    REG_GROUP = 8

    def __init__(self, *, config: CoreConfig, grad_config: GradConfig | None = None,
                 fp32_config: FP32Config | None = None,
                 divsqrt_config: FP32DivSqrtConfig | None = None,
                 log_config: FP32LogConfig | None = None,
                 optim_config: OptimConfig | None = None):
        if not isinstance(config, CoreConfig):
            raise TypeError(f"TrainingCore.config must be a CoreConfig, not {config!r}")
        self.config = config
        self.grad_config = grad_config or config.grad
        if not isinstance(self.grad_config, GradConfig):
            raise TypeError(f"TrainingCore.grad_config must be a GradConfig, not "
                            f"{self.grad_config!r}")
        if self.grad_config.max_classes < config.max_classes:
            raise ValueError(f"TrainingCore.grad_config.max_classes "
                             f"({self.grad_config.max_classes}) must be >= "
                             f"CoreConfig.max_classes ({config.max_classes})")
        self.fp32_config = fp32_config or FP32Config()
        self.divsqrt_config = divsqrt_config or FP32DivSqrtConfig()
        self.log_config = log_config or FP32LogConfig()
        oc = optim_config or OptimConfig()
        if not isinstance(oc, OptimConfig):
            raise TypeError(f"TrainingCore.optim_config must be an OptimConfig, not {oc!r}")
        self.optim_config = OptimConfig(depth=65536, reduce_lanes=oc.reduce_lanes,
                                        rd_fifo_depth=oc.rd_fifo_depth, ii=oc.ii)
        if config.optim_shared_units and oc.ii == 1:
            mark_used(self)                  # rejected: no "never used" warning
            raise ValueError("TrainingCore.optim_config.ii must be > 1 with "
                             "CoreConfig.optim_shared_units (the optimizer's units are shared "
                             "ones), not 1")
        if config.optim_one_port and oc.ii < OPT_PORTS:
            mark_used(self)
            raise ValueError(f"TrainingCore.optim_config.ii must be >= {OPT_PORTS} with "
                             f"CoreConfig.optim_one_port (its four ports take turns on one "
                             f"client), not {oc.ii}")
        super().__init__({
            "cmd": In(stream.Signature(host_cmd_layout(config))),
            "rsp": Out(stream.Signature(host_rsp_layout(config))),
            "done": Out(1),
            "running": Out(1),
            **({} if config.collective is None else {
                "link_tx": Out(stream.Signature(config.link_width)),
                "link_rx": In(stream.Signature(config.link_width)),
                "rank": In(range(config.ranks)),
            }),
            **({} if not config.reverse_links else {
                "link_tx_rev": Out(stream.Signature(32)),
                "link_rx_rev": In(stream.Signature(32)),
            }),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S, lb = cfg.size, cfg.line_bits

        host = m.submodules.host = HostPort(config=cfg, reg_count=len(REGS),
                                            stat_base=STAT_REG_BASE,
                                            stat_count=2 * stat_slots(cfg),
                                            opt_depth=self.optim_config.depth,
                                            stat_latency=Sequencer.STAT_READ_LATENCY,
                                            reg_latency=3)
        seq = m.submodules.sequencer = Sequencer(config=cfg)
        mm = m.submodules.matmul = MatmulEngine(config=cfg.array)
        vec = m.submodules.vector = VectorUnit(config=cfg, grad_config=self.grad_config,
                                               fp32_config=self.fp32_config,
                                               divsqrt_config=self.divsqrt_config,
                                               log_config=self.log_config)
        # the host and the sequencer issue only SETREG, STEP and STEP1: no WRITE/READ/ACCUM
        # hardware (the read FIFO, the accumulate adder)
        # config.optim_shared_units: its first shared multiplier, its adder and its divider
        # are the vector unit's (the sequencer never runs OPT beside a vector instruction)
        units = ("add", "mul", "div") if cfg.optim_shared_units else ()
        opt = m.submodules.optim = OptimEngine(config=self.optim_config,
                                               fp32_config=self.fp32_config,
                                               divsqrt_config=self.divsqrt_config,
                                               data_cmds=False, units=units,
                                               port_skew=OPT_PORT_SKEW + cfg.spad_latency
                                               - 1 if cfg.optim_one_port
                                               else 0)
        for k in units:
            connect(m, getattr(opt, f"unit_{k}0"), getattr(vec, f"opt_{k}0"))
        clients = clients_of(cfg)
        # the clients with registered requests (config.spad_reg) and registered bank read
        # data (config.spad_out_reg): all of them (their ports then have a read latency of
        # config.spad_latency; the collective engine's is its config's mem_latency)
        engines = tuple(range(len(clients)))
        spad = m.submodules.scratchpad = Scratchpad(
            config=cfg, clients=len(clients), registered=engines if cfg.spad_reg else (),
            out_registered=engines if cfg.spad_out_reg else (),
            ram_banks=cfg.spad_out_reg and cfg.collective is None)
        assert all(spad.read_latency(i) == cfg.spad_latency for i in engines)
        #: sub-blocks of the last elaboration (tests reach memories and state through them)
        self.blocks = {"host": host, "sequencer": seq, "matmul": mm, "vector": vec,
                       "optim": opt, "scratchpad": spad}

        # ---- host port ----------------------------------------------------------------------
        connect(m, wiring.flipped(self.cmd), host.cmd)
        connect(m, host.rsp, wiring.flipped(self.rsp))
        m.d.comb += [
            seq.prog_we.eq(host.prog_we), seq.prog_waddr.eq(host.prog_waddr),
            seq.prog_wdata.eq(host.prog_wdata),
            seq.prec_we.eq(host.prec_we), seq.prec_waddr.eq(host.prec_waddr),
            seq.prec_wdata.eq(host.prec_wdata), host.prec_bad.eq(seq.prec_bad),
            seq.thr_we.eq(host.thr_we), seq.thr_waddr.eq(host.thr_waddr),
            seq.thr_wdata.eq(host.thr_wdata),
            seq.start.eq(host.start), host.running.eq(seq.running), host.done.eq(seq.done),
            host.status.eq(seq.status), host.err_pc.eq(seq.err_pc),
            self.done.eq(seq.done), self.running.eq(seq.running),
        ]
        # register file
        state = Signal(STATE_LAYOUT, name="reg_state")
        m.d.comb += [state.status.eq(seq.status), state.err_pc.eq(seq.err_pc),
                     state.running.eq(seq.running)]
        if cfg.collective is not None:
            m.d.comb += [state.coll_status.eq(seq.coll_last.status),
                         state.coll_step.eq(seq.coll_last.step),
                         state.coll_flags.eq(seq.coll_last.flags)]
        # a REG's answer samples the register file the cycle after the command is taken, and
        # after a run the host takes a command no earlier than with START's response, the cycle
        # after `done`: two cycles after `done`, when the counters are final
        assert Sequencer.COUNTERS_LAG <= 2, "the host could read a counter before its total"
        values = [state] + [seq.counters[name] for name, _, _ in COUNTERS] \
            + [opt.status[name] for name, _ in STATUS_FIELDS]
        # the mux in two steps (HostPort reg_latency = 3): groups of REG_GROUP registers each
        # into a register by the index's low bits, then the group by its high bits (in one
        # step, the index through a 64-bit mux of registers from across the core into the
        # host's response was 47 routed end points at 12.64 ns in the S = 4 FPGA core)
        low = self.REG_GROUP.bit_length() - 1
        parts = []
        for g in range(len(values))[::self.REG_GROUP]:
            part = Signal(64, name=f"reg_part{g // self.REG_GROUP}")
            with m.Switch(host.reg_index[:low]):
                for i, v in enumerate(values[g:g + self.REG_GROUP]):
                    with m.Case(i):
                        m.d.sync += part.eq(v)
            parts.append(part)
        # the group's select into a register too (reg_latency 3): the index's decode and the
        # group select in front of the host's response register were its routed end points
        # over 10 ns in every S = 4 FPGA run (82 at 11.76 ns at dd69ac6)
        with m.Switch(host.reg_index[low:]):
            for g, part in enumerate(parts):
                with m.Case(g):
                    m.d.sync += host.reg_data.eq(part)
        # FAST statistic words: read from the sequencer's statistic memories
        m.d.comb += [seq.stat_raddr.eq(host.stat_slot), seq.stat_ren.eq(host.stat_en),
                     host.stat_rdata.eq(seq.stat_rdata)]

        # ---- matmul engine ------------------------------------------------------------------
        connect(m, seq.mm_cmd, mm.cmd)
        connect(m, mm.rsp, seq.mm_rsp)
        m.d.comb += seq.mm_counters.eq(mm.counters)
        m.d.comb += [mm.stat_load.eq(seq.mm_stat_load)]
        m.d.comb += [mm.stat_in[i].eq(seq.mm_stat_in[i]) for i in range(2)]
        m.d.comb += [seq.mm_stat[i].eq(mm.stat[i]) for i in range(2)]

        # ---- vector unit --------------------------------------------------------------------
        connect(m, seq.vec_cmd, vec.cmd)
        m.d.comb += seq.vec_done.eq(vec.done)

        # ---- optimizer: commands from the sequencer while running, else the host ----------------
        with m.If(seq.running):
            m.d.comb += [opt.cmd.valid.eq(seq.opt_cmd.valid),
                         opt.cmd.payload.eq(seq.opt_cmd.payload),
                         seq.opt_cmd.ready.eq(opt.cmd.ready)]
        with m.Else():
            m.d.comb += [opt.cmd.valid.eq(host.opt_cmd.valid),
                         opt.cmd.payload.eq(host.opt_cmd.payload),
                         host.opt_cmd.ready.eq(opt.cmd.ready)]
        m.d.comb += [seq.opt_busy.eq(opt.busy), seq.scale_exp.eq(opt.status.scale_exp),
                     # a NaN / Inf that reached a BFP converter in this run, or was written into
                     # a one-pass OPT's gradient lines, skips the step
                     opt.skip_in.eq(seq.counters.flags != 0),
                     opt.wdata.valid.eq(0), opt.rdata.ready.eq(1)]
        opt_lines = {}
        if cfg.optim_one_port:
            # one client, the four ports one cycle each (the engine's port_skew)
            ad = m.submodules.opt_adapter = WordPortsToLine(
                ports=OPT_PORTS, word_bits=self.optim_config.addr_bits, line_bits=lb, words=S,
                latency=cfg.spad_latency)
            assert ad.skew == opt.port_skew
            for i, name in enumerate("wmvg"):
                connect(m, getattr(opt, name), ad.word[i])
                m.d.comb += ad.base[i].eq(seq.opt_base[i])
            opt_lines[OPT_CLIENT] = ad.line
        else:
            for i, name in enumerate("wmvg"):
                ad = WordToLine(word_bits=self.optim_config.addr_bits, line_bits=lb, words=S)
                m.submodules[f"opt_{name}_adapter"] = ad
                connect(m, getattr(opt, name), ad.word)
                m.d.comb += ad.base.eq(seq.opt_base[i])
                opt_lines[f"opt_{name}"] = ad.line

        # ---- clients shared by ports that are never busy together --------------------------
        # the vector unit's a port only reads and its e port only writes: one client, a on its
        # read side and e on its write side
        vec_ae = LinePort(addr_bits=lb, words=S).create(path=("vec_ae",))
        m.d.comb += [
            vec_ae.r_addr.eq(vec.a.r_addr), vec_ae.r_en.eq(vec.a.r_en),
            vec.a.r_data.eq(vec_ae.r_data),
            vec_ae.w_addr.eq(vec.e.w_addr), vec_ae.w_en.eq(vec.e.w_en),
            vec_ae.w_data.eq(vec.e.w_data),
        ]
        # ports that take turns: the vector unit's b (VEC, SOFTMAX_XENT) and d (its reads only
        # in REDUCE BIAS_GRAD with acc; one instruction at a time); the host and the
        # optimizer's first port (no program runs / one does)
        # (each selected by a register, so no client's enable reaches a bank's address through
        # the sharing multiplexers: b never writes, d reads only in an accumulating bias
        # gradient, the host only while no program runs)
        vs = m.submodules.vec_share = SharedLinePort(addr_bits=lb, words=S, select=True)
        connect(m, vec.b, vs.first)
        connect(m, vec.d, vs.second)
        m.d.comb += [vs.r_sel.eq(vec.d_reads), vs.w_sel.eq(1)]
        hs = m.submodules.host_share = SharedLinePort(addr_bits=lb, words=S, select=True)
        m.d.comb += [hs.r_sel.eq(seq.running), hs.w_sel.eq(seq.running)]
        connect(m, host.mem, hs.first)
        connect(m, opt_lines.pop(OPT_CLIENT if cfg.optim_one_port else "opt_w"), hs.second)
        # a line read and written in one cycle counts where it is undefined on the FPGA: the
        # OutRegRAM banks (no collective engine: its word adapter reads a line while another
        # word of it is written, harmless with yosys's collision logic on Memory banks)
        conflict = spad.conflict | hs.clash | vs.clash
        if spad.ram_banks:
            conflict = conflict | spad.collision
        m.d.comb += state.conflict.eq(conflict)
        client_ports = {"host": hs.line, "mm_q0": mm.q0, "mm_q1": mm.q1, "mm_acc": mm.acc,
                        "vec_ae": vec_ae, "vec_bd": vs.line, **opt_lines}

        # ---- collective engine (ranks >= 2): ALLREDUCE over the ring (docs/multicore.md) -----
        coll = cfg.collective
        if coll is not None:
            eng = m.submodules.collective = CollectiveEngine(config=coll,
                                                             fp32_config=self.fp32_config)
            ends = m.submodules.link_endpoint = LinkEndpoint(flit_bits=cfg.link_width,
                                                             bfp_config=coll.bfp,
                                                             conv_skid=cfg.coll_regs)
            self.blocks["collective"] = eng
            connect(m, seq.coll_cmd, eng.cmd)
            connect(m, eng.rsp, seq.coll_rsp)
            m.d.comb += [eng.rank.eq(self.rank), ends.mode.eq(eng.mode), ends.loop.eq(eng.loop),
                         eng.codec_flags.eq(ends.flags), ends.clear_flags.eq(eng.codec_clear),
                         eng.codec_idle.eq(ends.idle), ends.enable.eq(eng.busy)]
            connect(m, eng.tx, ends.i)
            connect(m, ends.o, eng.rx)
            connect(m, ends.link_tx, wiring.flipped(self.link_tx))
            connect(m, wiring.flipped(self.link_rx), ends.link_rx)
            if coll.reverse:
                connect(m, eng.tx_rev, wiring.flipped(self.link_tx_rev))
                connect(m, wiring.flipped(self.link_rx_rev), eng.rx_rev)
            # the engine's word port reaches lines coll_base.. through a word-to-line adapter;
            # a poisoned ALLREDUCE reads the canonical NaN as word 0 (the memory keeps its word).
            # With coll_regs the word read passes one more register (after the word select and
            # the poison mux) before the engine: the engine's mem_latency is the client's + 1.
            port_lat = cfg.spad_latency
            extra = coll.mem_latency - port_lat
            assert extra in (0, 1), (coll.mem_latency, port_lat)
            ad = m.submodules.coll_adapter = WordToLine(word_bits=coll.addr_bits, line_bits=lb,
                                                        words=S, latency=port_lat)
            m.d.comb += ad.base.eq(seq.coll_base)
            w, e = ad.word, eng.mem
            m.d.comb += [w.r_addr.eq(e.r_addr), w.r_en.eq(e.r_en), w.w_addr.eq(e.w_addr),
                         w.w_en.eq(e.w_en), w.w_data.eq(e.w_data)]
            # the NaN replaces the core's contribution once: from the engine's first write of
            # word 0 on (every rank writes every word), reads see the memory again
            read0 = Signal(name="coll_read_word0")
            wrote0 = Signal(name="coll_wrote_word0")
            with m.If(e.r_en):
                m.d.sync += read0.eq((e.r_addr == 0) & ~wrote0)
            read0 = delay(m, read0, port_lat - 1, "coll_read_word0")
            with m.If(seq.coll_cmd.valid & seq.coll_cmd.ready):
                m.d.sync += wrote0.eq(0)
            with m.Elif(e.w_en & (e.w_addr == 0)):
                m.d.sync += wrote0.eq(1)
            word = Mux(seq.coll_poison & read0, POISON_BITS, w.r_data)
            m.d.comb += e.r_data.eq(delay(m, word, extra, "coll_read_data", reset_less=True))
            client_ports[COLL_CLIENT] = ad.line

        # ---- scratchpad clients -------------------------------------------------------------
        for i, name in enumerate(clients):
            connect(m, client_ports[name], spad.ports[i])

        # ---- gradient-write snoop (the skip decision of a one-pass OPT) ---------------------
        # Every word the matmul engine (its accumulator: the engine's only writer) or the
        # vector unit writes into the gradient window (the
        # lines of the one-pass OPTs' g ranges, collected by the program check) is tested for
        # NaN / Inf (exponent field 255); a hit sets `flags` bit 2 two registers later: the
        # written words' tests (one bit per word: enabled and exponent 255) and the window
        # compare are registered apart, so a unit's write data (e.g. straight from a block RAM)
        # meets only its own word test before a register. Only the ports are looked at (line
        # address, word enables, data), so this holds whatever the units do inside, e.g. how
        # many elements per cycle the vector unit handles. The two cycles are in time for
        # every reader of `flags` (docs/core.md, "One-pass OPT").
        snooped = {n: client_ports[n] for n in SNOOPED}
        hits = []
        for n, port in snooped.items():
            in_win = Signal(name=f"gwin_{n}_in")
            bad = Signal(S, name=f"gwin_{n}_words")
            m.d.sync += [
                in_win.eq((port.w_addr >= seq.gwin_lo) & (port.w_addr < seq.gwin_hi)),
                bad.eq(Cat(*[port.w_en[j] & (port.w_data[32 * j + 23:32 * j + 31] == 0xFF)
                             for j in range(S)])),
            ]
            hits.append(in_win & bad.any())
        gwin_nf = Signal(name="gwin_nonfinite")
        m.d.sync += gwin_nf.eq(Cat(*hits).any())
        m.d.comb += seq.gwin_nonfinite.eq(gwin_nf)
        return m


def _params(preset: str) -> dict:
    from .host import HostOp, HostStatus
    cfg = CoreConfig.preset(preset)

    def fields(layout):
        return {name: [f.offset, f.width] for name, f in layout}

    return {
        **cfg.to_dict(), "lines": cfg.lines, "line_bits": cfg.line_bits,
        "latency": 1,
        "latency_note": "WRITE/PROG/PREC/THRESH/REG answer 1 cycle after acceptance (one "
                        "per cycle); a REG of a statistic word 2 cycles, READ "
                        f"{cfg.spad_latency}, SETREG when the optimizer takes it; START "
                        "answers when the program stops",
        "host_cmd_layout": fields(host_cmd_layout(cfg)),
        "host_rsp_layout": fields(host_rsp_layout(cfg)),
        "host_ops": {k: v for k, v in vars(HostOp).items() if k.isupper() and k != "ALL"},
        "host_status": {k: v for k, v in vars(HostStatus).items() if k.isupper()},
        "regs": [name for name, _ in REGS], "clients": list(clients_of(cfg)),
        "stat_reg_base": STAT_REG_BASE,
    }


TESSERA_BLOCKS = [
    Block(name="training_core",
          build=lambda preset: TrainingCore(config=CoreConfig.preset(preset)),
          params=_params),
]
