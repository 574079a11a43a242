"""The optimizer engine with its own four scratchpads: the registered block ``optim_engine``.

:class:`~hdl.optim.engine.OptimEngine` reaches W, M, V and G through word ports
(:class:`~hdl.lib.memport.WordPort`); the training core puts those ports onto its shared
scratchpad. :class:`OptimEngineWithMemories` puts four ``amaranth.lib.memory.Memory`` of
``config.depth`` FP32 words behind them instead and presents the engine's command interface
unchanged (``cmd``, ``wdata``, ``rdata``, ``busy``, ``status``): this is the block the tests,
the benchmarks and ``make synth`` use.
"""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from ..fp32.config import FP32Config
from ..fp32.divsqrt_config import FP32DivSqrtConfig
from ..lib.mustuse import used_if_rejected
from ..registry import Block
from .config import Mem, OptimConfig
from .datapath import OptimDatapath
from .engine import OPTIM_STATUS_LAYOUT, READ_LATENCY, OptimEngine, cmd_layout

__all__ = ["OptimEngineWithMemories"]


class OptimEngineWithMemories(wiring.Component):
    """:class:`~hdl.optim.engine.OptimEngine` with four on-chip scratchpads W, M, V, G.

    Parameters
    ----------
    config : OptimConfig
        ``depth`` words per scratchpad.
    fp32_config : FP32Config
    divsqrt_config : FP32DivSqrtConfig

    Attributes
    ----------
    engine : OptimEngine
        The engine (a submodule ``engine``).
    latency : int
        ``engine.latency``.

    Members
    -------
    cmd, wdata, rdata, busy, status
        Those of :class:`~hdl.optim.engine.OptimEngine`.
    """

    def __init__(self, *, config: OptimConfig | None = None,
                 fp32_config: FP32Config | None = None,
                 divsqrt_config: FP32DivSqrtConfig | None = None):
        with used_if_rejected(self):
            self.engine = OptimEngine(config=config, fp32_config=fp32_config,
                                      divsqrt_config=divsqrt_config)
        self.config = self.engine.config
        self.fp32_config = self.engine.fp32_config
        self.divsqrt_config = self.engine.divsqrt_config
        self.latency = self.engine.latency
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout())),
            "wdata": In(stream.Signature(32)),
            "rdata": Out(stream.Signature(32)),
            "busy": Out(1),
            "status": Out(OPTIM_STATUS_LAYOUT),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = eng = self.engine
        for sel in Mem.ALL:
            name = Mem.NAMES[sel]
            port = getattr(eng, name)
            mem = Memory(shape=32, depth=self.config.depth, init=[])
            m.submodules[f"mem_{name}"] = mem
            rp = mem.read_port()
            wp = mem.write_port()
            m.d.comb += [
                rp.addr.eq(port.r_addr), rp.en.eq(port.r_en), port.r_data.eq(rp.data),
                wp.addr.eq(port.w_addr), wp.en.eq(port.w_en), wp.data.eq(port.w_data),
            ]
        connect(m, flipped(self.cmd), eng.cmd)
        connect(m, flipped(self.wdata), eng.wdata)
        connect(m, eng.rdata, flipped(self.rdata))
        m.d.comb += [self.busy.eq(eng.busy), self.status.eq(eng.status)]
        return m


def _params(preset: str) -> dict:
    cfg, fc, dc = (OptimConfig.preset(preset), FP32Config.preset(preset),
                   FP32DivSqrtConfig.preset(preset))
    return {**cfg.to_dict(), "latency": READ_LATENCY + OptimDatapath.latency_for(fc, dc, cfg.ii),
            "fp32": fc.to_dict(), "divsqrt": dc.to_dict()}


def _build(preset: str) -> OptimEngineWithMemories:
    return OptimEngineWithMemories(config=OptimConfig.preset(preset),
                                   fp32_config=FP32Config.preset(preset),
                                   divsqrt_config=FP32DivSqrtConfig.preset(preset))


TESSERA_BLOCKS = [Block("optim_engine", build=_build, params=_params)]
