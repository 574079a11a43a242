"""Fast tier (Amaranth simulator) of the FP32 divide, square root and exp units.

Per unit and preset: the named special cases (all pairs of a small special set for divide), a
few hundred random vectors back to back and with random idle/backpressure, all bit-exact
against :mod:`sim.model.fp32_exp`; the published latency and one-result-per-cycle throughput;
the exp stage splits that do not divide the quotient width; the exp table; invalid configs.
"""
import dataclasses
import gc
import warnings

import numpy as np
import pytest
from amaranth.hdl import Fragment, UnusedElaboratable
from amaranth.sim import Simulator

from hdl.fp32.div import FP32Div
from hdl.fp32.divsqrt_config import (DIV_QUOTIENT_BITS, SQRT_ROOT_BITS, FP32DivSqrtConfig,
                                     exp_constants)
from hdl.fp32.exp import FP32Exp
from hdl.fp32.sqrt import FP32Sqrt
from hdl.registry import get_block
from sim.model.fp32 import SPECIALS_SMALL, random_fp32
from sim.model.fp32_exp import model_for, random_operands, special_operands
from sim.tb.amaranth_tb import add_deadline, assert_payloads, stream_through

UNITS = {"fp32_div": FP32Div, "fp32_sqrt": FP32Sqrt, "fp32_exp": FP32Exp}
SEEDS = {"fp32_div": 101, "fp32_sqrt": 202, "fp32_exp": 303}


simulate = stream_through


def check(block, cfg, inputs, outputs):
    assert_payloads(model_for(block, cfg), inputs, outputs)


@pytest.mark.parametrize("preset", ["tiny", "default"])
@pytest.mark.parametrize("block", sorted(UNITS))
def test_specials(block, preset):
    cfg = FP32DivSqrtConfig.preset(preset)
    model = model_for(block, cfg)
    fields = special_operands(block, SPECIALS_SMALL)
    if block == "fp32_div" and preset == "tiny":      # all pairs once, at the default preset
        fields = {k: v[::7] for k, v in fields.items()}
    inputs = model.pack_in(**fields)
    outputs = simulate(UNITS[block](config=cfg), inputs)
    check(block, cfg, inputs, outputs)


@pytest.mark.parametrize("preset", ["tiny", "default"])
@pytest.mark.parametrize("block", sorted(UNITS))
def test_random_with_backpressure(block, preset):
    cfg = FP32DivSqrtConfig.preset(preset)
    model = model_for(block, cfg)
    rng = np.random.default_rng(SEEDS[block] + (preset == "tiny"))
    inputs = model.pack_in(**random_operands(block, rng, 300, base=random_fp32))
    outputs = simulate(UNITS[block](config=cfg), inputs[:200])
    check(block, cfg, inputs[:200], outputs)
    outputs = simulate(UNITS[block](config=cfg), inputs[200:], idle_prob=0.3, stall_prob=0.4,
                       seed=SEEDS[block])
    check(block, cfg, inputs[200:], outputs)


@pytest.mark.parametrize("block", ["fp32_div", "fp32_sqrt"])
def test_lzc_stage_specials_and_random(block):
    """``lzc_stage`` (the FPGA builds' ``hdl.core.config.fpga_divsqrt_config``: the
    operands' leading-zero counts registered before the normalising shifts): every special
    pair and random operands, subnormals among them, bit-exact, under backpressure."""
    from hdl.core.config import fpga_divsqrt_config
    cfg = fpga_divsqrt_config()
    assert cfg.lzc_stage and not FP32DivSqrtConfig.preset("default").lzc_stage
    model = model_for(block, cfg)
    rng = np.random.default_rng(SEEDS[block] + 17)
    fields = special_operands(block, SPECIALS_SMALL)
    rand = random_operands(block, rng, 200, base=random_fp32)
    inputs = model.pack_in(**{k: np.concatenate([fields[k], rand[k]]) for k in fields})
    outputs = simulate(UNITS[block](config=cfg), inputs, idle_prob=0.2, stall_prob=0.3,
                       seed=SEEDS[block])
    check(block, cfg, inputs, outputs)


@pytest.mark.parametrize("bps", [1, 3])
def test_sqrt_odd_bits_per_stage(bps):
    """The presets put 2 and 4 recurrence steps in a stage (steps in pairs); 1 and 3 use the
    single-step path too (every remainder sized by the bound of its step): specials and
    random operands, bit-exact."""
    cfg = dataclasses.replace(FP32DivSqrtConfig.preset("default"), sqrt_bits_per_stage=bps)
    model = model_for("fp32_sqrt", cfg)
    rng = np.random.default_rng(SEEDS["fp32_sqrt"] + bps)
    fields = special_operands("fp32_sqrt", SPECIALS_SMALL)
    rand = random_operands("fp32_sqrt", rng, 150, base=random_fp32)
    inputs = model.pack_in(**{k: np.concatenate([fields[k], rand[k]]) for k in fields})
    outputs = simulate(FP32Sqrt(config=cfg), inputs, stall_prob=0.2, seed=bps)
    check("fp32_sqrt", cfg, inputs, outputs)


@pytest.mark.parametrize("block, lzc", [(b, False) for b in sorted(UNITS)]
                         + [("fp32_div", True), ("fp32_sqrt", True)])
