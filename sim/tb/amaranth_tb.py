"""Helpers for fast-tier tests in Amaranth's own simulator (``amaranth.sim``).

``stream_put``/``stream_get`` follow the Amaranth stream documentation's testbench idiom,
with optional random idle cycles and backpressure from a seeded :class:`random.Random`.
"""
from __future__ import annotations

import random
from types import SimpleNamespace

from amaranth.lib import data
from amaranth.sim import Simulator

__all__ = ["stream_put", "stream_get", "run_sim", "add_deadline", "stream_through",
           "assert_payloads", "StreamTransport", "SIM_PERIOD", "MAX_CYCLES"]

#: The ``sync`` clock period of every fast-tier simulation (1 MHz).
SIM_PERIOD = 1e-6
#: Default deadline of a simulation, in clock periods: far beyond any fast-tier test (the
#: longest, a training-core step, runs about 60k cycles) and about 6 minutes of Amaranth
#: simulation at ~3k cycles/s, so a hang fails here before pytest-timeout stops the test.
MAX_CYCLES = 1_000_000


def _raw(value):
    """The bits under a layout-typed member, so plain integers can be set and read."""
    return value.as_value() if isinstance(value, data.View) else value


async def stream_put(ctx, stream, payload, *, rng=None, idle_prob: float = 0.0):
    """Send ``payload`` (an int, or a value of the payload's shape) on ``stream``."""
    while rng is not None and idle_prob and rng.random() < idle_prob:
        await ctx.tick()
    ctx.set(stream.valid, 1)
    ctx.set(_raw(stream.payload) if isinstance(payload, int) else stream.payload, payload)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)


async def stream_get(ctx, stream, *, rng=None, stall_prob: float = 0.0, raw: bool = False):
    """Receive one payload from ``stream`` (as an int when ``raw``)."""
    while rng is not None and stall_prob and rng.random() < stall_prob:
        await ctx.tick()
    ctx.set(stream.ready, 1)
    target = _raw(stream.payload) if raw else stream.payload
    payload, = await ctx.tick().sample(target).until(stream.valid)
    ctx.set(stream.ready, 0)
    return payload


def add_deadline(sim: Simulator, max_cycles: int = MAX_CYCLES, what: str = "simulation"):
    """Fail ``sim`` with :class:`TimeoutError` if its testbenches have not all finished after
    ``max_cycles`` periods of :data:`SIM_PERIOD` (a background testbench: it never keeps the
    simulation alive, and it raises only while a critical testbench or process still runs)."""
    if max_cycles < 1:
        raise ValueError(f"max_cycles must be >= 1, not {max_cycles!r}")

    async def watchdog(ctx):
        await ctx.delay(max_cycles * SIM_PERIOD)
        raise TimeoutError(f"{what}: testbenches still running after {max_cycles} cycles "
                           f"(deadline)")

    sim.add_testbench(watchdog, background=True)
    return sim


def run_sim(dut, *testbenches, processes=(), vcd: str | None = None,
            max_cycles: int = MAX_CYCLES):
    """Simulate ``dut`` with a 1 MHz ``sync`` clock (if it has one) and the given testbenches
    until they all return; :class:`TimeoutError` after ``max_cycles`` cycles."""
    sim = Simulator(dut)
    sim.add_clock(SIM_PERIOD, if_exists=True)   # combinational harnesses have no sync domain
    for tb in testbenches:
        sim.add_testbench(tb)
    for p in processes:
        sim.add_process(p)
    add_deadline(sim, max_cycles, type(dut).__name__)
    if vcd:
        with sim.write_vcd(vcd):
            sim.run()
    else:
        sim.run()


def stream_through(dut, payloads, *, idle_prob: float = 0.0, stall_prob: float = 0.0,
                   seed: int = 0) -> list[int]:
    """Stream ``payloads`` (ints) through a unit's ``i`` -> ``o`` with random idle cycles and
    backpressure; return the ``o`` payloads as ints, in order."""
    rng = random.Random(seed)
    outputs = []
    i, o = (SimpleNamespace(valid=st.valid, ready=st.ready, payload=_raw(st.payload))
            for st in (dut.i, dut.o))

    async def producer(ctx):
        for p in payloads:
            await stream_put(ctx, i, p, rng=rng, idle_prob=idle_prob)

    async def consumer(ctx):
        for _ in payloads:
            outputs.append(int(await stream_get(ctx, o, rng=rng, stall_prob=stall_prob)))

    run_sim(dut, producer, consumer)
    return outputs


def assert_payloads(model, inputs, outputs) -> None:
    """Every output equals ``model.expected_payloads(inputs)``; names the first mismatches
    with ``model.describe``."""
    expected = model.expected_payloads(inputs)
    assert len(outputs) == len(inputs), f"{len(outputs)} results for {len(inputs)} inputs"
    bad = [k for k, (g, e) in enumerate(zip(outputs, expected)) if g != e]
    assert not bad, "\n".join(f"{model.describe(inputs[k])}: got {outputs[k]:#010x}, expected "
                              f"{expected[k]:#010x}" for k in bad[:10])


class StreamTransport:
    """Command/response transport for a host driver (``sim.host.driver``) in an Amaranth
    testbench: drives ``cmd`` and collects ``rsp`` in the same cycles, so commands stream at
    one per cycle when the DUT allows. ``transact`` raises :class:`TimeoutError` after
    ``deadline`` cycles."""

    def __init__(self, ctx, cmd, rsp):
        self.ctx, self.cmd, self.rsp = ctx, cmd, rsp
        self.cycles = 0

    async def transact(self, cmds, deadline):
        ctx, cmd, rsp = self.ctx, self.cmd, self.rsp
        out, i = [], 0
        ctx.set(rsp.ready, 1)
        for _ in range(deadline):
            if i < len(cmds):
                ctx.set(cmd.valid, 1)
                ctx.set(_raw(cmd.payload), cmds[i])
            else:
                ctx.set(cmd.valid, 0)
            _, _, c_ready, r_valid, r_payload = await ctx.tick().sample(
                cmd.ready, rsp.valid, _raw(rsp.payload))
            self.cycles += 1
            if i < len(cmds) and c_ready:
                i += 1
            if r_valid:
                out.append(int(r_payload))
            if len(out) == len(cmds):
                ctx.set(cmd.valid, 0)
                return out
        ctx.set(cmd.valid, 0)
        raise TimeoutError(f"{len(cmds)} commands: {len(out)} responses after {deadline} "
                           f"cycles")
