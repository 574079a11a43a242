"""Matmul engine: on-the-fly BFP quantization of FP32 scratchpad lines, tiling, the systolic
array, FP32 accumulation and a host command stream; the scratchpads are reached through line
ports (:class:`hdl.lib.memport.LinePort`). :mod:`hdl.array.standalone` adds memories."""
from __future__ import annotations

from amaranth.hdl import Module, Mux
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out, connect, flipped

from ..bfp.stat import stat_layout
from ..lib.memport import LinePort
from ..lib.streamreg import StreamRegister, StreamSkid
from .accum import OutputAccumulator
from .array import SystolicArray
from .beats import BeatAssembler
from .config import ArrayConfig
from .control import (MEM_A, MEM_B, MEM_C, OP_READ, OP_START, OP_STATUS, OP_WRITE,
                      STATUS_ERR_ADDR, STATUS_ERR_MODE, STATUS_ERR_ROUNDING, STATUS_ERR_SHAPE,
                      STATUS_ERR_WIDTH, STATUS_OK, PassControl, cmd_layout, counters_layout,
                      line_bits, rsp_layout)
from .opgen import OperandLineGen, operand_side_layout
from .ports import PortMux
from .convpair import SharedConverter
from .quant import LineQuantizer
from .results import ResultJoin
from .rowgen import TileRowGen
from .wload import WeightLoader
from .wtile import TileAligner

__all__ = ["OP_WRITE", "OP_READ", "OP_START", "OP_STATUS", "MEM_A", "MEM_B", "MEM_C",
           "STATUS_OK", "STATUS_ERR_MODE", "STATUS_ERR_SHAPE", "STATUS_ERR_WIDTH",
           "STATUS_ERR_ROUNDING", "STATUS_ERR_ADDR",
           "line_bits", "cmd_layout", "rsp_layout", "counters_layout", "MatmulEngine"]