def test_latency_and_throughput(block, lzc):
    """A lone operation leaves exactly ``latency`` edges after its input transfer; ``n``
    operations back to back take ``n + latency`` edges, with ``i.ready`` high throughout.
    With ``lzc_stage`` (the FPGA builds') one edge later than without."""
    cfg = dataclasses.replace(FP32DivSqrtConfig.preset("default"), lzc_stage=lzc)
    base = FP32DivSqrtConfig.preset("default")
    assert (getattr(cfg, UNITS[block].LATENCY_ATTR) - getattr(base, UNITS[block].LATENCY_ATTR)
            == int(lzc and block != "fp32_exp"))
    dut = UNITS[block](config=cfg)
    model = model_for(block, cfg)
    inputs = model.pack_in(**random_operands(block, np.random.default_rng(5), 40,
                                             base=random_fp32))
    log = {}

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.i.valid, 1)
        ctx.set(dut.i.payload.as_value(), inputs[0])
        edges = 0
        _, _, ready = await ctx.tick().sample(dut.i.ready)
        assert ready
        ctx.set(dut.i.valid, 0)
        while True:
            edges += 1
            _, _, valid = await ctx.tick().sample(dut.o.valid)
            if valid:
                break
            assert edges < 100
        log["latency"] = edges
        # back to back
        got, sent, edges = [], 0, 0
        while len(got) < len(inputs):
            ctx.set(dut.i.valid, sent < len(inputs))
            if sent < len(inputs):
                ctx.set(dut.i.payload.as_value(), inputs[sent])
            _, _, iv, ir, ov, op = await ctx.tick().sample(dut.i.valid, dut.i.ready,
                                                           dut.o.valid,
                                                           dut.o.payload.as_value())
            edges += 1
            if iv:
                assert ir, "i.ready dropped without backpressure"
                sent += 1
            if ov:
                got.append(int(op))
        log["edges"] = edges
        log["got"] = got

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(tb)
    add_deadline(sim)
    sim.run()
    assert log["latency"] == dut.latency == model.latency
    assert log["edges"] == len(inputs) + dut.latency
    check(block, cfg, inputs, log["got"])


def test_invalid_configs():
    for field, value, exc in [("div_bits_per_stage", 0, ValueError),
                              ("div_bits_per_stage", 9, ValueError),
                              ("div_bits_per_stage", 2.0, TypeError),
                              ("sqrt_bits_per_stage", True, TypeError),
                              ("sqrt_bits_per_stage", 0, ValueError),
                              ("exp_table_bits", 3, ValueError),
                              ("exp_table_bits", 9, ValueError),
                              ("exp_table_bits", "6", TypeError),
                              ("lzc_stage", 1, TypeError)]:
        with pytest.raises(exc, match=rf"FP32DivSqrtConfig\.{field}.*{value!r}"):
            FP32DivSqrtConfig(**{field: value})
    with pytest.raises(ValueError, match="preset.*'huge'"):
        FP32DivSqrtConfig.preset("huge")
    with warnings.catch_warnings():
        # the half-constructed components are never elaborated, by design
        warnings.simplefilter("ignore", UnusedElaboratable)
        for cls in UNITS.values():
            with pytest.raises(TypeError, match="config must be an FP32DivSqrtConfig"):
                cls(config={"div_bits_per_stage": 2})
            with pytest.raises(TypeError):
                cls(FP32DivSqrtConfig())                 # keyword-only
        gc.collect()


@pytest.mark.parametrize("bps", [1, 2, 3, 4, 5, 8])
def test_config_sizes(bps):
    cfg = FP32DivSqrtConfig(div_bits_per_stage=bps, sqrt_bits_per_stage=bps)
    assert cfg.div_quotient_bits >= DIV_QUOTIENT_BITS
    assert cfg.div_quotient_bits - DIV_QUOTIENT_BITS < bps
    assert cfg.sqrt_root_bits >= SQRT_ROOT_BITS
    # unpack + recurrence + round (prepare | finish)
    assert cfg.div_latency == 1 + cfg.div_stages + 2 == model_for("fp32_div", cfg).latency
    assert cfg.sqrt_latency == 1 + cfg.sqrt_stages + 2 == model_for("fp32_sqrt", cfg).latency
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.div_bits_per_stage = 1


@pytest.mark.parametrize("bps", [1, 3, 5])
def test_odd_stage_splits_are_exact(bps):
    """Bits-per-stage values that do not divide 26 compute extra quotient/root bits."""
    cfg = FP32DivSqrtConfig(div_bits_per_stage=bps, sqrt_bits_per_stage=bps)
    rng = np.random.default_rng(40 + bps)
    for block in ("fp32_div", "fp32_sqrt"):
        model = model_for(block, cfg)
        inputs = model.pack_in(**random_operands(block, rng, 60, base=random_fp32))
        check(block, cfg, inputs, simulate(UNITS[block](config=cfg), inputs))


@pytest.mark.parametrize("block", sorted(UNITS))
def test_registered_block_params(block):
    """The registry's JSON parameters publish the same latency as the component."""
    for preset in ("tiny", "default"):
        b = get_block(block)
        params = b.params(preset)
        dut = b.build(preset)
        Fragment.get(dut, None)                  # elaborate (also: it builds)
        assert params["latency"] == dut.latency == model_for(block, dut.config).latency
        assert params["ops_per_cycle"] == 1


@pytest.mark.parametrize("t", [4, 5, 6, 7, 8])
def test_exp_table_is_correctly_rounded(t):
    """``TABLE[j] = round(2**(j/N) * 2**30)``, checked with exact integer powers:
    ``(2T - 1)**N < 2**(j + 31N) < (2T + 1)**N``."""
    c = exp_constants(t)
    n = c.N
    for j, v in enumerate(c.TABLE):
        target = 1 << (j + 31 * n)
        assert (2 * v - 1) ** n < target < (2 * v + 1) ** n, j
