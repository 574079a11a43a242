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


@pytest.mark.parametrize("name", ["stat_latency", "reg_latency"])
@pytest.mark.parametrize("bad, error", [(0, ValueError), (-1, ValueError), (1.5, TypeError),
                                        (True, TypeError)])
def test_latencies_checked(name, bad, error):
    with pytest.raises(error, match=f"HostPort.{name}"):
        HostPort(config=CFG, reg_count=4, **{name: bad})


@pytest.mark.parametrize("reg_latency", [1, 2, 3])
def test_reg_answers_the_register_file_as_of_the_cycle_after_acceptance(reg_latency):
    """The register file here is a pipeline of ``reg_latency`` cycles whose registers change
    every cycle (register ``i`` holds ``1000 * i + cycle``): a ``REG`` must answer the value of
    the cycle after its acceptance, ``reg_latency + 1`` cycles after it, hold the next command
    until then, and refuse an index past ``reg_count``."""
    rng = random.Random(reg_latency)
    reg_count = 6
    dut = HostPort(config=CFG, reg_count=reg_count, opt_depth=OPT_DEPTH,
                   reg_latency=reg_latency)

    async def regfile(ctx):
        # the answer in cycle c: register reg_index's value as of cycle c - (reg_latency - 1)
        # (reg_index is a register: it changes only at edges)
        index_at, c = {}, 0
        while True:
            index_at[c] = ctx.get(dut.reg_index)
            t = c - (reg_latency - 1)
            ctx.set(dut.reg_data, 0 if t < 0 else 1000 * index_at[t] + t)
            await ctx.tick()
            c += 1

    async def bench(ctx):
        c = 0                   # this cycle's number (as regfile's)
        for _ in range(12):
            index = rng.randrange(reg_count + 1)
            ctx.set(dut.cmd.payload, {"op": HostOp.REG, "addr": index, "data": 0})
            ctx.set(dut.cmd.valid, 1)
            for _ in range(20):
                ready = ctx.get(dut.cmd.ready)
                await ctx.tick()
                c += 1
                if ready:
                    break
            else:
                raise AssertionError("the command was not taken within 20 cycles")
            taken = c - 1
            ctx.set(dut.cmd.payload, {"op": HostOp.PREC, "addr": 1, "data": 0})
            for wait in range(1, 20):
                if ctx.get(dut.rsp.valid):
                    break
                assert not ctx.get(dut.cmd.ready), "a command was taken before the response"
                await ctx.tick()
                c += 1
            else:
                raise AssertionError("no response within 20 cycles")
            ctx.set(dut.cmd.valid, 0)
            assert ctx.get(dut.rsp.payload.op) == HostOp.REG
            if index < reg_count:
                assert ctx.get(dut.rsp.payload.status) == HostStatus.OK
                assert wait == reg_latency + 1, f"answered {wait} cycles after acceptance"
                assert ctx.get(dut.rsp.payload.data) == 1000 * index + taken + 1
            else:
                assert ctx.get(dut.rsp.payload.status) == HostStatus.BAD_ADDR
            ctx.set(dut.rsp.ready, 1)
            await ctx.tick()
            c += 1
            ctx.set(dut.rsp.ready, 0)
            for _ in range(rng.randrange(3)):          # idle cycles between commands
                await ctx.tick()
                c += 1

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(regfile, background=True)
    sim.add_testbench(bench)
    add_deadline(sim)
    sim.run()
