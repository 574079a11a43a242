"""The matmul engine with its own three scratchpads: the registered block ``matmul_engine``.

:class:`~hdl.array.engine.MatmulEngine` reaches its scratchpads A, B and C through line ports
(:class:`~hdl.lib.memport.LinePort`); the training core puts those ports onto its shared
scratchpad. :class:`MatmulEngineWithMemories` puts three ``amaranth.lib.memory.Memory`` of
``config.mem_depth`` lines of ``S`` FP32 words behind them instead and presents the engine's
host interface unchanged (``cmd``, ``rsp``, ``busy``, ``counters``): this is the block the
tests, the benchmark and ``tessera generate`` use.
"""
from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out, connect, flipped

from ..bfp.stat import stat_layout
from ..lib.memport import serve_read, serve_write
from ..lib.mustuse import used_if_rejected
from ..registry import Block
from .config import ArrayConfig
from .engine import MatmulEngine, cmd_layout, counters_layout, rsp_layout

__all__ = ["MatmulEngineWithMemories"]


class MatmulEngineWithMemories(wiring.Component):
    """:class:`~hdl.array.engine.MatmulEngine` with three on-chip scratchpads A, B, C.

    Each scratchpad is an ``amaranth.lib.memory.Memory`` of ``config.mem_depth`` lines of
    ``S * 32`` bits with one synchronous, non-transparent read port and one write port of
    32-bit granularity (one enable per FP32 word), the timing of
    :class:`~hdl.lib.memport.LinePort`.

    Parameters
    ----------
    config : ArrayConfig

    Attributes
    ----------
    engine : MatmulEngine
        The engine (submodule ``engine``).
    memories : dict of str to Memory
        ``"a"``, ``"b"``, ``"c"`` (submodules ``mem_a``, ``mem_b``, ``mem_c``), of the last
        elaboration; with ``config.role_ports`` one memory (submodule ``mem``: A, B and C are
        one address space, as in the training core) under all three names.

    Members
    -------
    cmd, rsp, busy, counters, stat
        Those of :class:`~hdl.array.engine.MatmulEngine` (``stat``: the two converters' FAST
        statistics, accumulated from reset on: ``stat_load`` is tied to 0 here).
    """

    def __init__(self, *, config: ArrayConfig):
        with used_if_rejected(self):
            self.engine = MatmulEngine(config=config)
        self.config = config
        super().__init__({
            "cmd": In(stream.Signature(cmd_layout(config))),
            "rsp": Out(stream.Signature(rsp_layout(config))),
            "busy": Out(1),
            "counters": Out(counters_layout()),
            "stat": Out(stat_layout(config.bfp(0))).array(2),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.config
        m.submodules.engine = eng = self.engine
        self.memories = {}
        if cfg.role_ports:      # one scratchpad: three read ports, the accumulator writes
            mem = Memory(shape=cfg.size * 32, depth=cfg.mem_depth, init=[])
            m.submodules.mem = mem
            self.memories = {"a": mem, "b": mem, "c": mem}
            # with mem_latency = 2 every request passes a register first (as the training
            # core's crossbar registers the engine's requests), with 3 the read data too
            for name in ("q0", "q1", "acc"):
                serve_read(m, getattr(eng, name), mem.read_port(), cfg.mem_latency, name)
            serve_write(m, eng.acc, mem.write_port(granularity=32), cfg.mem_latency, "acc")
        for name in () if cfg.role_ports else ("a", "b", "c"):
            port = getattr(eng, name)
            mem = Memory(shape=cfg.size * 32, depth=cfg.mem_depth, init=[])
            m.submodules[f"mem_{name}"] = mem
            self.memories[name] = mem
            rp = mem.read_port()
            wp = mem.write_port(granularity=32)
            m.d.comb += [
                rp.addr.eq(port.r_addr), rp.en.eq(port.r_en), port.r_data.eq(rp.data),
                wp.addr.eq(port.w_addr), wp.en.eq(port.w_en), wp.data.eq(port.w_data),
            ]
        connect(m, flipped(self.cmd), eng.cmd)
        connect(m, eng.rsp, flipped(self.rsp))
        m.d.comb += [self.busy.eq(eng.busy), self.counters.eq(eng.counters),
                     self.stat[0].eq(eng.stat[0]), self.stat[1].eq(eng.stat[1])]
        return m


def _params(preset: str) -> dict:
    cfg = ArrayConfig.preset(preset)

    def fields(layout):
        return {name: [f.offset, f.width] for name, f in layout}

    return {
        **cfg.to_dict(), "acc_bits": cfg.acc_bits,
        "latency": 1 + int(cfg.cmd_reg),
        "latency_note": "WRITE/STATUS and rejected commands answer `latency` cycles after "
                        "acceptance, READ one more; a START answers when its pass is complete "
                        "(counters.cycles)",
        "cmd_layout": fields(cmd_layout(cfg)), "rsp_layout": fields(rsp_layout(cfg)),
        "counters_layout": fields(counters_layout()),
    }


TESSERA_BLOCKS = [
    Block(name="matmul_engine",
          build=lambda preset: MatmulEngineWithMemories(config=ArrayConfig.preset(preset)),
          params=_params),
]
