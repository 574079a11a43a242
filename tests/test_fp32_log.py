"""Fast tier (Amaranth simulator) of the FP32 natural-log unit and its golden model.

Hardware: the named special cases and a few hundred random operands per preset, back to back
and with random idle/backpressure, bit-exact against :class:`sim.model.fp32_log.FP32Log`, for
the pipelined unit and the serial one (:class:`hdl.fp32.log_serial.FP32LogSerial`); exact
published latency and one result per cycle; reset in mid-stream. Model: the tables are
correctly rounded, every intermediate fits the hardware's registers, the accuracy against
float64 (sampled; the full measurement is in the docs and the benchmark), special values against
numpy, invalid configs.
"""
import dataclasses
import gc
import warnings
from decimal import Decimal, localcontext

import numpy as np
import pytest
from amaranth.hdl import Fragment, Module, ResetInserter, Signal, UnusedElaboratable
from amaranth.sim import Simulator

from hdl.fp32.log import FP32Log, log_register_widths
from hdl.fp32.log_config import LOG_LATENCY, FP32LogConfig, log_constants
from hdl.fp32.log_serial import FP32LogSerial
from hdl.registry import get_block
from sim.model.fp32 import SPECIALS_SMALL, random_fp32
from sim.model.fp32_log import FP32Log as Model
from sim.model.fp32_log import (LOG_SPECIALS, log_ulp_error, measure_log_accuracy, random_operands,
                                special_operands)
from sim.tb.amaranth_tb import add_deadline, assert_payloads, stream_through

F32 = np.float32


simulate = stream_through


def check(cfg, inputs, outputs):
    assert_payloads(Model(cfg), inputs, outputs)


#: The pipelined unit and the one on a shared multiplier (hdl/fp32/log_serial.py, its own
#: timing tests in tests/test_fp32_log_serial.py): the same words.
UNITS = [FP32Log, FP32LogSerial]


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_specials(preset, unit):
    cfg = FP32LogConfig.preset(preset)
    inputs = [int(a) for a in special_operands(SPECIALS_SMALL)["a"]]
    check(cfg, inputs, simulate(unit(config=cfg), inputs))


@pytest.mark.parametrize("unit", UNITS)
@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_random_with_backpressure(preset, unit):
    cfg = FP32LogConfig.preset(preset)
    rng = np.random.default_rng(404 + (preset == "tiny") + 404 * (unit is FP32LogSerial))
    inputs = [int(a) for a in random_operands(rng, 300, base=random_fp32)["a"]]
    check(cfg, inputs[:200], simulate(unit(config=cfg), inputs[:200]))
    check(cfg, inputs[200:], simulate(unit(config=cfg), inputs[200:], idle_prob=0.3,
                                      stall_prob=0.4, seed=3))


def test_latency_throughput_and_reset():
    """A lone operation: exactly ``latency`` edges; 40 back to back: ``40 + latency`` edges
    with ``i.ready`` high; reset with the pipeline full and the output stalled: no stale
    result afterwards, then a correct run."""
    cfg = FP32LogConfig()
    dut = FP32Log(config=cfg)
    rst = Signal(name="test_rst")
    top = Module()
    top.submodules.dut = ResetInserter(rst)(dut)
    fill = LOG_LATENCY + 1                  # enough to reach the output with it stalled
    inputs = [int(a) for a in random_operands(np.random.default_rng(5), 50 + fill,
                                              base=random_fp32)["a"]]
    log = {}

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload.as_value(), inputs[0])
        _, _, ready = await ctx.tick().sample(dut.i.ready)
        assert ready
        ctx.set(dut.i.valid, 0)
        edges = 0
        while True:
            edges += 1
            _, _, valid = await ctx.tick().sample(dut.o.valid)
            if valid:
                break
            assert edges < 100
        log["latency"] = edges
        async def back_to_back(payloads):
            got, sent, edges = [], 0, 0
            while len(got) < len(payloads):
                ctx.set(dut.i.valid, sent < len(payloads))
                if sent < len(payloads):
                    ctx.set(dut.i.payload.as_value(), payloads[sent])
                _, _, iv, ir, ov, op = await ctx.tick().sample(
                    dut.i.valid, dut.i.ready, dut.o.valid, dut.o.payload.as_value())
                edges += 1
                if iv:
                    assert ir, "i.ready dropped without backpressure"
                    sent += 1
                if ov:
                    got.append(int(op))
                assert edges < 200
            return got, edges

        got, edges = await back_to_back(inputs[:40])
        log["edges"], log["got"] = edges, got
        # fill the pipeline with the output stalled, then reset
        ctx.set(dut.o.ready, 0)
        for a in inputs[40:40 + fill]:
            ctx.set(dut.i.valid, 1)
            ctx.set(dut.i.payload.as_value(), a)
            await ctx.tick()
        ctx.set(dut.i.valid, 0)
        assert ctx.get(dut.o.valid)
        ctx.set(rst, 1)
        await ctx.tick()
        ctx.set(rst, 0)
        await ctx.tick()
        assert not ctx.get(dut.o.valid), "stale result after reset"
        ctx.set(dut.o.ready, 1)
        after, _ = await back_to_back(inputs[40 + fill:])
        for _ in range(LOG_LATENCY + 3):           # nothing extra (no stale result)
            _, _, ov = await ctx.tick().sample(dut.o.valid)
            assert not ov, "extra result after reset"
        log["after"] = after

    sim = Simulator(top)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    add_deadline(sim)
    sim.run()
    assert log["latency"] == dut.latency == Model(cfg).latency == LOG_LATENCY
    assert log["edges"] == 40 + dut.latency
    check(cfg, inputs[:40], log["got"])
    check(cfg, inputs[40 + fill:], log["after"])


