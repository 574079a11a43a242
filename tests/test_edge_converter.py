"""Array-edge converter: golden model vs an independent numpy reference, and the fast tier of
the EdgeConverter in Amaranth's simulator vs the golden model."""
import random

import numpy as np
import pytest

from hdl.edge_converter import EdgeConfig, EdgeConverter, edge_input_layout
from sim.model.edge import (edge_to_fp32, edge_to_fp32_array, is_tie, magnitude_fields,
                            named_edge_cases,
                            numpy_reference, random_vectors, reference_applies)
from sim.tb.amaranth_tb import run_sim, stream_get, stream_put


def _pack(cfg, value, exp, magnitude=False):
    """i payload bits, packed with the published layout (``magnitude``: the value as its
    magnitude and sign)."""
    lay = edge_input_layout(cfg, magnitude)
    v = magnitude_fields(value) if magnitude else value
    return lay.const({"value": v, "exp": exp}).as_value().value


def _f32(bits):
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


# ---- golden model ----------------------------------------------------------------------------

@pytest.mark.parametrize("preset", ["tiny", "default"])
def test_model_matches_numpy_reference(preset):
    cfg = EdgeConfig.preset(preset)
    vecs = random_vectors(random.Random(7), 20_000, cfg)
    vecs += [(v, e) for _, v, e in named_edge_cases(cfg)]
    vecs = [x for x in vecs if reference_applies(*x)]
    assert len(vecs) > 19_000
    ref = numpy_reference([v for v, _ in vecs], [e for _, e in vecs])
    got = edge_to_fp32_array([v for v, _ in vecs], [e for _, e in vecs], cfg)
    bad = [(v, e, hex(int(a)), hex(int(b))) for (v, e), a, b in zip(vecs, got, ref) if a != b]
    assert not bad, bad[:10]
    # the vectors really cover the interesting regions
    f = got.view(np.float32)
    assert np.isinf(f).sum() > 500
    assert ((f != 0) & (np.abs(f) < np.float32(2.0 ** -126))).sum() > 1000
    assert (np.signbit(f) & (f == 0)).sum() > 50            # negative values rounding to -0
    assert sum(is_tie(v, e) for v, e in vecs) > 500         # exact ties (RNE decides)


def test_is_tie_helper():
    assert is_tie(3, -150) and is_tie((1 << 24) + 1, 0) and is_tie(1, -150)
    assert not is_tie(3, -151) and not is_tie((1 << 24) + 2, 0) and not is_tie(7, 0)


def test_model_named_values():
    cfg = EdgeConfig()
    cases = {name: (v, e) for name, v, e in named_edge_cases(cfg)}
    assert edge_to_fp32(*cases["zero"]) == 0                           # +0.0, not -0.0
    assert _f32(edge_to_fp32(*cases["min_subnormal"])) == np.float32(2.0 ** -149)
    assert edge_to_fp32(*cases["half_min_subnormal_tie_to_zero"]) == 0  # tie to even (0)
    assert edge_to_fp32(*cases["neg_half_min_subnormal"]) == 0x80000000  # -0.0
    assert edge_to_fp32(*cases["three_halves_subnormal_tie_up"]) == 2     # 1.5 -> 2
    assert edge_to_fp32(*cases["five_halves_subnormal_tie_down"]) == 2    # 2.5 -> 2
    assert edge_to_fp32(*cases["subnormal_rounds_to_min_normal"]) == 0x00800000
    assert _f32(edge_to_fp32(*cases["max_finite"])) == np.finfo(np.float32).max
    assert edge_to_fp32(*cases["max_finite_half_ulp_tie_to_inf"]) == 0x7F800000
    assert edge_to_fp32(*cases["neg_two_pow_128_overflow"]) == 0xFF800000
    assert _f32(edge_to_fp32(*cases["tie_to_even_up"])) == np.float32(2 ** 24 + 4)
    assert _f32(edge_to_fp32(*cases["tie_to_even_down"])) == np.float32(2 ** 24)
    vmin, emin = cases["vmin_exp_min"]
    assert edge_to_fp32(vmin, emin) == 0x80000000          # -2^31 * 2^-512 underflows to -0


def test_model_rejects_out_of_range_inputs():
    cfg = EdgeConfig.preset("tiny")
    with pytest.raises(ValueError, match="value"):
        edge_to_fp32(1 << 23, 0, cfg)
    with pytest.raises(ValueError, match="exp"):
        edge_to_fp32(1, 512, cfg)


