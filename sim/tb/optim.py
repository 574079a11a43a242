"""cocotb testbench of the optimizer engine (``optim_engine``) against :mod:`sim.model.optim`.

The host side loads memories and gradients through the ``cmd``/``wdata`` streams (random idle
cycles), starts a STEP and waits for ``busy`` to fall without touching the DUT per cycle; reads
come back through ``rdata`` under random backpressure. Every step's status and, periodically,
every W/M/V word are compared with the golden model.
"""
from __future__ import annotations

import json
import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, FallingEdge, ReadOnly, RisingEdge

from hdl.optim.config import Mem, Op, OptimConfig, Reg, unpack_status
from sim.host.optim import (SGD, Adam, AdamW, Clip, LossScale, Momentum, optimizer_registers,
                            pack_cmd, reg_word)
from sim.model.grad import canon
from sim.model.optim import OptimEngineModel
from sim.tb.cocotb_stream import (WAIT_CYCLES, StreamDriver, StreamMonitor, reset, start_clock,
                                  wait_trigger)

N_PARAMS = 1000
#: Steps of a trajectory: ``TB_STEPS`` (``make test`` runs 32, ``make test-long`` 100; the
#: injected Inf/NaN steps all lie in the first 32).
STEPS = int(os.environ.get("TB_STEPS", "100"))


