"""The matmul engine's output accumulator alone (hdl.array.accum.OutputAccumulator): result
lines to one address after another, the same line again while it is still in flight (back to
back included), against a sequential float32 model.

The engine's own traffic seldom sends one line in two consecutive cycles (a tile's result lines
are distinct), so its tests may leave part of the in-flight check idle; here any order reaches
it."""
import random

import numpy as np
import pytest

from hdl.array.accum import OutputAccumulator
from hdl.array.config import ArrayConfig
from sim.model.array import edge_fp32
from sim.tb.amaranth_tb import run_sim, stream_put

F32 = np.float32


def _lines(rng: random.Random, S: int, n: int, addrs: int):
    """``n`` random lines over ``addrs`` addresses, runs of one address back to back."""
    lines = []
    addr = 0
    for _ in range(n):
        if rng.random() < 0.6:                   # a new address; else the same again
            addr = rng.randrange(addrs)
        lines.append({
            "value": [rng.randrange(-(1 << 10), 1 << 10) for _ in range(S)],
            "exp": [rng.randrange(-24, 4) for _ in range(S)],
            "addr": addr, "mask": rng.randrange(1, 1 << S),
            "first": int(rng.random() < 0.15), "write": int(rng.random() < 0.9),
        })
    return lines


def _model(lines, S: int, depth: int, mem0: np.ndarray) -> np.ndarray:
    mem = mem0.copy()
    for ln in lines:
        if not ln["write"]:
            continue
        add = edge_fp32(ln["value"], ln["exp"]).astype(F32)
        for lane in range(S):
            if ln["mask"] >> lane & 1:
                old = F32(0) if ln["first"] else mem[ln["addr"], lane]
                mem[ln["addr"], lane] = F32(old + add[lane])
    return mem


@pytest.mark.parametrize("acc_lanes, mem_latency, idle", [
    (0, 1, 0.0), (0, 1, 0.4), (2, 1, 0.0), (2, 2, 0.3), (1, 2, 0.0)])
def test_accumulator_repeated_lines_in_order(acc_lanes, mem_latency, idle):
    """300 lines over 5 addresses (most lines find their address still in flight, many the
    line just before), with ``acc_lanes`` edge converters (one line per cycle, or per
    ``S / acc_lanes`` cycles) and a read latency of 1 or 2: the scratchpad ends equal to
    adding the lines one by one in arrival order; one ``retire`` per line; ``hazard`` is
    raised (the check waits). A check that missed the line started in the cycle before would
    read its old value before that line's sum is written."""
    S = 4
    cfg = ArrayConfig(size=S, mem_depth=16, acc_lanes=acc_lanes, mem_latency=mem_latency,
                      role_ports=mem_latency == 2)
    dut = OutputAccumulator(config=cfg)
    rng = random.Random(acc_lanes * 10 + mem_latency + int(idle * 10))
    lines = _lines(rng, S, 300, 5)
    mem0 = (np.arange(16 * S, dtype=F32).reshape(16, S) / F32(8)).astype(F32)
    want = _model(lines, S, 16, mem0)
    mem = mem0.copy()
    seen = {"retire": 0, "hazard": 0, "done": False}

    async def memory(ctx):
        reads = []                       # (cycles until the data is due, line address)
        async for _, _, rd_en, rd_addr, wr_en, wr_addr, wr_data, retire, hazard in \
                ctx.tick().sample(dut.rd_en, dut.rd_addr, dut.wr_en, dut.wr_addr,
                                  dut.wr_data, dut.retire, dut.hazard):
            seen["retire"] += retire
            seen["hazard"] += hazard
            if rd_en:                    # read before the write of the same edge
                reads.append([mem_latency, mem[rd_addr].copy()])
            for lane in range(S):
                if wr_en >> lane & 1:
                    mem[wr_addr, lane] = np.uint32((wr_data >> (32 * lane)) & 0xFFFFFFFF) \
                        .view(F32)
            for r in reads:
                r[0] -= 1
            due = [r for r in reads if r[0] == 0]
            reads = [r for r in reads if r[0] > 0]
            if due:
                ctx.set(dut.rd_data, int.from_bytes(due[0][1].astype(F32).tobytes(), "little"))

    async def driver(ctx):
        prng = random.Random(7)
        for ln in lines:
            await stream_put(ctx, dut.i, ln, rng=prng, idle_prob=idle)
        for _ in range(2000):
            await ctx.tick()
            if not ctx.get(dut.busy):
                break
        seen["done"] = not ctx.get(dut.busy)

    run_sim(dut, driver, processes=[memory], max_cycles=20_000)
    assert seen["done"], "lines still in flight 2,000 cycles after the last one"
    assert seen["retire"] == len(lines)
    assert seen["hazard"] > 0
    assert np.array_equal(mem.view(np.uint32), want.view(np.uint32))