def test_invalid_configs():
    for value, exc in [(3, ValueError), (9, ValueError), (6.0, TypeError), (True, TypeError)]:
        with pytest.raises(exc, match=rf"FP32LogConfig\.table_bits.*{value!r}"):
            FP32LogConfig(table_bits=value)
    with pytest.raises(ValueError, match="preset.*'huge'"):
        FP32LogConfig.preset("huge")
    with pytest.raises(dataclasses.FrozenInstanceError):
        FP32LogConfig().table_bits = 5
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(TypeError, match="config must be an FP32LogConfig"):
            FP32Log(config={"table_bits": 6})
        with pytest.raises(TypeError):
            FP32Log(FP32LogConfig())                 # keyword-only
        gc.collect()


def test_registered_block_params():
    for preset in ("tiny", "default"):
        b = get_block("fp32_log")
        params = b.params(preset)
        dut = b.build(preset)
        Fragment.get(dut, None)
        assert params["latency"] == dut.latency == LOG_LATENCY
        assert params["table_bits"] == FP32LogConfig.preset(preset).table_bits


# ------------------------------------------------------------------------------------------------
# Golden model
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("t", [4, 5, 6, 7, 8])
def test_tables_are_correctly_rounded(t):
    """``INV[j] = round(2**K N / (N + j))`` and ``LOGT[j] = round(ln(2**K / INV[j]) 2**F)``,
    checked independently (exact rationals; 80-digit logarithms); the ends cancel exactly."""
    c = log_constants(t)
    assert len(c.INV) == len(c.LOGT) == c.N + 1
    for j, inv in enumerate(c.INV):
        exact = (1 << c.K) * c.N / (c.N + j)
        assert abs(inv - exact) <= 0.5
    with localcontext() as ctx:
        ctx.prec = 80
        for j in range(0, c.N + 1, max(1, c.N // 16)):
            v = (Decimal(1 << c.K) / Decimal(c.INV[j])).ln() * Decimal(1 << c.F)
            assert abs(Decimal(c.LOGT[j]) - v) <= Decimal("0.5")
        assert abs(Decimal(c.LN2) - Decimal(2).ln() * Decimal(1 << c.F)) <= Decimal("0.5")
    assert c.INV[0] == 1 << c.K and c.INV[c.N] == 1 << (c.K - 1)
    assert c.LOGT[0] == 0 and c.LOGT[c.N] == c.LN2


@pytest.mark.parametrize("t", [4, 6, 8])
def test_intermediates_fit_registers(t):
    """Every intermediate of the model over 30,000 operands (random + near 1 + table ends +
    subnormals) fits the hardware register of the same name."""
    model = Model(FP32LogConfig(table_bits=t))
    rng = np.random.default_rng(70 + t)
    a = np.concatenate([random_operands(rng, 30000)["a"], np.array(LOG_SPECIALS)])
    a = a[((a >> 31) == 0) & (((a >> 23) & 0xFF) != 0xFF) & ((a & 0x7FFFFFFF) != 0)]
    st = model.steps(a)
    widths = log_register_widths(t)
    for name, key in [("m", "m"), ("e", "e"), ("j", "j"), ("red", "red"), ("h", "h1"),
                      ("h", "h2"), ("h", "h3"), ("w", "w"), ("prod", "prod"), ("logt", "logt"),
                      ("big", "big"), ("s", "s")]:
        bits, signed = widths[name]
        v = st[key]
        lo, hi = (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if signed else (0, (1 << bits) - 1)
        assert v.min() >= lo and v.max() <= hi, (name, key, int(v.min()), int(v.max()), bits)
    assert st["j"].max() <= model.constants.N
    # the bound the widths are built on is reached closely (no slack hiding a bug)
    assert np.abs(st["red"]).max() > 1 << (widths["red"][0] - 3)


def test_specials_match_numpy():
    """Every special class against numpy's float32 ``log`` (NaN results as NaN; finite
    results within the accuracy bound)."""
    a = special_operands(SPECIALS_SMALL)["a"]
    r = Model()(a)["r"]
    x = a.astype(np.uint32).view(F32)
    with np.errstate(all="ignore"):
        ref = np.log(x)
    got = r.astype(np.uint32).view(F32)
    nan = np.isnan(ref)
    assert np.all(r[nan] == 0x7FC00000)
    inf = np.isinf(ref)
    assert np.array_equal(got[inf], ref[inf])            # log(0) = -Inf, log(+Inf) = +Inf
    fin = ~nan & ~inf & (x != 1)
    assert log_ulp_error(a[fin], r[fin]).max() <= 0.6
    assert r[a == 0x3F800000][0] == 0                    # log(1) = +0
    assert np.all(r[a == 0x80000000] == 0xFF800000)      # log(-0) = -Inf
    assert np.all(r[a == 0xFF800000] == 0x7FC00000)      # log(-Inf) = NaN


@pytest.mark.parametrize("t", [4, 6])
def test_accuracy_sampled(t):
    """Sampled accuracy (every 400,009th float32 plus 2**16 patterns on both sides of 1);
    the full measurement is ``docs/fp32_log.md`` (``measure_log_accuracy``)."""
    acc = measure_log_accuracy(FP32LogConfig(table_bits=t), stride=400009,
                               bands=((0x3F7F8000, 0x3F808000),))
    assert acc["max_ulp"] <= (0.6 if t == 4 else 0.51)
    assert acc["count"] > 60000
