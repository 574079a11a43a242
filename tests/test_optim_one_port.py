"""Fast tier: the optimizer engine on **one** memory port (the training core's FPGA build,
``CoreConfig.optim_one_port``): :class:`hdl.lib.memport.WordPortsToLine` takes the engine's
four word ports one cycle each onto a single line port, behind a register, so reads answer
``port_skew = 4`` cycles later and writes land up to 4 cycles late
(``OptimEngine(port_skew=4)``).

The engine and the adapter run on one line memory in the Amaranth simulator: Adam steps
(one-pass and two-pass, clipping and loss scaling) against the golden model word for word,
every step's busy cycles as :meth:`OptimEngine.step1_cycles` says for the one-pass ones, and
every line write inside the engine's busy window (a write that landed after ``busy`` fell
could meet the next instruction's reads).
"""
import numpy as np
import pytest
from amaranth.hdl import Elaboratable, Module
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import connect

from hdl.fp32.config import FP32Config
from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.lib.memport import WordPortsToLine, serve_read, serve_write
from hdl.optim.config import Mem, Op, OptimConfig, Reg
from hdl.optim.engine import OptimEngine
from sim.host.optim import Adam, Clip, LossScale, optimizer_registers, reg_word
from sim.model.optim import OptimEngineModel, f32_bits
from sim.tb.amaranth_tb import run_sim, stream_put

S, LINES, DEPTH = 4, 64, 64          # 4 regions of 16 lines of 4 words
FC, DC = FP32Config.preset("tiny"), FP32DivSqrtConfig.preset("tiny")


class _OnePort(Elaboratable):
    """The engine (``ii = 4``, ``port_skew = 3 + latency``), the adapter and one line memory;
    region ``k`` (W, M, V, G) at line ``16 k``. With ``latency >= 2`` the line port's
    requests pass a register before the memory, with 3 its read data too (as the core's
    crossbar does for a registered and out_registered client)."""

    def __init__(self, init_lines, latency=1):
        self.latency = latency
        self.eng = OptimEngine(config=OptimConfig(depth=DEPTH, ii=4), fp32_config=FC,
                               divsqrt_config=DC, data_cmds=False, port_skew=3 + latency)
        self.ad = WordPortsToLine(ports=4, word_bits=self.eng.config.addr_bits,
                                  line_bits=6, words=S, latency=latency)
        assert self.ad.skew == self.eng.port_skew
        self.mem = Memory(shape=32 * S, depth=LINES, init=init_lines)

    def elaborate(self, platform):
        m = Module()
        m.submodules.eng, m.submodules.ad, m.submodules.mem = self.eng, self.ad, self.mem
        for k, name in enumerate("wmvg"):
            connect(m, getattr(self.eng, name), self.ad.word[k])
            m.d.comb += self.ad.base[k].eq(16 * k)
        serve_read(m, self.ad.line, self.mem.read_port(), self.latency, "line")
        serve_write(m, self.ad.line, self.mem.write_port(granularity=32), self.latency, "line")
        return m


def _lines(mems):
    """Four word arrays of DEPTH words as the memory's line words (region k at line 16 k)."""
    words = np.concatenate([np.asarray(x, np.float32)[:16 * S] for x in mems]).view(np.uint32)
    return [sum(int(words[i * S + j]) << (32 * j) for j in range(S)) for i in range(LINES)]


@pytest.mark.parametrize("n, latency", [(13, 1), (64, 1), (13, 2),
                                        pytest.param(64, 2, marks=pytest.mark.long),
                                        (13, 3), (64, 3)])
