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
