"""Proof 3: the stream rule on the stream ports of the engines and the sequencer.

Rule (docs/formal.md): once ``valid`` is 1 it stays 1 and ``payload`` stays the same until a
cycle with ``ready``. It is **asserted** on every output stream and **assumed** of every input
stream (the environment follows it too); all other inputs are free every cycle (``AnySeq``),
including the ``ready`` of every output stream (random backpressure). Memory read ports follow
their contract (``hdl.lib.memport``): ``r_data`` may change only in the cycle after a read
(``r_en``), and is any value then.

DUTs, at their smallest presets:

* ``MatmulEngine`` (``ArrayConfig`` tiny, S = 4): ``cmd`` in, ``rsp`` out;
* ``OptimEngine`` (``OptimConfig`` with depth 16): ``cmd``, ``wdata`` in, ``rdata`` out;
* ``VectorUnit`` (``CoreConfig`` tiny, S = 4): ``cmd`` in (its only stream port; the wrapper
  also asserts its documented contract ``cmd.ready == ~busy``), and the line reader that
  feeds its datapath (``_LineReader``, S = 4, 4-word beats): ``o`` out;
* ``Sequencer`` (``CoreConfig`` tiny): ``mm_cmd``, ``vec_cmd``, ``opt_cmd`` out, ``mm_rsp`` in,
  over any program and precision table the host writes while it is idle.
"""
from __future__ import annotations

from amaranth.hdl import Assert, Assume, Cover, Module, Signal, Value

from hdl.array.config import ArrayConfig
from hdl.array.engine import MatmulEngine
from hdl.core.config import CoreConfig
from hdl.core.sequencer import Sequencer
from hdl.core.vector import VectorUnit, _LineReader
from hdl.optim.config import OptimConfig
from hdl.optim.engine import OptimEngine

from .common import FormalWrapper, Proof, free_inputs, past, small_core_config, stream_rule

__all__ = ["StreamRules", "memory_contract", "PROOFS"]


def memory_contract(m: Module, port, *, name: str):
    """Assume a read port's contract: ``r_data`` holds unless a read was issued last cycle."""
    p_en = past(m, port.r_en, name=f"{name}_past_r_en")
    p_data = past(m, port.r_data, name=f"{name}_past_r_data")
    with m.If(~p_en):
        m.d.comb += Assume(Value.cast(port.r_data) == Value.cast(p_data))


class StreamRules(FormalWrapper):
    """Stream rules on a DUT's stream ports.

    Parameters
    ----------
    dut : wiring.Component
    outs, ins : tuple of str
        Names of the output streams (rule asserted) and input streams (rule assumed).
    mem_ports : tuple of str
        Names of memory ports whose read contract is assumed.
    extra : callable or None
        ``extra(m, dut)``: further properties of this DUT (its own documented contract).
    """

    def __init__(self, dut, *, outs=(), ins=(), mem_ports=(), extra=None):
        self.outs, self.ins, self.mem_ports, self.extra = outs, ins, mem_ports, extra
        super().__init__(dut)

    def properties(self, m: Module):
        dut = self.dut
        free_inputs(m, dut)
        for name in self.ins:
            stream_rule(m, getattr(dut, name), name=name, assume=True)
        for name in self.outs:
            stream_rule(m, getattr(dut, name), name=name)
        for name in self.mem_ports:
            memory_contract(m, getattr(dut, name), name=name)
        if self.extra is not None:
            self.extra(m, dut)


def _vector_contract(m: Module, dut):
    m.d.comb += Assert(dut.cmd.ready == ~dut.busy, "vector cmd.ready == ~busy")
    m.d.comb += Cover(dut.done, "a vector command completes")


def _sequencer_env(m: Module, dut):
    # ``vec_cmd.payload.gscale`` is ``imm + (scale_exp << 23)``, combinational from the
    # optimizer's loss-scale input: the rule holds only while ``scale_exp`` is stable, which
    # the proof assumes (see docs/formal.md, "Findings": it changes during an OPT step, so a
    # VEC/REDUCE command held then would change this field, which those ops ignore)
    p_scale = past(m, dut.scale_exp, name="scale_exp_past")
    started = Signal(name="scale_started")
    m.d.sync += started.eq(1)
    with m.If(started):
        m.d.comb += Assume(dut.scale_exp == p_scale)
    m.d.comb += Cover(dut.done & (dut.status == 0), "a program runs to HALT")


def _matmul():
    return StreamRules(MatmulEngine(config=ArrayConfig.preset("tiny")), outs=("rsp",),
                       ins=("cmd",), mem_ports=("a", "b", "c"))


def _optim():
    return StreamRules(OptimEngine(config=OptimConfig(depth=16)), outs=("rdata",),
                       ins=("cmd", "wdata"), mem_ports=("w", "m", "v", "g"))


def _vector():
    return StreamRules(VectorUnit(config=CoreConfig.preset("tiny")), ins=("cmd",),
                       mem_ports=("a", "b", "d", "e"), extra=_vector_contract)


def _line_reader():
    cfg = CoreConfig.preset("tiny")
    return StreamRules(_LineReader(line_bits=cfg.line_bits, S=cfg.size, L=cfg.size),
                       outs=("o",), mem_ports=(), extra=_reader_env)


def _reader_env(m: Module, dut):
    # its contract: ``start`` only once the previous walk has been consumed (the vector unit
    # starts a reader when its command arrives); weakest form: not while a beat waits
    m.d.comb += Assume(~(dut.start & dut.o.valid & ~dut.o.ready))
    # the reader's read side is a bare r_en/r_addr/r_data triple, not a LinePort member
    p_en = past(m, dut.r_en, name="r_past_en")
    p_data = past(m, dut.r_data, name="r_past_data")
    with m.If(~p_en):
        m.d.comb += Assume(dut.r_data == p_data)


def _sequencer():
    return StreamRules(Sequencer(config=small_core_config()),
                       outs=("mm_cmd", "vec_cmd", "opt_cmd"), ins=("mm_rsp",),
                       extra=_sequencer_env)


def _proof(name, block, build, depth, modes=("bmc", "cover"), timeout=600):
    return Proof(name=name, block=block,
                 prop="stream rule: valid held and payload stable until ready on every output "
                      "stream (inputs assumed to follow it; free backpressure)",
                 build=build, depth=depth, modes=modes, timeout=timeout)


PROOFS = [
    # depth 24 did not finish in 600 s (step 23 after 7 min): 20, with a longer timeout
    _proof("stream_matmul_engine", "MatmulEngine (ArrayConfig tiny, S = 4)", _matmul, 20,
           timeout=1200),
    _proof("stream_optim_engine", "OptimEngine (OptimConfig depth 16)", _optim, 24),
    _proof("stream_vector_unit", "VectorUnit (CoreConfig tiny, S = 4)", _vector, 16),
    # small enough for k-induction: the rule holds in every cycle, not only up to the depth
    _proof("stream_vector_line_reader", "VectorUnit's _LineReader (S = 4, L = 4)",
           _line_reader, 12, modes=("prove", "cover")),
    _proof("stream_sequencer", "Sequencer (small_core_config: 4 banks x 16 lines, prog_depth 16)",
           _sequencer, 18),
]