def test_one_port_engine_steps_bit_exact(n, latency):
    """Four Adam steps over ``n`` words (one-pass, two-pass with clipping, one-pass again,
    then one skipped by an outside flag): W, M, V equal the golden model's after each, the
    one-pass steps take exactly ``step1_cycles(n)`` busy cycles, and no line is written
    outside a step's busy window (the line port's writes: with ``latency = 2`` each lands an
    edge after it, as every registered client's). With ``latency = 2`` (a registered crossbar
    client) the adapter's skew and the engine's ``port_skew`` are 5, with 3 (the FPGA
    build's ``spad_out_reg`` too) 6."""
    rng = np.random.default_rng(n)
    model = OptimEngineModel(OptimConfig(depth=DEPTH, ii=4))
    mems = [rng.standard_normal(DEPTH).astype(np.float32),
            np.zeros(DEPTH, np.float32), np.zeros(DEPTH, np.float32),
            rng.standard_normal(DEPTH).astype(np.float32)]
    for k in Mem.ALL:
        model.write(k, 0, mems[k])
    dut = _OnePort(_lines(mems), latency)
    eng, ln = dut.eng, dut.ad.line
    opt = Adam(lr=1e-2)
    plan = [(Op.STEP1, None, 0), (Op.STEP, Clip(0.5), 0), (Op.STEP1, None, 0),
            (Op.STEP1, None, 1)]
    busy_cycles, late = [], []

    async def tb(ctx):
        async def cmd(op, **kw):
            await stream_put(ctx, eng.cmd, {"op": op, "mem": 0, "first": 0, "addr": 0,
                                            "count": 0, "data": 0, **kw})

        for t, (op, clip, skip) in enumerate(plan, start=1):
            regs = optimizer_registers(opt, t, n, LossScale(0, 1, dynamic=False), clip)
            for a, v in regs.items():
                model.setreg(a, v)
                await cmd(Op.SETREG, addr=a, data=reg_word(v))
            model.step(force_skip=bool(skip), one_pass=op == Op.STEP1)
            ctx.set(eng.skip_in, skip)
            await cmd(op)
            cycles = 0
            while ctx.get(eng.busy):
                await ctx.tick()
                cycles += 1
            busy_cycles.append(cycles)
            for _ in range(8):               # nothing may land after busy fell
                if ctx.get(ln.w_en):
                    late.append((t, ctx.get(ln.w_addr)))
                await ctx.tick()
            ctx.set(eng.skip_in, 0)
            got = [ctx.get(dut.mem.data[i]) for i in range(LINES)]
            words = np.array([(g >> (32 * j)) & 0xFFFFFFFF for g in got for j in range(S)],
                             np.uint32)
            for k in (Mem.W, Mem.M, Mem.V):
                want = [f32_bits(x) for x in model.mems[k][:n]]
                assert list(words[16 * S * k:16 * S * k + n]) == want, (t, Mem.NAMES[k])
            assert ctx.get(eng.status.step_count) == model.step_count
            assert ctx.get(eng.status.skip_count) == model.skip_count

    run_sim(dut, tb)
    assert not late, f"writes after busy fell: {late}"
    assert busy_cycles[0] == busy_cycles[2] == eng.step1_cycles(n)
    assert model.skip_count == 1 and model.step_count == 3


def test_one_port_parameters_are_checked():
    """``port_skew`` needs ``data_cmds = False``; the adapter needs a positive port count and
    a power-of-two line; each error names the parameter."""
    with pytest.raises(ValueError, match=r"OptimEngine\.port_skew"):
        OptimEngine(config=OptimConfig(ii=4), port_skew=4)                  # data commands
    with pytest.raises(ValueError, match=r"OptimEngine\.port_skew"):
        OptimEngine(config=OptimConfig(ii=4), data_cmds=False, port_skew=-1)
    with pytest.raises(TypeError, match=r"OptimEngine\.port_skew"):
        OptimEngine(config=OptimConfig(ii=4), data_cmds=False, port_skew=1.0)
    with pytest.raises(ValueError, match=r"WordPortsToLine\.ports"):
        WordPortsToLine(ports=0, word_bits=8, line_bits=6, words=4)
    with pytest.raises(ValueError, match=r"WordPortsToLine\.words"):
        WordPortsToLine(ports=4, word_bits=8, line_bits=6, words=3)
    with pytest.raises(ValueError, match=r"WordPortsToLine\.latency"):
        WordPortsToLine(ports=4, word_bits=8, line_bits=6, words=4, latency=4)
    eng = OptimEngine(config=OptimConfig(ii=4), data_cmds=False, port_skew=4)
    eng._MustUse__silence = True
    plain = OptimEngine(config=OptimConfig(ii=4), data_cmds=False)
    plain._MustUse__silence = True
    assert eng.latency == plain.latency + 4 and eng.read_latency == 6