@pytest.mark.parametrize("field, value, exc", [
    ("int_bits", 1, ValueError), ("int_bits", 65, ValueError), ("int_bits", 8.0, TypeError),
    ("exp_bits", 1, ValueError), ("exp_bits", 17, ValueError), ("exp_bits", True, TypeError),
])
def test_invalid_config(field, value, exc):
    with pytest.raises(exc, match=rf"EdgeConfig\.{field}.*{value!r}"):
        EdgeConfig(**{field: value})
    with pytest.raises(TypeError, match="config"):
        EdgeConverter(config={"int_bits": 8})
    with pytest.raises(TypeError, match=r"EdgeConverter\.magnitude.*1"):
        EdgeConverter(magnitude=1)


@pytest.mark.parametrize("int_bits, exp_bits", [(2, 2), (64, 16)])
def test_config_limits_accepted(int_bits, exp_bits):
    """The ends of the validated ranges are legal (int_bits 2..64, exp_bits 2..16): the checks
    reject only what lies outside them (kills mutant 9f230f8d7152, exp_bits limit 15)."""
    cfg = EdgeConfig(int_bits=int_bits, exp_bits=exp_bits)
    assert (cfg.int_bits, cfg.exp_bits) == (int_bits, exp_bits)


def test_presets():
    assert EdgeConfig.preset("default").int_bits == 32
    assert EdgeConfig.preset("tiny").int_bits < 32


# ---- hardware, Amaranth simulator --------------------------------------------------------------

@pytest.mark.parametrize("preset, n, magnitude", [("default", 300, False), ("tiny", 120, False),
                                                  ("default", 300, True), ("tiny", 120, True)])
def test_dut_random_and_edge_cases_with_backpressure(preset, n, magnitude):
    """Named edge cases and random vectors with idle input cycles (random junk on the payload
    while ``valid`` is low, so a bubble carries no copy of the last value) and random output
    stalls: bit-exact with the model, nothing lost or duplicated; with ``magnitude`` the
    values enter as magnitude and sign (the same results)."""
    cfg = EdgeConfig.preset(preset)
    rng = random.Random(21)
    vecs = [(v, e) for _, v, e in named_edge_cases(cfg)] + random_vectors(rng, n, cfg)
    assert any(v == -(1 << (cfg.int_bits - 1)) for v, _ in vecs)   # |v| needs all int_bits
    dut = EdgeConverter(config=cfg, magnitude=magnitude)
    got = []
    bits = len(dut.i.payload)

    async def producer(ctx):
        for v, e in vecs:
            await stream_put(ctx, dut.i, _pack(cfg, v, e, magnitude), rng=rng, idle_prob=0.3,
                             junk=lambda: rng.getrandbits(bits))

    async def consumer(ctx):
        for _ in vecs:
            got.append(await stream_get(ctx, dut.o, rng=rng, stall_prob=0.4))

    run_sim(dut, producer, consumer)
    exp = [edge_to_fp32(v, e, cfg) for v, e in vecs]
    bad = [(v, e, hex(a), hex(b)) for (v, e), a, b in zip(vecs, got, exp) if a != b]
    assert not bad, bad[:10]


def test_dut_latency_and_throughput():
    """o always ready, i always valid: one result per cycle, each `latency` cycles after its
    input transfer; under a stall the pipeline holds its data (nothing dropped)."""
    cfg = EdgeConfig()
    dut = EdgeConverter(config=cfg)
    vecs = random_vectors(random.Random(3), 40, cfg)
    ins, outs = [], []

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        cycle, k = 0, 0
        while len(outs) < len(vecs):
            if k < len(vecs):
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, _pack(cfg, *vecs[k]))
            else:
                ctx.set(dut.i.valid, 0)
            # a 5-cycle stall in the middle: ready drops only after the pipeline fills
            ctx.set(dut.o.ready, 0 if 20 <= cycle < 25 else 1)
            if k < len(vecs) and ctx.get(dut.i.ready):
                ins.append(cycle)
                k += 1
            if ctx.get(dut.o.valid) and ctx.get(dut.o.ready):
                outs.append((cycle, ctx.get(dut.o.payload)))
            await ctx.tick()
            cycle += 1
            assert cycle < 1000

    run_sim(dut, tb)
    assert [b for _, b in outs] == [edge_to_fp32(v, e) for v, e in vecs]
    lat = dut.latency
    # before the stall: every transfer comes out exactly `latency` cycles later, back to back
    for t_in, (t_out, _) in zip(ins, outs):
        if t_out < 20:
            assert t_out == t_in + lat
    assert ins[:20 - lat] == list(range(20 - lat))          # one input per cycle
    stalled = [t for t in ins if 20 <= t < 25]
    assert len(stalled) <= lat                               # bubbles filled, then held
