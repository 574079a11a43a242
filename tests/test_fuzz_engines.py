"""Fuzzing the matmul engine's and the optimizer engine's command streams in the Amaranth
simulator (docs/testing.md, "Fuzzing"): seeded random raw commands -- valid ones and every
kind of malformed one (bad opcodes, memories, addresses, counts, shapes, widths, rounding,
registers and register values) -- each answered as the golden model predicts (a refused
command changes nothing: the matmul engine answers an error status, the optimizer engine sets
its sticky ``error`` bit), every wait with a cycle deadline, and every memory read back and
compared with the model's at the end."""
import random

import numpy as np

from hdl.array.config import ArrayConfig
from hdl.array.standalone import MatmulEngineWithMemories
from hdl.fp32.config import FP32Config
from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.optim.config import Mem, Op, OptimConfig
from hdl.optim.engine import cmd_layout as optim_cmd_layout
from hdl.optim.standalone import OptimEngineWithMemories
from sim.model.array import ERR_ADDR, ERR_MODE, ERR_ROUNDING, ERR_SHAPE, ERR_WIDTH, OK
from sim.model.fp32 import canon
from sim.tb.amaranth_tb import StreamTransport, run_sim
from sim.tb.fuzz import (OptimFuzzModel, fuzz_matmul_engine, optim_engine_commands,
                         random_fp32_word)
from sim.tb.payload import pack


def test_matmul_engine_random_commands():
    """120 random commands back to back (S = 2, 16-line scratchpads), then all 48 lines."""
    cfg = ArrayConfig(size=2, mem_depth=16, dim_bits=5)
    dut = MatmulEngineWithMemories(config=cfg)
    out = {}

    async def tb(ctx):
        out.update(await fuzz_matmul_engine(cfg, StreamTransport(ctx, dut.cmd, dut.rsp),
                                            seed=11, n=120))

    run_sim(dut, tb)
    statuses = {s for (_, s) in out}
    assert {OK, ERR_MODE, ERR_SHAPE, ERR_WIDTH, ERR_ROUNDING, ERR_ADDR} <= statuses, out
    assert out.get((2, OK), 0) >= 10, out          # passes that ran


async def _put(ctx, st, payload, deadline=200):
    """``payload`` (int) on stream ``st``, failing after ``deadline`` cycles without ready."""
    ctx.set(st.valid, 1)
    ctx.set(st.payload.as_value() if hasattr(st.payload, "as_value") else st.payload, payload)
    for _ in range(deadline):
        _, _, ready = await ctx.tick().sample(st.ready)
        if ready:
            ctx.set(st.valid, 0)
            return
    raise TimeoutError(f"stream not ready within {deadline} cycles")


async def _get(ctx, st, deadline=200):
    ctx.set(st.ready, 1)
    for _ in range(deadline):
        _, _, valid, payload = await ctx.tick().sample(st.valid, st.payload)
        if valid:
            ctx.set(st.ready, 0)
            return int(payload)
    raise TimeoutError(f"no word within {deadline} cycles")


async def _idle(ctx, dut, deadline):
    await ctx.tick()
    for _ in range(deadline):
        if not ctx.get(dut.busy):
            return
        await ctx.tick()
    raise TimeoutError(f"engine busy after {deadline} cycles")


def test_optim_engine_random_commands():
    """150 random commands (depth 16); after each the whole status (``error`` included) equals
    the model's; then W, M, V, G read back."""
    cfg = OptimConfig(depth=16, reduce_lanes=8)
    dut = OptimEngineWithMemories(config=cfg, fp32_config=FP32Config(),
                                  divsqrt_config=FP32DivSqrtConfig.preset("tiny"))
    rng = random.Random(5)
    cmds = optim_engine_commands(rng, cfg, 150)
    model = OptimFuzzModel(cfg)
    lay = optim_cmd_layout()
    seen = {"refused": 0, "steps": 0, "reads": 0}

    async def tb(ctx):
        for i, cmd in enumerate(cmds + [{"op": Op.READ, "mem": m, "addr": 0, "count": cfg.depth}
                                        for m in Mem.ALL]):
            what = f"command {i}: {cmd}"
            valid = model.valid(cmd)
            words = None
            if valid and cmd["op"] in (Op.WRITE, Op.ACCUM):
                words = [random_fp32_word(rng) for _ in range(cmd["count"])]
            want = model.apply(cmd, words)
            await _put(ctx, dut.cmd, pack(lay, cmd))
            if words:
                for w in words:
                    await _put(ctx, dut.wdata, w)
            if want is not None:
                got = [await _get(ctx, dut.rdata) for _ in range(len(want))]
                assert np.array_equal(canon(np.array(got, np.uint32)), canon(want)), what
                seen["reads"] += 1
            await _idle(ctx, dut, 400)
            for name, v in model.status().items():
                got = ctx.get(getattr(dut.status, name))
                assert got == v, f"{what}: status.{name} {got:#x}, expected {v:#x}"
            seen["refused"] += not valid
            seen["steps"] += valid and cmd["op"] in (Op.STEP, Op.STEP1)

    run_sim(dut, tb)
    assert seen["refused"] >= 10 and seen["steps"] >= 5 and seen["reads"] >= 10, seen
