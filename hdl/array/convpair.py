"""One FP32 -> BFP converter and FAST statistic time-shared by the matmul engine's two operand
paths (``ArrayConfig.shared_converter``, the FPGA build)."""
from __future__ import annotations

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import stream, wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..bfp.converter import BFPConverter, converter_latency, layout_fields
from ..bfp.faststat import FastStat, stat_layout
from ..bfp.lfsr import BFPNoise
from ..lib.streamreg import StreamRegister
from ..registry import Block
from .config import ArrayConfig
from .quant import conv_req_layout, group_out_layout

__all__ = ["SharedConverter"]


class SharedConverter(wiring.Component):
    """One :class:`~hdl.bfp.converter.BFPConverter` for both operand paths, in turns.

    Path ``k``'s converter requests (``i0``, ``i1``: a group of FP32 words with its width,
    rounding, ``side`` and ``col``, from :class:`~hdl.array.quant.LineQuantizer` built with
    ``shared_converter``) come out on ``o0``/``o1`` as BFP groups, in order, exactly as that
    path's own converter would give them (:class:`~hdl.bfp.stat.QuantStat` with
    ``config.bfp(k)``): each path keeps its own LFSR (:class:`~hdl.bfp.lfsr.BFPNoise` seeded
    ``config.bfp(k).lfsr_seed``, stepped once per group of that path, so a path's ``n``-th
    group takes its ``n``-th draw) and its own statistic (:class:`~hdl.bfp.faststat.FastStat`).

    Timing: one request per cycle in all (round robin when both paths offer one), into an input
    register (the 2:1 payload select ends there), then the converter (``latency`` cycles),
    then the path's output FIFO (``FIFO_DEPTH`` entries, LUT RAM) and a register
    (:class:`~hdl.lib.streamreg.StreamRegister`: ``o_k`` leaves flip-flops), so a group is on
    ``o_k`` two cycles after its write at the earliest. The converter never stalls: a path issues only while it holds a credit,
    a FIFO entry not yet claimed by a group in flight (``FIFO_DEPTH`` credits, one back per
    group read from ``o_k``), so one path's consumer holding its output never blocks the other
    path (both paths' groups meet in the beat assembler: a converter that stalled on one
    path's output would deadlock a ``BWD_WEIGHT`` pass). One path alone runs at a group per
    cycle; both at once at a group per two cycles each, which only 2-bit widths feel (a beat
    takes ``beat_cycles`` >= 4 cycles at wider widths, the FPGA build's one fMAC lane).

    Parameters
    ----------
    config : ArrayConfig
        The engine's configuration.
    side_bits : tuple of int
        Each path's ``side`` width.

    Attributes
    ----------
    latency : int
        Cycles from a request's transfer on ``i_k`` to its group's write into the output FIFO
        (1 + the converter's); the group is on ``o_k`` two cycles later at the earliest.
    stat_latency : int
        Cycles from a group's write into its FIFO to its effect on ``stat`` (3).

    Members
    -------
    i0, i1 : In(stream.Signature(conv_req_layout(config, side_bits[k])))
        Each path's converter requests.
    o0, o1 : Out(stream.Signature(group_out_layout(config, k, side_bits[k])))
        Each path's BFP groups, flags, ``side`` and ``col``.
    stat_load : In(1), stat_in : In(stat_layout).array(2), stat : Out(stat_layout).array(2)
        Each path's statistic (as :class:`~hdl.bfp.stat.QuantStat`'s; one ``stat_load`` for
        both, registered first with ``config.cmd_reg``).
    busy : Out(2)
        Bit ``k``: a group of path ``k`` is in flight, in its FIFO or in its output register.
    """

    #: Output FIFO entries per path (and credits): at least the loop from a request's issue
    #: to its credit's return (``latency`` + 4 cycles: the write, the read into the output
    #: register, the freed register, the credit register) for a group per cycle on one path;
    #: 16 is one LUT RAM's depth on the ECP5.
    FIFO_DEPTH = 16
    stat_latency = FastStat.stat_latency

    def __init__(self, *, config: ArrayConfig, side_bits: tuple[int, int]):
        if not isinstance(config, ArrayConfig):
            self._MustUse__silence = True        # no "never used" warning when rejected
            raise TypeError(f"SharedConverter.config must be an ArrayConfig, not {config!r}")
        self.config = config
        self.side_bits = tuple(side_bits)
        self.latency = 1 + converter_latency(config.bfp(0))
        sl = stat_layout(config.bfp(0))
        super().__init__({
            **{f"i{k}": In(stream.Signature(conv_req_layout(config, sb)))
               for k, sb in enumerate(self.side_bits)},
            **{f"o{k}": Out(stream.Signature(group_out_layout(config, k, sb)))
               for k, sb in enumerate(self.side_bits)},
            "stat_load": In(1), "stat_in": In(sl).array(2), "stat": Out(sl).array(2),
            "busy": Out(2),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        D = self.FIFO_DEPTH
        ins, outs = (self.i0, self.i1), (self.o0, self.o1)
        sb = max(self.side_bits)
        conv = m.submodules.converter = BFPConverter(config=cfg.bfp(0), residual=True,
                                                     noise_in=True, rotate=True)
        noise = [BFPNoise(config=cfg.bfp(k)) for k in range(2)]
        m.submodules.noise0, m.submodules.noise1 = noise

        # ---- credits and the round robin ------------------------------------------------------
        room = [Signal(range(D + 1), init=D, name=f"credits{k}") for k in range(2)]
        has_room = [Signal(init=1, name=f"has_credit{k}") for k in range(2)]
        prefer1 = Signal(name="prefer1")             # path 1 wins when both offer
        want = [ins[k].valid & has_room[k] for k in range(2)]
        grant = [Signal(name=f"grant{k}") for k in range(2)]
        m.d.comb += [
            ins[0].ready.eq(has_room[0] & ~(want[1] & prefer1)),
            ins[1].ready.eq(has_room[1] & ~(want[0] & ~prefer1)),
            grant[0].eq(ins[0].valid & ins[0].ready),
            grant[1].eq(ins[1].valid & ins[1].ready),
        ]
        with m.If(grant[0]):
            m.d.sync += prefer1.eq(1)
        with m.Elif(grant[1]):
            m.d.sync += prefer1.eq(0)

        # ---- input register: the chosen request ------------------------------------------------
        req = Signal(conv_req_layout(cfg, sb), name="in_req")
        in_valid = Signal(name="in_valid")
        in_path = Signal(name="in_path")
        p0, p1 = ins[0].payload, ins[1].payload
        m.d.sync += [
            in_valid.eq(grant[0] | grant[1]), in_path.eq(grant[1]),
            req.conv.eq(Mux(grant[1], p1.conv, p0.conv)),
            req.side.eq(Mux(grant[1], p1.side, p0.side)),
            req.col.eq(Mux(grant[1], p1.col, p0.col)),
        ]
        # the converter never stalls (its output is always taken: o.ready = 1, so i.ready = 1)
        m.d.comb += [
            conv.i.valid.eq(in_valid), conv.i.payload.eq(req.conv), conv.rot.eq(req.col),
            conv.noise.eq(Mux(in_path, noise[1].noise, noise[0].noise)),
            noise[0].advance.eq(in_valid & ~in_path), noise[1].advance.eq(in_valid & in_path),
            conv.o.ready.eq(1),
        ]
        # the path, side and col beside the converter: it advances every cycle, so a delay line
        # of its latency puts them beside the group on o
        tag = Cat(in_path, req.side, req.col)
        for k in range(conv.latency):
            nxt = Signal(len(tag), name=f"tag{k}")
            m.d.sync += nxt.eq(tag)
            tag = nxt
        o_path, o_side, o_col = tag[0], tag[1:1 + sb], tag[1 + sb:]

        # ---- statistics --------------------------------------------------------------------------
        stat_load, stat_in = self.stat_load, self.stat_in
        if cfg.cmd_reg:
            # (as in LineQuantizer: the load and its statistic from registers placed here)
            stat_load = Signal(name="stat_load_q")
            stat_in = [Signal(stat_layout(cfg.bfp(0)), name=f"stat_in{k}_q") for k in range(2)]
            m.d.sync += [stat_load.eq(self.stat_load),
                         *(stat_in[k].eq(self.stat_in[k]) for k in range(2))]
        for k in range(2):
            st = m.submodules[f"stat{k}"] = FastStat(config=cfg.bfp(k))
            m.d.comb += [
                st.valid.eq(conv.o.valid & (o_path == k)), st.group.eq(conv.o.payload),
                st.residual.eq(conv.residual), st.stat_load.eq(stat_load),
                st.stat_in.eq(stat_in[k]), self.stat[k].eq(st.stat),
            ]

        # ---- output FIFOs ---------------------------------------------------------------------
        for k in range(2):
            layout = group_out_layout(cfg, k, self.side_bits[k])
            fifo = m.submodules[f"out_fifo{k}"] = SyncFIFO(width=layout.size, depth=D)
            entry = Signal(layout, name=f"out_entry{k}")
            m.d.comb += [
                entry.group.eq(conv.o.payload.group),
                entry.invalid.eq(conv.o.payload.flags.invalid),
                entry.overflow.eq(conv.o.payload.flags.overflow),
                entry.side.eq(o_side[:self.side_bits[k]]), entry.col.eq(o_col),
                fifo.w_en.eq(conv.o.valid & (o_path == k)), fifo.w_data.eq(entry),
            ]
            # the FIFO's head (a LUT RAM read) into a register before the beat assembler and
            # the tile aligner (read straight, it was the S = 8 engine's routed critical
            # path: 13.42 ns from the FIFO's read pointer into the aligner's shift codes)
            reg = m.submodules[f"out_reg{k}"] = StreamRegister(layout)
            m.d.comb += [
                reg.i.valid.eq(fifo.r_rdy), reg.i.payload.eq(fifo.r_data),
                fifo.r_en.eq(reg.i.ready),
            ]
            wiring.connect(m, reg.o, wiring.flipped(outs[k]))
            # a credit comes back the cycle after its entry leaves the FIFO (``freed``, a
            # register): the consumer's ``ready`` (the beat assembler's, through the output
            # register's) ends there instead of running on through the count into
            # ``has_credit`` (10.69 ns routed in the S = 8 engine at 2655dbb)
            freed = Signal(name=f"credit{k}_freed")
            m.d.sync += freed.eq(fifo.r_en & fifo.r_rdy)
            # the count and its ``!= 0`` for either grant, from registers, the grant only
            # picking between them (through the other path's offer it reached
            # ``has_credit`` across the subtract and the compare: 11.96 ns routed in the
            # S = 8 engine at 354f1af, seed 1)
            kept = Signal.like(room[k], name=f"credits{k}_kept")      # no grant
            taken = Signal.like(room[k], name=f"credits{k}_taken")    # a grant
            m.d.comb += [kept.eq(room[k] + freed), taken.eq(room[k] + freed - 1)]
            m.d.sync += [room[k].eq(Mux(grant[k], taken, kept)),
                         has_room[k].eq(Mux(grant[k], taken != 0, kept != 0))]
            m.d.comb += self.busy[k].eq((room[k] != D) | reg.o.valid)
        return m


def _side_bits(cfg: ArrayConfig) -> tuple[int, int]:
    """The matmul engine's side widths: the streamed operand's result line and flags
    (:func:`hdl.array.opgen.operand_side_layout`), the weights' one bit."""
    from .opgen import operand_side_layout
    return (operand_side_layout(cfg).size, 1)


def _build(preset: str) -> SharedConverter:
    cfg = ArrayConfig.preset(preset)
    return SharedConverter(config=cfg, side_bits=_side_bits(cfg))


def _params(preset: str) -> dict:
    cfg = ArrayConfig.preset(preset)
    sides = _side_bits(cfg)
    return {
        "size": cfg.size, "max_mantissa": cfg.max_mantissa, "lfsr_seed": cfg.lfsr_seed,
        "side_bits": list(sides),
        "latency": 1 + converter_latency(cfg.bfp(0)),
        "fifo_depth": SharedConverter.FIFO_DEPTH,
        "stat_latency": SharedConverter.stat_latency,
        "i_fields": [layout_fields(conv_req_layout(cfg, sb)) for sb in sides],
        "o_fields": [layout_fields(group_out_layout(cfg, k, sb)) for k, sb in enumerate(sides)],
        "stat_fields": layout_fields(stat_layout(cfg.bfp(0))),
    }


TESSERA_BLOCKS = [Block("shared_converter", build=_build, params=_params)]