class MatmulEngine(wiring.Component):
    """FP32 matmul engine around the in-place transposed systolic array (docs/array.md).

    Scratchpads, reached through the line ports ``a``, ``b``, ``c``
    (:class:`hdl.lib.memport.LinePort`, ``mem_depth`` lines of ``S`` FP32 words; the engine
    owns no memory: :class:`hdl.array.standalone.MatmulEngineWithMemories` puts three
    ``amaranth.lib.memory.Memory`` behind them, the training core its banked scratchpad):
    ``A`` holds ``X``/``dX`` (``M x K``), ``B`` holds ``W``/``dW`` (``K x N``), ``C`` holds
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
    :func:`sim.model.array.matmul_pass` (bit-exact).

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
    beats and drain (the two passes then share the pipeline in order; a pass reads two
    scratchpads and writes the third, so passes of one mode never read what the other writes,
    and the accumulator's address check orders updates of the same output line). Any other pending
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
    a, b, c : Out(LinePort(addr_bits=line_bits(config), words=S))
        Scratchpads A, B, C (``line_bits = (mem_depth - 1).bit_length()``: in-range line
        addresses; the command's address fields have one more bit for the range check). The
        host's ``READ``/``WRITE`` use them while no pass runs (a ``WRITE`` enables all ``S``
        words), a pass's two operand reads and its accumulator's read-modify-write while it
        runs. Reads rely on the port contract: data one cycle after ``r_en``, held while
        ``r_en = 0``; the engine issues a read only when it will take the data.
    q0, q1, acc : Out(LinePort(addr_bits=line_bits(config), words=S))
        Instead of ``a``, ``b``, ``c`` with ``config.role_ports`` (one address space, as in
        the training core): quantizer 0's and 1's reads (never a write) and the
        accumulator's read-modify-write; the host's ``READ``/``WRITE`` use ``acc`` while no
        pass runs.

    Notes
    -----
    Sub-blocks, one job each: :class:`~hdl.array.control.PassControl` (host protocol, pass
    start/overlap, pass slots, counters), :class:`~hdl.array.opgen.OperandLineGen` and
    :class:`~hdl.array.rowgen.TileRowGen` (the two line generators),
    :class:`~hdl.array.quant.LineQuantizer` x2, :class:`~hdl.array.wtile.TileAligner`,
    :class:`~hdl.array.wload.WeightLoader` (tiles into the array),
    :class:`~hdl.array.beats.BeatAssembler` (beats and result descriptors),
    :class:`~hdl.array.array.SystolicArray`, :class:`~hdl.array.results.ResultJoin`
    (descriptor FIFO), :class:`~hdl.array.accum.OutputAccumulator` and
    :class:`~hdl.array.ports.PortMux` (who drives ``a``, ``b``, ``c``).
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
            "stat_load": In(1),
            "stat_in": In(stat_layout(config.bfp(0))).array(2),
            "stat": Out(stat_layout(config.bfp(0))).array(2),
            **{name: Out(LinePort(addr_bits=line_bits(config), words=config.size))
               for name in self.port_names(config)},
        })

    @staticmethod
    def port_names(config: ArrayConfig) -> tuple[str, ...]:
        """The scratchpad ports: ``("a", "b", "c")``, or by role with ``config.role_ports``:
        ``("q0", "q1", "acc")``."""
        return ("q0", "q1", "acc") if config.role_ports else ("a", "b", "c")

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        S = cfg.size

        # ---- blocks -------------------------------------------------------------------------
        ctl = m.submodules.control = PassControl(config=cfg)
        g0 = m.submodules.gen0 = OperandLineGen(config=cfg)
        g1 = m.submodules.gen1 = TileRowGen(config=cfg)
        q0 = m.submodules.quant0 = LineQuantizer(
            config=cfg, index=0, side_bits=operand_side_layout(cfg).size)
        q1 = m.submodules.quant1 = LineQuantizer(config=cfg, index=1, side_bits=1)
        conv = None
        if cfg.shared_converter:
            conv = m.submodules.converter = SharedConverter(
                config=cfg, side_bits=(operand_side_layout(cfg).size, 1))
        aligner = m.submodules.aligner = TileAligner(config=cfg, side_bits=1)
        wl = m.submodules.wload = WeightLoader(config=cfg)
        beats = m.submodules.beats = BeatAssembler(config=cfg)
        arr = m.submodules.array = SystolicArray(config=cfg)
        res = m.submodules.results = ResultJoin(config=cfg,
                                                depth=4 * S + self.DESC_DEPTH_EXTRA)
        acc = m.submodules.accum = OutputAccumulator(config=cfg)
        pm = None if cfg.role_ports else PortMux(config=cfg)
        if pm is not None:
            m.submodules.ports = pm
        #: sub-blocks of the last elaboration (for simulation-time introspection in tests)
        self.blocks = {"control": ctl, "gen0": g0, "gen1": g1, "quant0": q0, "quant1": q1,
                       "aligner": aligner, "wload": wl, "beats": beats, "array": arr,
                       "results": res, "accum": acc, **({"ports": pm} if pm else {}),
                       **({"converter": conv} if conv is not None else {})}

        # ---- host side ----------------------------------------------------------------------
        connect(m, flipped(self.cmd), ctl.cmd)
        connect(m, ctl.rsp, flipped(self.rsp))
        m.d.comb += [self.busy.eq(ctl.busy), self.counters.eq(ctl.counters)]

        # ---- pass control -> datapath settings, generators --------------------------------------
        mode, running = ctl.mode, ctl.running
        m.d.comb += [
            q0.width.eq(ctl.width_a), q0.rounding.eq(ctl.rounding),
            q0.transpose.eq(ctl.transpose),
            q1.width.eq(ctl.width_b), q1.rounding.eq(ctl.rounding),
            q1.transpose.eq(ctl.transpose),
            arr.mode.eq(mode), arr.width_a.eq(ctl.width_a), arr.width_b.eq(ctl.width_b),
            aligner.clear.eq(ctl.start), wl.clear.eq(ctl.start), beats.clear.eq(ctl.start),
            beats.mode.eq(mode), beats.shift.eq(ctl.shift), beats.running.eq(running),
        ]
        if pm is not None:
            m.d.comb += [pm.mode.eq(mode), pm.running.eq(running)]
        # (``req_reg``: a skid buffer, then a register slice, on each request stream. The
        # skid buffer's registered ``ready`` steps the generator, so the quantizer's room and
        # the slice's ready no longer reach the generator's step and the enables of its
        # counters and walks (12.72 ns routed into the walk registers of the S = 4 FPGA core
        # at d35a271). A generator offers a request in every cycle from its launch to its
        # last (``valid`` is ``running & ~done``, no ready in it), so the buffer hands the
        # slice the same requests in the same cycles as the generator itself would: the
        # buffer's output is valid from the launch to the last request and moves on the same
        # readies. A generator is then "done" with its last request possibly still in the
        # slice: the overlap rule only needs the requests' order, which both keep, and a pass
        # ends on retired lines)
        skids = [None, None]
        for i, (gen, q) in enumerate(((g0, q0), (g1, q1))):
            if cfg.req_reg:
                skid = m.submodules[f"req_skid{i}"] = StreamSkid(gen.req.payload.shape())
                slice_ = m.submodules[f"req_reg{i}"] = StreamRegister(gen.req.payload.shape())
                self.blocks[f"req_skid{i}"] = skid
                self.blocks[f"req_reg{i}"] = slice_
                connect(m, gen.req, skid.i)
                connect(m, skid.o, slice_.i)
                connect(m, slice_.o, q.req)
                skids[i] = skid
            else:
                connect(m, gen.req, q.req)
        for i, (gen, launch, done) in enumerate(((g0, ctl.launch, ctl.gen0_done),
                                                 (g1, ctl.launch_rows, ctl.gen1_done))):
            m.d.comb += [gen.running.eq(running), gen.launch.eq(launch),
                         gen.shape.eq(ctl.shape)]
            # a generator is done for the control when its last request has left the skid
            # buffer too (the buffer is empty: its ``i.ready``): the same cycle as without
            # the buffer (above)
            m.d.comb += done.eq(gen.done & (skids[i].i.ready if skids[i] is not None else 1))
        m.d.comb += [ctl.issue.eq(beats.issue), ctl.beat_invalid.eq(beats.beat_invalid),
                     ctl.beat_overflow.eq(beats.beat_overflow), ctl.retire.eq(acc.retire)]

        # ---- datapath: line requests -> groups -> beats -> array -> results ------------------
        if conv is None:
            for i, q in enumerate((q0, q1)):
                m.d.comb += [q.stat_load.eq(self.stat_load), q.stat_in.eq(self.stat_in[i]),
                             self.stat[i].eq(q.stat)]
            connect(m, q0.o, beats.x)
            connect(m, q1.o, beats.y)
        else:
            m.d.comb += conv.stat_load.eq(self.stat_load)
            for i in range(2):
                m.d.comb += [conv.stat_in[i].eq(self.stat_in[i]), self.stat[i].eq(conv.stat[i])]
            connect(m, q0.c, conv.i0)
            connect(m, q1.c, conv.i1)
            connect(m, conv.o0, beats.x)
            connect(m, conv.o1, beats.y)
        connect(m, beats.rows, aligner.i)
        connect(m, aligner.o, wl.i)
        connect(m, wl.wload, arr.wload)
        connect(m, wl.tile, beats.tile)
        connect(m, beats.beat, arr.inp)
        connect(m, beats.desc, res.desc)
        connect(m, arr.out, res.out)
        connect(m, res.acc, acc.i)
        connect(m, res.ahead, acc.ahead)

        # ---- scratchpad ports ---------------------------------------------------------------
        if pm is None:          # by role: the quantizers read, the accumulator (or the host)
            q0p, q1p, accp = self.q0, self.q1, self.acc
            for q, port in ((q0, q0p), (q1, q1p)):
                m.d.comb += [port.r_addr.eq(q.rd_addr), port.r_en.eq(q.rd_en),
                             q.rd_data.eq(port.r_data)]
            host_rd, host_wr = ctl.host_rd.any(), ctl.host_wr.any()
            m.d.comb += [
                accp.r_addr.eq(Mux(running, acc.rd_addr, ctl.host_addr)),
                accp.r_en.eq(acc.rd_en | host_rd),
                acc.rd_data.eq(accp.r_data), ctl.host_rdata.eq(accp.r_data),
                accp.w_addr.eq(Mux(running, acc.wr_addr, ctl.host_addr)),
                accp.w_data.eq(Mux(running, acc.wr_data, ctl.host_data)),
                accp.w_en.eq(acc.wr_en | Mux(host_wr, (1 << S) - 1, 0)),
            ]
            return m
        m.d.comb += [
            pm.q0.r_addr.eq(q0.rd_addr), pm.q0.r_en.eq(q0.rd_en), q0.rd_data.eq(pm.q0.r_data),
            pm.q1.r_addr.eq(q1.rd_addr), pm.q1.r_en.eq(q1.rd_en), q1.rd_data.eq(pm.q1.r_data),
            pm.acc.r_addr.eq(acc.rd_addr), pm.acc.r_en.eq(acc.rd_en),
            acc.rd_data.eq(pm.acc.r_data),
            pm.acc.w_addr.eq(acc.wr_addr), pm.acc.w_en.eq(acc.wr_en),
            pm.acc.w_data.eq(acc.wr_data),
            pm.host_addr.eq(ctl.host_addr), pm.host_data.eq(ctl.host_data),
            pm.host_rd.eq(ctl.host_rd), pm.host_wr.eq(ctl.host_wr),
            pm.host_rsel.eq(ctl.host_rsel), ctl.host_rdata.eq(pm.host_rdata),
        ]
        for name in ("a", "b", "c"):
            connect(m, getattr(pm, name), flipped(getattr(self, name)))
        return m
