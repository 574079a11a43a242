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
           "assert_payloads", "StreamTransport", "ReusableSim", "SIM_PERIOD", "MAX_CYCLES",
           "fp32_unit_counts"]

#: The ``sync`` clock period of every fast-tier simulation (1 MHz).
SIM_PERIOD = 1e-6
#: Default deadline of a simulation, in clock periods: far beyond any fast-tier test (the
#: longest, a training-core step, runs about 60k cycles) and about 6 minutes of Amaranth
#: simulation at ~3k cycles/s, so a hang fails here before pytest-timeout stops the test.
MAX_CYCLES = 1_000_000


def _raw(value):
    """The bits under a layout-typed member, so plain integers can be set and read."""
    return value.as_value() if isinstance(value, data.View) else value


async def stream_put(ctx, stream, payload, *, rng=None, idle_prob: float = 0.0, junk=None):
    """Send ``payload`` (an int, or a value of the payload's shape) on ``stream``.

    ``junk``: a function giving a raw payload (int) to drive while ``valid`` is low (the idle
    cycles before the transfer, and after it): the stream rules leave the payload free then,
    so a DUT that reads it without ``valid`` sees garbage instead of a copy of the last
    transfer."""
    raw = _raw(stream.payload)
    while rng is not None and idle_prob and rng.random() < idle_prob:
        if junk is not None:
            ctx.set(raw, junk())
        await ctx.tick()
    ctx.set(stream.valid, 1)
    ctx.set(raw if isinstance(payload, int) else stream.payload, payload)
    await ctx.tick().until(stream.ready)
    ctx.set(stream.valid, 0)
    if junk is not None:
        ctx.set(raw, junk())


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


class ReusableSim:
    """One elaborated simulation of ``dut`` that several tests run on, one after another.

    Building a :class:`~amaranth.sim.Simulator` elaborates and compiles the design: for the
    small training core of tests/test_core.py about 16 s, for a vector unit 4 to 10 s, often
    more than the simulation itself. A test module that runs many testbenches on one
    configuration keeps one ``ReusableSim`` (e.g. behind :func:`functools.cache`) and calls
    :meth:`run` per test. Every run after the first starts from :meth:`Simulator.reset
    <amaranth.sim.Simulator.reset>`: every signal at its initial value, every memory at its
    initial contents, time 0 -- the state a new simulator starts in. Only the design is shared,
    so a DUT whose memories are initialised per test (``init=``) is not one to reuse.

    The simulator holds ``testbenches`` and ``processes`` slots (a run fills as many as it
    passes, the rest return at once) and a watchdog: :class:`TimeoutError` after
    ``max_cycles`` of the run. A run that raised leaves the simulator unused
    (:attr:`broken`): the next run builds a new one.
    """

    def __init__(self, dut, *, testbenches: int = 4, processes: int = 2):
        for name, n in (("testbenches", testbenches), ("processes", processes)):
            if not isinstance(n, int) or n < 0:
                raise ValueError(f"ReusableSim: {name} must be an int >= 0, not {n!r}")
        self.dut = dut
        self._slots = {"testbenches": [None] * testbenches, "processes": [None] * processes}
        self._max_cycles = MAX_CYCLES
        self._sim = None
        self._runs = 0
        #: True after a run that raised (the next run builds a new simulator).
        self.broken = False

    def _slot(self, kind, index):
        async def slot(ctx):
            fn = self._slots[kind][index]
            if fn is not None:
                await fn(ctx)
        return slot

    def _build(self):
        sim = Simulator(self.dut)
        sim.add_clock(SIM_PERIOD, if_exists=True)
        for i in range(len(self._slots["testbenches"])):
            sim.add_testbench(self._slot("testbenches", i))
        for i in range(len(self._slots["processes"])):
            sim.add_process(self._slot("processes", i))

        async def watchdog(ctx):
            cycles = self._max_cycles
            await ctx.delay(cycles * SIM_PERIOD)
            raise TimeoutError(f"{type(self.dut).__name__}: testbenches still running after "
                               f"{cycles} cycles (deadline)")
        sim.add_testbench(watchdog, background=True)
        self._sim, self._runs, self.broken = sim, 0, False

    def run(self, *testbenches, processes=(), max_cycles: int = MAX_CYCLES) -> None:
        """Run ``testbenches`` (critical) and ``processes`` on the design from its initial
        state until they all return; :class:`TimeoutError` after ``max_cycles`` cycles."""
        for kind, fns in (("testbenches", testbenches), ("processes", processes)):
            if len(fns) > len(self._slots[kind]):
                raise ValueError(f"ReusableSim: {len(fns)} {kind} for "
                                 f"{len(self._slots[kind])} slots")
        if max_cycles < 1:
            raise ValueError(f"max_cycles must be >= 1, not {max_cycles!r}")
        if self._sim is None or self.broken:
            self._build()
        elif self._runs:
            self._sim.reset()
        for kind, fns in (("testbenches", testbenches), ("processes", processes)):
            slots = self._slots[kind]
            slots[:] = list(fns) + [None] * (len(slots) - len(fns))
        self._max_cycles = max_cycles
        self._runs += 1
        try:
            self._sim.run()
        except BaseException:
            self.broken = True
            raise
        finally:
            for slots in self._slots.values():
                slots[:] = [None] * len(slots)


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


def fp32_unit_counts(top) -> dict:
    """FP32 adders, multipliers and dividers in the elaborated design under ``top`` (a
    component, not yet elaborated), by class name: what sharing units saves, counted."""
    from amaranth.hdl import Fragment

    from hdl.fp32.add import FP32Add
    from hdl.fp32.div import FP32Div
    from hdl.fp32.mul import FP32Mul
    kinds = (FP32Add, FP32Mul, FP32Div)
    count = {k.__name__: 0 for k in kinds}

    def walk(frag):
        for sub, _name, _src in frag.subfragments:
            found = [type(o).__name__ for o in (sub.origins or ()) if isinstance(o, kinds)]
            if found:
                count[found[0]] += 1
            else:
                walk(sub)
    walk(Fragment.get(top, None))
    return count
