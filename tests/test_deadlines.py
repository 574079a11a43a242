"""Fast tier: every simulation has a deadline (sim/tb/amaranth_tb.py): a testbench that waits
for something that never happens fails with TimeoutError instead of hanging the suite."""
import pytest
from amaranth.hdl import Module, Signal
from amaranth.sim import Simulator

from sim.tb.amaranth_tb import add_deadline, run_sim


def _counter():
    m = Module()
    count = Signal(8)
    never = Signal()
    m.d.sync += count.eq(count + 1)
    return m, count, never


def test_run_sim_raises_on_a_hang():
    m, _, never = _counter()

    async def waits_forever(ctx):
        while not ctx.get(never):
            await ctx.tick()

    with pytest.raises(TimeoutError, match="after 200 cycles"):
        run_sim(m, waits_forever, max_cycles=200)


def test_run_sim_finishes_before_its_deadline():
    m, count, _ = _counter()
    seen = []

    async def bench(ctx):
        await ctx.tick().repeat(150)
        seen.append(ctx.get(count))

    run_sim(m, bench, max_cycles=200)
    assert seen == [150]


def test_add_deadline_on_a_plain_simulator():
    m, _, never = _counter()
    sim = Simulator(m)
    sim.add_clock(1e-6)

    async def waits_forever(ctx):
        while not ctx.get(never):
            await ctx.tick()

    sim.add_testbench(waits_forever)
    add_deadline(sim, 50, "plain")
    with pytest.raises(TimeoutError, match="plain: .* 50 cycles"):
        sim.run()
    with pytest.raises(ValueError, match="max_cycles"):
        add_deadline(Simulator(Module()), 0)


def _counter_with_memory():
    from amaranth.lib.memory import Memory
    m = Module()
    count = Signal(8)
    m.d.sync += count.eq(count + 1)
    m.submodules.mem = mem = Memory(shape=8, depth=4, init=[5, 6, 7, 8])
    wr = mem.write_port()
    return m, count, wr, mem


def test_reusable_sim_starts_every_run_from_the_initial_state():
    """The second and third runs see the counter and the memory as a new simulator does,
    although the first run changed both; unused slots do not keep the run alive."""
    from sim.tb.amaranth_tb import ReusableSim
    m, count, wr, mem = _counter_with_memory()
    sim = ReusableSim(m, testbenches=3, processes=1)
    seen = []

    async def scribble(ctx):
        ctx.set(wr.addr, 2)
        ctx.set(wr.data, 99)
        ctx.set(wr.en, 1)
        await ctx.tick().repeat(40)
        seen.append((ctx.get(count), ctx.get(mem.data[2])))

    async def look(ctx):
        await ctx.tick().repeat(10)
        seen.append((ctx.get(count), ctx.get(mem.data[2])))

    sim.run(scribble)
    sim.run(look)
    sim.run(look, look)
    assert seen == [(40, 99), (10, 7), (10, 7), (10, 7)]


def test_reusable_sim_deadline_and_a_failed_run():
    from sim.tb.amaranth_tb import ReusableSim
    m, count, _, _ = _counter_with_memory()
    sim = ReusableSim(m, testbenches=1, processes=0)

    async def forever(ctx):
        while True:
            await ctx.tick()

    with pytest.raises(TimeoutError, match="after 50 cycles"):
        sim.run(forever, max_cycles=50)
    assert sim.broken
    seen = []

    async def bench(ctx):
        await ctx.tick().repeat(5)
        seen.append(ctx.get(count))
    sim.run(bench)
    assert seen == [5] and not sim.broken
    with pytest.raises(ValueError, match="2 testbenches for 1 slots"):
        sim.run(bench, bench)
    with pytest.raises(ValueError, match="testbenches must be"):
        ReusableSim(m, testbenches=-1)
