"""Fast tier (Amaranth simulator) of the FP32 log on one shared multiplier
(:class:`hdl.fp32.log_serial.FP32LogSerial`, the FPGA build's softmax loss).

The words (specials, random operands with idle and backpressure, both presets) are checked
against the golden model :class:`sim.model.fp32_log.FP32Log` beside the pipelined unit's, in
tests/test_fp32_log.py. Here: the published latency and initiation interval measured edge by
edge (results bit-exact too); reset with the unit full and the output stalled; and the
multiplier count of the elaborated design (what the unit is for).
"""
import numpy as np
from amaranth.hdl import Fragment, Module, ResetInserter, Signal
from amaranth.sim import Simulator

from hdl.fp32.log import FP32Log
from hdl.fp32.log_config import FP32LogConfig
from hdl.fp32.log_serial import (LOG_SERIAL_II, LOG_SERIAL_LATENCY, TAKE_BLOCKED,
                                 FP32LogSerial)
from sim.model.fp32 import random_fp32
from sim.model.fp32_log import FP32Log as Model
from sim.model.fp32_log import random_operands
from sim.tb.amaranth_tb import add_deadline, assert_payloads


def check(cfg, inputs, outputs):
    assert_payloads(Model(cfg), inputs, outputs)


def _accept_cycles(dut, payloads):
    """Feed ``payloads`` with ``i.valid`` always high and ``o.ready`` high; return the edge
    numbers of the accepts and of the results, and the results."""
    return _spaced(dut, payloads, [0] * (len(payloads) - 1))


def test_latency_and_initiation_interval():
    """A lone operation's result comes ``latency`` edges after its accept; operations back to
    back are accepted at edges 0, 1, 3, then every ``ii`` (the front fills, the first waits a
    cycle in stage 1 for its table lookups' registers, then each waits for the multiplier),
    and their results leave every ``ii`` edges."""
    cfg = FP32LogConfig()
    inputs = [int(a) for a in random_operands(np.random.default_rng(9), 20,
                                              base=random_fp32)["a"]]
    lone = _accept_cycles(FP32LogSerial(config=cfg), inputs[:1])
    assert lone["res"][0] - lone["acc"][0] == LOG_SERIAL_LATENCY == 22
    dut = FP32LogSerial(config=cfg)
    assert dut.latency == LOG_SERIAL_LATENCY and dut.ii == LOG_SERIAL_II == 7
    run = _accept_cycles(dut, inputs)
    acc, res = run["acc"], run["res"]
    assert acc[:3] == [0, 1, 3]
    assert np.diff(acc[2:]).tolist() == [LOG_SERIAL_II] * (len(acc) - 3)
    assert res[0] == LOG_SERIAL_LATENCY
    assert np.diff(res).tolist() == [LOG_SERIAL_II] * (len(res) - 1)
    check(cfg, inputs, run["got"])


def _spaced(dut, payloads, gaps):
    """Offer ``payloads[k]`` from edge ``sum(gaps[:k])`` on (``o.ready`` high); return the
    edges of the accepts and of the results, and the results."""
    log = {"acc": [], "res": [], "got": []}
    offer = np.cumsum([0] + list(gaps)).tolist()

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        sent, edge = 0, 0
        while len(log["got"]) < len(payloads):
            ready_now = sent < len(payloads) and edge >= offer[sent]
            ctx.set(dut.i.valid, ready_now)
            if ready_now:
                ctx.set(dut.i.payload.as_value(), payloads[sent])
            _, _, iv, ir, ov, op = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.payload.as_value())
            if iv and ir:
                log["acc"].append(edge)
                sent += 1
            if ov:
                log["res"].append(edge)
                log["got"].append(int(op))
            edge += 1
            assert edge < 40 * len(payloads) + offer[-1] + 100

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    add_deadline(sim)
    sim.run()
    return log


