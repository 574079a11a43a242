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
from sim.model.edge import magnitude_fields
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


def _run(acc_lanes: int, mem_latency: int, idle: float, ahead: str, n: int = 300,
         magnitude: bool = False):
    """``n`` random lines over 5 addresses through an accumulator with ``S = 4`` (its values
    as magnitude and sign with ``magnitude``: ``ArrayConfig.out_magnitude``); ``ahead``:
    ``"off"`` (``head`` from ``i`` alone, ``next`` unknown), ``"on"`` (both, always),
    ``"some"`` (both, each ``valid`` low at random). Returns the lines, the scratchpad, the model's and
    the monitor's record: retire and hazard counts, and the cycles at which each line started
    (its read issued a cycle later) and retired."""
    S = 4
    cfg = ArrayConfig(size=S, mem_depth=16, acc_lanes=acc_lanes, mem_latency=mem_latency,
                      role_ports=mem_latency >= 2, out_magnitude=magnitude)
    dut = OutputAccumulator(config=cfg)
    rng = random.Random(acc_lanes * 10 + mem_latency + int(idle * 10))
    lines = _lines(rng, S, n, 5)
    mem0 = (np.arange(16 * S, dtype=F32).reshape(16, S) / F32(8)).astype(F32)
    want = _model(lines, S, 16, mem0)
    mem = mem0.copy()
    seen = {"retire": 0, "hazard": 0, "done": False, "starts": [], "retires": []}

    async def memory(ctx):
        reads = []                       # (cycles until the data is due, line address)
        cycle = 0
        async for _, _, rd_en, rd_addr, wr_en, wr_addr, wr_data, retire, hazard in \
                ctx.tick().sample(dut.rd_en, dut.rd_addr, dut.wr_en, dut.wr_addr,
                                  dut.wr_data, dut.retire, dut.hazard):
            seen["retire"] += retire
            seen["hazard"] += hazard
            if rd_en:                    # the old line's read: a cycle after the start
                seen["starts"].append(cycle - (mem_latency < 3))     # (at 3 in it)
            if retire:
                seen["retires"].append(cycle)
            cycle += 1
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

    def tell(ctx, port, ln, known):
        """Drive ``ahead.head`` or ``ahead.next`` with ``ln`` (None: unknown)."""
        port = getattr(dut.ahead, port)
        ctx.set(port.valid, ln is not None and known)
        if ln is not None:
            ctx.set(port.addr, ln["addr"])
            ctx.set(port.write, ln["write"])

    async def driver(ctx):
        prng = random.Random(7)
        for k, ln in enumerate(lines):
            nxt = lines[k + 1] if k + 1 < len(lines) else None
            while idle and prng.random() < idle:
                # valid low: ``head`` names the line to come when the producer knows it
                tell(ctx, "head", ln, ahead == "on" or (ahead == "some" and prng.random() < .7))
                tell(ctx, "next", nxt, ahead == "on")
                await ctx.tick()
            # valid high: ``head`` is the line on ``i``; "off" knows nothing after it
            tell(ctx, "head", ln, True)
            tell(ctx, "next", nxt, ahead == "on" or (ahead == "some" and prng.random() < .7))
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload, {**ln, "value": [magnitude_fields(v) for v in ln["value"]]}
                    if magnitude else ln)
            await ctx.tick().until(dut.i.ready)
            ctx.set(dut.i.valid, 0)
        tell(ctx, "head", None, False)
        tell(ctx, "next", None, False)
        for _ in range(2000):
            await ctx.tick()
            if not ctx.get(dut.busy):
                break
        seen["done"] = not ctx.get(dut.busy)

    run_sim(dut, driver, processes=[memory], max_cycles=40_000)
    assert seen["done"], "lines still in flight 2,000 cycles after the last one"
    return cfg, lines, mem, want, seen


@pytest.mark.parametrize("acc_lanes, mem_latency, idle, ahead, magnitude", [
    (0, 1, 0.0, "on", False), (0, 1, 0.4, "on", False), (2, 1, 0.0, "on", False),
    (2, 2, 0.3, "some", False), (1, 2, 0.0, "on", False), (0, 1, 0.0, "off", False),
    (0, 2, 0.3, "some", False), (2, 1, 0.2, "off", False), (2, 3, 0.3, "some", False),
    (0, 3, 0.0, "on", False), (2, 3, 0.3, "some", True), (0, 1, 0.2, "on", True)])
def test_accumulator_repeated_lines_in_order(acc_lanes, mem_latency, idle, ahead, magnitude):
    """300 lines over 5 addresses (most lines find their address still in flight, many the
    line just before), with ``acc_lanes`` edge converters (one line per cycle, or per
    ``S / acc_lanes`` cycles), a read latency of 1, 2 or 3, the values as two's complement or
    as magnitude and sign (the FPGA build's ``out_magnitude``), and the next line told ahead or not:
    the scratchpad ends equal to adding the lines one by one in arrival order; one ``retire``
    per line; ``hazard`` is raised (the check waits). A check that missed the line started
    in the cycle before would read its old value before that line's sum is written."""
    _, lines, mem, want, seen = _run(acc_lanes, mem_latency, idle, ahead, magnitude=magnitude)
    assert seen["retire"] == len(lines)
    assert seen["hazard"] > 0
    assert np.array_equal(mem.view(np.uint32), want.view(np.uint32))


@pytest.mark.parametrize("acc_lanes, ahead", [(0, "on"), (2, "on"), (1, "on"), (0, "off"),
                                              (2, "off")])
def test_accumulator_starts_each_line_as_early_as_allowed(acc_lanes, ahead):
    """Lines offered back to back: each starts in the first cycle the rules allow, no later:
    its line before it has taken its ``F`` cycles, every earlier line to the same address
    (that writes) has retired (in an earlier cycle) and fewer than ``DEPTH`` lines are in
    flight; with ``head`` alone, one cycle later than that after the line before (its check).
    A check that kept a retiring line in flight, or lost the next line's check, starts
    later; one that started a line too early gives a wrong sum (the test above)."""
    cfg, lines, mem, want, seen = _run(acc_lanes, 1, 0.0, ahead, n=200)
    assert np.array_equal(mem.view(np.uint32), want.view(np.uint32))
    F = cfg.size // (acc_lanes or cfg.size)
    starts, retires = seen["starts"], seen["retires"]
    assert len(starts) == len(retires) == len(lines)
    D = OutputAccumulator.DEPTH
    for k in range(1, len(lines)):
        bound = starts[k - 1] + F + (ahead == "off")
        if lines[k]["write"]:
            for j in range(k):
                if lines[j]["write"] and lines[j]["addr"] == lines[k]["addr"]:
                    bound = max(bound, retires[j] + 1)
        if k >= D:
            bound = max(bound, retires[k - D] + 1)
        assert starts[k] == bound, (k, starts[k], bound)
