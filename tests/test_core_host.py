"""The host port alone (hdl/core/host.py): a SETREG waits in a register for the optimizer.

The whole core's tests (tests/test_core.py, tests/test_fuzz_core.py) reach the port only with
an idle optimizer, which takes a SETREG in the cycle after the port accepts it. Here the
optimizer's ``ready`` is held low for random stretches: the SETREG must be offered unchanged
until it is taken, answered only then, and no other command may be taken (or take effect)
meanwhile; a SETREG the optimizer would refuse is answered ``BAD_VALUE`` without reaching it.
"""
import random

import pytest
from amaranth.sim import Simulator

from hdl.core.config import CoreConfig
from hdl.core.host import HostOp, HostPort, HostStatus
from hdl.optim.config import Reg
from sim.tb.amaranth_tb import add_deadline

CFG = CoreConfig.preset("tiny")
OPT_DEPTH = 100


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_setreg_waits_for_the_optimizer_and_holds_the_port(seed):
    rng = random.Random(seed)
    dut = HostPort(config=CFG, reg_count=4, opt_depth=OPT_DEPTH)
    # (op, addr, data, status wanted, reaches the optimizer)
    cmds = []
    for _ in range(12):
        kind = rng.choice(["setreg", "setreg", "bad_n", "prec"])
        if kind == "setreg":
            cmds.append((HostOp.SETREG, rng.choice([Reg.LR, Reg.B1, Reg.N]),
                         rng.randrange(1, OPT_DEPTH + 1), HostStatus.OK, True))
        elif kind == "bad_n":
            cmds.append((HostOp.SETREG, Reg.N, rng.choice([0, OPT_DEPTH + 1]),
                         HostStatus.BAD_VALUE, False))
        else:
            cmds.append((HostOp.PREC, 0, 0, HostStatus.OK, False))
    log = {"taken": [], "prec_writes": 0}

    async def bench(ctx):
        ctx.set(dut.rsp.ready, 1)
        for op, addr, value, status, reaches in cmds:
            ctx.set(dut.cmd.payload, {"op": op, "addr": addr, "data": value})
            ctx.set(dut.cmd.valid, 1)
            await ctx.tick().until(dut.cmd.ready)
            ctx.set(dut.cmd.valid, 0)
            # the next command is offered at once: it must wait for this one's response
            delivered = False
            for cycle in range(40):
                stall = rng.random() < 0.7
                ctx.set(dut.opt_cmd.ready, 0 if stall else 1)
                ctx.set(dut.cmd.payload, {"op": HostOp.PREC, "addr": 1, "data": 0})
                ctx.set(dut.cmd.valid, 1)
                if ctx.get(dut.rsp.valid):
                    break
                assert not ctx.get(dut.cmd.ready), "a command was taken before the response"
                assert not ctx.get(dut.prec_we), "a waiting command took effect"
                if ctx.get(dut.opt_cmd.valid):
                    assert reaches, "a refused SETREG reached the optimizer"
                    assert ctx.get(dut.opt_cmd.payload.addr) == addr
                    assert ctx.get(dut.opt_cmd.payload.data) == value
                    if not stall:
                        assert not delivered, "the SETREG was offered after it was taken"
                        delivered = True
                await ctx.tick()
            else:
                raise AssertionError("no response within 40 cycles")
            ctx.set(dut.cmd.valid, 0)
            assert delivered == reaches
            assert ctx.get(dut.rsp.payload.op) == op
            assert ctx.get(dut.rsp.payload.status) == status
            log["taken"].append(op)
            ctx.set(dut.opt_cmd.ready, 0)
            await ctx.tick()           # the response is taken (rsp.ready is high)
            assert not ctx.get(dut.rsp.valid)
            assert not ctx.get(dut.opt_cmd.valid)

    async def watch(ctx):
        async for _, _, we in ctx.tick().sample(dut.prec_we):
            log["prec_writes"] += we

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.add_process(watch)
    add_deadline(sim)
    sim.run()
    assert log["taken"] == [c[0] for c in cmds]
    # every PREC of the list was written once, and no offered-but-refused one
    assert log["prec_writes"] == sum(c[0] == HostOp.PREC for c in cmds)


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                        (True, TypeError)])
def test_stat_latency_checked(bad, error):
    with pytest.raises(error, match="HostPort.stat_latency"):
        HostPort(config=CFG, reg_count=4, stat_latency=bad)