def test_every_spacing():
    """Pairs of operations offered 1 .. 14 cycles apart on an idle unit: the second is taken
    ``max(gap, ii)`` cycles after the first, except 9 cycles (two of the shared multiplier's
    slots are 9 apart: its take waits until 10), so its result comes that many cycles after
    the first's; every word is bit-exact. Then a run whose gaps cycle through 1 .. 14 with
    two operations in flight most of the time."""
    cfg = FP32LogConfig()
    rng = np.random.default_rng(91)
    for gap in range(1, 15):
        pair = [int(a) for a in random_operands(rng, 2, base=random_fp32)["a"]]
        run = _spaced(FP32LogSerial(config=cfg), pair, [gap])
        assert run["acc"] == [0, gap], gap
        want = 10 if gap == TAKE_BLOCKED else max(gap, LOG_SERIAL_II)
        assert run["res"][0] == LOG_SERIAL_LATENCY, gap
        assert run["res"][1] - run["res"][0] == want, gap
        check(cfg, pair, run["got"])
    gaps = [1 + k % 14 for k in range(3 * 14)]
    inputs = [int(a) for a in random_operands(rng, len(gaps) + 1, base=random_fp32)["a"]]
    run = _spaced(FP32LogSerial(config=cfg), inputs, gaps)
    check(cfg, inputs, run["got"])


def test_reset_mid_operation():
    """Reset with the front full, the multiplier mid-operation and a result stalled at the
    output: nothing stale comes out afterwards, and a following run is correct."""
    cfg = FP32LogConfig()
    dut = FP32LogSerial(config=cfg)
    rst = Signal(name="test_rst")
    top = Module()
    top.submodules.dut = ResetInserter(rst)(dut)
    inputs = [int(a) for a in random_operands(np.random.default_rng(12), 30,
                                              base=random_fp32)["a"]]
    log = {}

    async def tb(ctx):
        ctx.set(dut.o.ready, 0)
        ctx.set(dut.i.valid, 1)
        for a in inputs[:4]:                     # more than the unit holds before it stalls
            ctx.set(dut.i.payload.as_value(), a)
            for _ in range(3 * LOG_SERIAL_LATENCY):
                _, _, ready = await ctx.tick().sample(dut.i.ready)
                if ready:
                    break
        ctx.set(dut.i.valid, 0)
        for _ in range(3 * LOG_SERIAL_LATENCY):
            await ctx.tick()
        assert ctx.get(dut.o.valid), "the first result should be waiting at the output"
        assert not ctx.get(dut.i.ready), "a stalled unit must not accept"
        ctx.set(rst, 1)
        await ctx.tick()
        ctx.set(rst, 0)
        ctx.set(dut.o.ready, 1)
        for _ in range(3 * LOG_SERIAL_LATENCY):
            _, _, ov = await ctx.tick().sample(dut.o.valid)
            assert not ov, "stale result after reset"
        got, sent, edges = [], 0, 0
        rest = inputs[4:]
        while len(got) < len(rest):
            ctx.set(dut.i.valid, sent < len(rest))
            if sent < len(rest):
                ctx.set(dut.i.payload.as_value(), rest[sent])
            _, _, iv, ir, ov, op = await ctx.tick().sample(
                dut.i.valid, dut.i.ready, dut.o.valid, dut.o.payload.as_value())
            sent += bool(iv and ir)
            if ov:
                got.append(int(op))
            edges += 1
            assert edges < 1000
        log["after"] = got

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    add_deadline(sim)
    sim.run()
    check(cfg, inputs[4:], log["after"])


def _multipliers(dut) -> list:
    """Operand widths of every ``*`` in the design (its netlist, before synthesis)."""
    from amaranth.hdl import _ir, _nir        # Amaranth 0.5's netlist (no public API for it)
    netlist = _ir.build_netlist(Fragment.get(dut, None), name="top")
    return sorted((len(c.inputs[0]), len(c.inputs[1])) for c in netlist.cells
                  if isinstance(c, _nir.Operator) and c.operator == "*")


def test_one_shared_multiplier():
    """The serial unit has three multipliers (the reduction's, the first Horner step's
    ``R * H[0]`` and the shared one, the last two as four registered partial products of at
    most 18 x 18 bits each: operands of at most 18 bits, so a product of at most 36) where
    the pipelined one has seven."""
    serial = _multipliers(FP32LogSerial(config=FP32LogConfig()))
    piped = _multipliers(FP32Log(config=FP32LogConfig()))
    assert len(piped) == 7
    assert len(serial) == 1 + 4 + 4, serial
    assert all(width <= 36 for width, _ in serial), serial