class TB:
    """Drivers, monitor, golden model and scoreboard of the optimizer engine."""

    def __init__(self, dut, seed: int = 1, idle_prob: float = 0.2, stall_prob: float = 0.3):
        self.dut = dut
        self.config = OptimConfig.preset(os.environ.get("TESSERA_PRESET", "tiny"))
        self.model = OptimEngineModel(self.config)
        self.rng = np.random.default_rng(seed)
        self.cmd = StreamDriver(dut, "cmd", rng=random.Random(seed))
        self.wdata = StreamDriver(dut, "wdata", idle_prob=idle_prob, rng=random.Random(seed + 1))
        self.rdata = StreamMonitor(dut, "rdata", stall_prob=stall_prob,
                                   rng=random.Random(seed + 2))

    async def start(self):
        start_clock(self.dut)
        await reset(self.dut)
        self.rdata.start()

    async def command(self, op, **kw):
        await self.cmd.send(pack_cmd(op, **kw))

    async def wait_idle(self, max_cycles: int = WAIT_CYCLES):
        """Until ``busy`` falls (Python not woken per cycle); TimeoutError after
        ``max_cycles``."""
        await ReadOnly()
        if self.dut.busy.value == 1:
            await wait_trigger(FallingEdge(self.dut.busy), "optimizer busy", max_cycles)
        await RisingEdge(self.dut.clk)

    async def setreg(self, addr, value, model=True):
        if model:
            self.model.setreg(addr, value)
        await self.command(Op.SETREG, addr=addr, data=reg_word(value))

    async def setregs(self, regs: dict):
        for a, v in regs.items():
            await self.setreg(a, v)

    async def write(self, mem, base, data):
        data = np.asarray(data, np.float32)
        self.model.write(mem, base, data)
        await self.command(Op.WRITE, mem=mem, addr=base, count=len(data))
        await self.wdata.send_all(data.view(np.uint32).tolist())
        await self.wait_idle()

    async def accum(self, base, data, first):
        data = np.asarray(data, np.float32)
        self.model.accum(base, data, first)
        await self.command(Op.ACCUM, addr=base, count=len(data), first=int(first))
        await self.wdata.send_all(data.view(np.uint32).tolist())
        await self.wait_idle()

    async def read(self, mem, base, count) -> np.ndarray:
        await self.command(Op.READ, mem=mem, addr=base, count=count)
        words = await self.rdata.wait_for(count)
        await self.wait_idle()
        return np.array(words, dtype=np.uint64)

    def status(self) -> dict:
        return unpack_status(self.dut.status.value.to_unsigned())

    async def step(self, one_pass: bool = False):
        """One STEP (``one_pass``: STEP1) on the DUT and the model; checks the status; returns
        (skipped, cycles)."""
        skipped = self.model.step(one_pass=one_pass)
        await self.command(Op.STEP1 if one_pass else Op.STEP)
        start = cocotb.utils.get_sim_time("ns")
        await self.wait_idle()
        cycles = int((cocotb.utils.get_sim_time("ns") - start) // 10)
        self.check_status()
        return skipped, cycles

    def check_status(self):
        got, exp = self.status(), self.model.status()      # error included (model: 0)
        for k, v in exp.items():
            g = got[k]
            if k == "sumsq":        # raw DUT word; a NaN must be the canonical 0x7FC00000
                v = int(canon(np.array([v], np.uint64))[0])
            assert g == v, f"status.{k}: DUT {g:#x} != model {v:#x}"

    async def check_mems(self, n, mems=(Mem.W, Mem.M, Mem.V), what=""):
        for mem in mems:
            got = await self.read(mem, 0, n)
            exp = self.model.mems[mem][:n].view(np.uint32).astype(np.uint64)
            # raw DUT words: a NaN must be the canonical 0x7FC00000 (docs/fp32.md); only the
            # golden side (numpy, free NaN payloads) is canonicalised
            bad = np.nonzero(got != canon(exp))[0]
            assert len(bad) == 0, (
                f"{what} mem {Mem.NAMES[mem]}: {len(bad)} words differ, first at {bad[0]}: "
                f"DUT {int(got[bad[0]]):#010x} model {int(exp[bad[0]]):#010x}")

    async def snapshot(self, n):
        return {mem: await self.read(mem, 0, n) for mem in (Mem.W, Mem.M, Mem.V, Mem.G)}


async def _trajectory(dut, opt, *, seed, clip=None, scale=LossScale(8, 10), inject=(),
                      micro=1):
    """:data:`STEPS` steps over 1000 parameters; ``inject = {step: value}`` puts Inf/NaN in a
    gradient."""
    assert all(step < STEPS for step in inject), f"an injected step is past {STEPS} steps"
    tb = TB(dut, seed=seed)
    await tb.start()
    n = N_PARAMS
    rng = tb.rng
    await tb.write(Mem.W, 0, rng.standard_normal(n).astype(np.float32))
    await tb.write(Mem.M, 0, np.zeros(n, np.float32))
    await tb.write(Mem.V, 0, np.zeros(n, np.float32))
    await tb.setreg(Reg.CLEAR, 0)
    t = 1
    regs = optimizer_registers(opt, t, n, scale, clip)
    await tb.setregs(regs)
    skips = clipped = 0
    for step in range(STEPS):
        if step:
            await tb.setregs(optimizer_registers(opt, t, n, first=False))
        k = tb.model.scale_exp
        for mb in range(micro):
            # gradients of varying size (so clipping engages on some steps only), scaled by 2**k
            g = rng.standard_normal(n) * 10.0 ** rng.uniform(-3, 1) / micro
            g = (g.astype(np.float32) * np.float32(2.0 ** k)).astype(np.float32)
            if step in inject and mb == micro - 1:
                g[int(rng.integers(n))] = inject[step]
            await tb.accum(0, g, first=(mb == 0))
        before = await tb.snapshot(n) if step in inject else None
        # odd clean steps run one-pass (STEP1: fused unless clipping; it never looks for a
        # non-finite G, so the injected steps stay two-pass)
        skipped, _ = await tb.step(one_pass=step % 2 == 1 and step not in inject)
        assert skipped == (step in inject), f"step {step}: skipped={skipped}"
        if skipped:
            skips += 1
            after = await tb.snapshot(n)
            for mem, words in before.items():
                assert np.array_equal(words, after[mem]), \
                    f"skipped step {step} changed memory {Mem.NAMES[mem]}"
            st = tb.status()
            assert st["scale_exp"] == max(k - 1, 0), "scale did not halve"
        else:
            t += 1
        clipped += tb.status()["clipped"]
        if step % 16 == 15 or step == STEPS - 1:
            await tb.check_mems(n, what=f"after step {step}")
    assert skips == len(inject)
    if clip is not None:
        assert 0 < clipped < STEPS - skips, f"clipping engaged on {clipped} steps (want some)"
    dut._log.info(f"{type(opt).__name__}: {STEPS} steps, {skips} skipped, {clipped} clipped, "
                  f"final scale 2**{tb.model.scale_exp}")
    return tb


@cocotb.test()
async def trajectory_sgd(dut):
    await _trajectory(dut, SGD(lr=0.01), seed=11, inject={30: np.float32(np.inf)})


@cocotb.test()
async def trajectory_momentum(dut):
    await _trajectory(dut, Momentum(lr=0.01, momentum=0.9), seed=12, clip=Clip(1.0),
                      inject={17: np.float32(-np.inf)})


@cocotb.test()
async def trajectory_adam(dut):
    await _trajectory(dut, Adam(lr=1e-3), seed=13, clip=Clip(2.0),
                      inject={5: np.float32(np.nan), 28: np.float32(np.inf)})


@cocotb.test()
async def trajectory_adamw(dut):
    await _trajectory(dut, AdamW(lr=1e-3, weight_decay=0.05), seed=14,
                      inject={23: np.float32(np.inf)}, micro=2)


@cocotb.test()
async def clip_boundary(dut):
    """Clipping engages exactly when max_norm / (norm + eps) < 1 in FP32, i.e. when the norm
    exceeds the bound: bound = norm + eps (no clip), one ulp below (clip), far above/below."""
    tb = TB(dut, seed=21)
    await tb.start()
    n = N_PARAMS
    await tb.write(Mem.W, 0, tb.rng.standard_normal(n).astype(np.float32))
    g = tb.rng.standard_normal(n).astype(np.float32)
    await tb.accum(0, g, first=True)
    eps = np.float32(1e-6)
    from sim.model.optim import lane_sum
    norm = np.sqrt(lane_sum(g * g, tb.config.reduce_lanes))
    at = np.float32(norm + eps)
    ref = float(np.sqrt(np.sum(g.astype(np.float64) ** 2)))
    cases = [(at, 0), (np.nextafter(at, np.float32(0)), 1), (np.float32(ref * 1.01), 0),
             (np.float32(ref * 0.99), 1), (np.float32(ref * 0.5), 1)]
    for bound, want in cases:
        regs = optimizer_registers(SGD(lr=1e-3), 1, n, None, Clip(float(bound), float(eps)),
                                   first=True)
        await tb.setregs(regs)
        await tb.step()
        st = tb.status()
        assert st["clipped"] == want, f"bound {bound!r} norm {norm!r}: clipped={st['clipped']}"
        if want:
            factor = np.array(st["clip_factor"], np.uint32).view(np.float32)
            assert abs(float(factor) - float(bound) / ref) < 1e-5, (factor, float(bound) / ref)
    await tb.check_mems(n, mems=(Mem.W,))


@cocotb.test()
async def invalid_commands_flag_error(dut):
    """Every command the golden model rejects (:meth:`OptimEngineModel.command`: out-of-range
    N / count / address, update rule 3, unknown register or opcode, STEP before N) is ignored:
    after a reset and a known state (memories, registers, one applied step), the command
    raises ``status.error`` and the whole status equals the model's; the memories read back
    unchanged, and a following STEP runs with the N and MODE set before."""
    tb = TB(dut, seed=31)
    await tb.start()
    depth, n = tb.config.depth, 8
    regions = ((0, 16), (depth - 8, 8))         # what the bad ranges would touch

    async def check_regions(what):
        for mem in (Mem.W, Mem.M, Mem.V, Mem.G):
            for base, count in regions:
                got = await tb.read(mem, base, count)
                exp = tb.model.mems[mem][base:base + count].view(np.uint32)
                assert np.array_equal(got, exp), f"{what}: mem {Mem.NAMES[mem]} changed"

    bad = [(Op.SETREG, dict(addr=Reg.N, data=0)), (Op.SETREG, dict(addr=Reg.N, data=depth + 1)),
           (Op.SETREG, dict(addr=Reg.MODE, data=3)), (Op.SETREG, dict(addr=Reg.MODE, data=15)),
           (Op.WRITE, dict(mem=Mem.W, addr=depth - 2, count=3)),
           (Op.ACCUM, dict(addr=depth - 1, count=2)),
           (Op.READ, dict(mem=Mem.W, addr=0, count=0)), (Op.STEP, {}), (6, {}), (7, {})]
    for op, kw in bad:
        await reset(dut)
        # reset clears registers and status, not the memories: a fresh model keeps them
        mems = [m.copy() for m in tb.model.mems]
        tb.model = OptimEngineModel(tb.config)
        tb.model.mems = mems
        if op != Op.STEP:                            # STEP: rejected because N was never set
            for mem in (Mem.W, Mem.M, Mem.V):
                for base, count in regions:
                    await tb.write(mem, base, np.abs(tb.rng.standard_normal(count)).astype(
                        np.float32))
            await tb.setregs(optimizer_registers(Adam(lr=1e-2), 1, n, LossScale(3, 2)))
            for base, count in regions:
                await tb.accum(base, tb.rng.standard_normal(count).astype(np.float32), True)
            await tb.step()
        assert tb.status()["error"] == 0
        assert tb.model.rejection(op, **kw) is not None, (op, kw)
        tb.model.command(op, **kw)
        await tb.cmd.send(pack_cmd(op, **kw))
        await tb.wait_idle()
        assert tb.status()["error"] == 1, f"command {op} {kw} not flagged: {tb.status()}"
        tb.check_status()
        await check_regions(f"rejected {op} {kw}")
        if op != Op.STEP:
            await tb.accum(0, tb.rng.standard_normal(16).astype(np.float32), True)
            await tb.step()
            await check_regions(f"STEP after rejected {op} {kw}")
    # after reset the engine works normally
    await reset(dut)
    await tb.write(Mem.W, 0, np.arange(8, dtype=np.float32))
    assert np.array_equal(await tb.read(Mem.W, 0, 8), np.arange(8, dtype=np.float32).view(
        np.uint32).astype(np.uint64))


@cocotb.test()
async def reset_mid_step(dut):
    """Reset during the update pass, then reload and run a correct step."""
    tb = TB(dut, seed=41)
    await tb.start()
    n = 256
    opt = Adam(lr=1e-2)
    await tb.write(Mem.W, 0, tb.rng.standard_normal(n).astype(np.float32))
    await tb.setregs(optimizer_registers(opt, 1, n, LossScale(4, 5)))
    await tb.accum(0, tb.rng.standard_normal(n).astype(np.float32), first=True)
    await tb.command(Op.STEP)
    await ClockCycles(dut.clk, n + n // 2)     # inside the update pass
    assert dut.busy.value == 1
    await reset(dut)
    # a fresh model and fresh contents: everything is reloaded
    tb.model = OptimEngineModel(tb.config)
    for mem in (Mem.W, Mem.M, Mem.V):
        await tb.write(mem, 0, tb.rng.standard_normal(n).astype(np.float32) * (mem != Mem.V))
    await tb.setregs(optimizer_registers(opt, 1, n, LossScale(4, 5)))
    await tb.accum(0, tb.rng.standard_normal(n).astype(np.float32) * 16, first=True)
    await tb.step()
    await tb.check_mems(n)


@cocotb.test(skip=os.environ.get("TESSERA_BENCH_OUT") is None)
async def bench_throughput(dut):
    """Latency and elements/cycle of the engine's passes (JSON to $TESSERA_BENCH_OUT)."""
    from hdl.registry import get_block
    preset = os.environ.get("TESSERA_PRESET", "tiny")
    params = get_block("optim_engine").params(preset)
    tb = TB(dut, seed=51, idle_prob=0.0, stall_prob=0.0)
    await tb.start()
    n = N_PARAMS
    await tb.write(Mem.W, 0, tb.rng.standard_normal(n).astype(np.float32))
    results = {}
    for name, opt, clip, one in (("sgd", SGD(lr=0.01), None, False),
                                 ("adam", Adam(), None, False),
                                 ("adamw_clip", AdamW(), Clip(1.0), False),
                                 ("adam_one_pass", Adam(), None, True)):
        await tb.setregs(optimizer_registers(opt, 1, n, LossScale(0, 1000), clip))
        start = cocotb.utils.get_sim_time("ns")
        await tb.accum(0, tb.rng.standard_normal(n).astype(np.float32), first=True)
        acc_cycles = int((cocotb.utils.get_sim_time("ns") - start) // 10)
        _, step_cycles = await tb.step(one_pass=one)
        results[name] = {"n": n, "step_cycles": step_cycles,
                         "step_elements_per_cycle": n / step_cycles,
                         "accum_cycles": acc_cycles, "accum_elements_per_cycle": n / acc_cycles}
    out = {"block": "optim_engine", "preset": preset, "update_latency": params["latency"],
           "passes": results}
    with open(os.environ["TESSERA_BENCH_OUT"], "w") as f:
        json.dump(out, f, indent=2)
