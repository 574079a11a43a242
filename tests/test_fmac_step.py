"""Fast tier: one FMACSchedule driving several FMACDatapaths (as a PE row does) vs sim/model/fmac.py.

Every datapath gets its own operands and tag for each product; products, tags and the ``done``
cycle (``start + beat + FMACDatapath.LATENCY``, the beat from ``product_cycles``) are checked
against the model. ``FMACCore`` (one schedule, one datapath) is tests/test_fmac.py's.
"""
import random
from collections import deque

import pytest
from amaranth.hdl import Module
from amaranth.lib import wiring

from hdl.config import FMACConfig
from hdl.fmac import product_cycles
from hdl.fmac_step import FMACDatapath, FMACSchedule, FMACStep
from sim.model import fmac as g
from sim.tb.amaranth_tb import run_sim


class Row(wiring.Component):
    """A schedule and ``n`` datapaths on its ``cmd`` (the test's harness)."""

    def __init__(self, cfg, n, tag_bits, start_when_ready=False):
        self.cfg, self.n, self.tag_bits = cfg, n, tag_bits
        self.sched = FMACSchedule(config=cfg, start_when_ready=start_when_ready)
        self.dps = [FMACDatapath(config=cfg, tag_bits=tag_bits) for _ in range(n)]
        super().__init__({})

    def elaborate(self, platform):
        m = Module()
        m.submodules.sched = self.sched
        for i, dp in enumerate(self.dps):
            m.submodules[f"dp{i}"] = dp
            wiring.connect(m, self.sched.cmd, dp.cmd)
        return m


@pytest.mark.parametrize("start_when_ready", [False, True])
@pytest.mark.parametrize("lanes", [1, 2, 4])
def test_one_schedule_many_datapaths(lanes, start_when_ready):
    """The harness starts only while ``ready``, as an array does (``start_when_ready``)."""
    cfg = FMACConfig(lanes=lanes)
    n, tag_bits = 3, 3
    row = Row(cfg, n, tag_bits, start_when_ready)
    sched, dps = row.sched, row.dps
    rng = random.Random(40 + lanes)
    widths = cfg.widths
    products = [(rng.choice(widths), rng.choice(widths)) for _ in range(60)]
    # named edge cases first: the widest and narrowest pairs back to back, all-ones magnitudes
    products = [(8, 8), (2, 2), (2, 8), (8, 2), (8, 8)] + products
    checked = {"n": 0}

    async def tb(ctx):
        todo = deque(products)
        pending = deque()
        cycle = 0
        while todo or pending:
            if ctx.get(dps[0].done):
                (wa, wb, ops), t0 = pending.popleft()
                beat = product_cycles(wa, wb, lanes)
                assert cycle == t0 + beat + FMACDatapath.LATENCY, (wa, wb, t0, cycle)
                for dp, (sa, a, sb, b, tag) in zip(dps, ops):
                    assert ctx.get(dp.done) == 1
                    want = g.signed_product(sa, a, sb, b, wa, wb, lanes)
                    assert want == (-1) ** (sa ^ sb) * a * b
                    assert ctx.get(dp.product) == want, (wa, wb, sa, a, sb, b)
                    assert ctx.get(dp.tag_out) == tag
                    checked["n"] += 1
            else:
                assert not any(ctx.get(dp.done) for dp in dps), cycle
            start = bool(todo) and ctx.get(sched.ready) and rng.random() < 0.8
            if start:
                wa, wb = todo.popleft()
                ops = []
                for dp in dps:
                    top_a = (1 << wa) - 1 if len(pending) % 2 else rng.randrange(1 << wa)
                    op = (rng.randrange(2), top_a, rng.randrange(2),
                          rng.randrange(1 << wb), rng.randrange(1 << tag_bits))
                    ops.append(op)
                    for name, v in zip(("a_sign", "a_mag", "b_sign", "b_mag", "tag"), op):
                        ctx.set(getattr(dp, name), v)
                ctx.set(sched.width_a, wa)
                ctx.set(sched.width_b, wb)
                pending.append(((wa, wb, ops), cycle))
            else:
                # garbage on the operands while not starting must not matter
                for dp in dps:
                    ctx.set(dp.a_mag, rng.randrange(1 << cfg.max_mantissa))
                    ctx.set(dp.tag, rng.randrange(1 << tag_bits))
                ctx.set(sched.width_a, rng.randrange(16))
            ctx.set(sched.start, int(start))
            await ctx.tick()
            cycle += 1
            assert cycle < 20_000

    run_sim(row, tb)
    assert checked["n"] == n * len(products)


def test_invalid_arguments():
    with pytest.raises(TypeError, match="FMACSchedule.config must be an FMACConfig"):
        FMACSchedule(config=None)
    with pytest.raises(TypeError, match="FMACDatapath.config must be an FMACConfig"):
        FMACDatapath(config=object())
    with pytest.raises(ValueError, match="FMACDatapath.tag_bits"):
        FMACDatapath(config=FMACConfig(), tag_bits=-1)
    with pytest.raises(ValueError, match="FMACDatapath.tag_bits"):
        FMACDatapath(config=FMACConfig(), tag_bits=True)
    with pytest.raises(TypeError, match="FMACSchedule.start_when_ready must be a bool"):
        FMACSchedule(config=FMACConfig(), start_when_ready=1)
    with pytest.raises(TypeError, match="FMACStep.config must be an FMACConfig"):
        FMACStep(None)
    assert FMACStep(FMACConfig()) == FMACStep(FMACConfig())
    assert FMACStep(FMACConfig()) != FMACStep(FMACConfig(lanes=2))
