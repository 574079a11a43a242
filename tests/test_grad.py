"""Fast tier of the gradient datapaths (Amaranth simulator, small vector counts)."""
import random

import numpy as np
import pytest

from hdl.fp32.config import FP32Config
from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.grad.config import GradConfig
from hdl.grad.unit import GradUnit
from sim.amaranth_tb import run_sim, stream_get, stream_put
from sim.grad import (EW_OPS, EW_RELU_GRAD, bias_grad, canon, elementwise, f32_max,
                      softmax_xent, softmax_xent_f64, sum_squares, xent_loss)
from sim.optim import f32_bits

F32 = np.float32


@pytest.mark.parametrize("kw, exc, match", [
    ({"lanes": 3}, ValueError, r"GradConfig\.lanes.*3"),
    ({"lanes": 1}, ValueError, r"GradConfig\.lanes.*1"),
    ({"max_cols": 1}, ValueError, r"GradConfig\.max_cols.*1"),
    ({"max_classes": 70000}, ValueError, r"GradConfig\.max_classes.*70000"),
    ({"lanes": 8.0}, TypeError, r"GradConfig\.lanes"),
])
def test_invalid_config(kw, exc, match):
    with pytest.raises(exc, match=match):
        GradConfig(**kw)


def test_lanes_vs_adder_latency_rejected():
    with pytest.raises(ValueError, match="lanes.*adder latency"):
        GradUnit(config=GradConfig(lanes=4), fp32_config=FP32Config(add_stages=5))


def test_golden_rejects_bad_inputs():
    with pytest.raises(ValueError, match="elementwise op"):
        elementwise(9, [1.0])
    with pytest.raises(ValueError, match="dy must be"):
        bias_grad(np.zeros(3, F32))
    with pytest.raises(ValueError, match="labels"):
        softmax_xent(np.zeros((2, 4), F32), [0, 4], 1.0, GradConfig())


def test_golden_max_and_relu_edge_cases():
    assert f32_max(np.array([-0.0, 0.0], F32)).view(np.uint32) == 0            # +0 wins
    assert np.isnan(f32_max(np.array([1.0, np.nan, 2.0], F32)))
    r = elementwise(1, np.array([-0.0, 0.0, -1.0, np.nan, np.inf, 1e-45], F32))
    assert list(canon(r)) == [0, 0, 0, 0x7FC00000, 0x7F800000, 1]


def _unit():
    return GradUnit(config=GradConfig(max_cols=16, max_classes=16),
                    fp32_config=FP32Config(), divsqrt_config=FP32DivSqrtConfig.preset("tiny"))


def test_grad_unit_all_blocks():
    """Deep (default) add/mul pipelines: elementwise (every op, specials, backpressure), bias
    gradient (a short-row batch that exercises the stall and a longer one), softmax rows."""
    dut = _unit()
    rng = np.random.default_rng(7)
    prng = random.Random(8)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 3.4e38], F32)

    cases = []
    for op in EW_OPS:
        a = np.concatenate([rng.standard_normal(12).astype(F32), specials])
        b = np.concatenate([rng.standard_normal(12).astype(F32), specials[::-1]])
        cases.append((op, a, b, F32(0.37)))
    received = []

    async def ew_consumer(ctx):
        for op, a, b, scale in cases:
            got = [(await stream_get(ctx, dut.ew_o, rng=prng, stall_prob=0.3))["r"] for _ in a]
            exp = canon(elementwise(op, a, b, scale))
            assert list(canon(np.array(got, np.uint64))) == list(exp), f"op {op}"
            received.append(op)

    async def tb(ctx):
        # elementwise (the consumer above runs concurrently, with backpressure)
        for op, a, b, scale in cases:
            ctx.set(dut.ew_op, op)
            ctx.set(dut.ew_scale, f32_bits(scale))
            for x, y in zip(a, b):
                await stream_put(ctx, dut.ew_i, {"a": f32_bits(x), "b": f32_bits(y)},
                                 rng=prng, idle_prob=0.2)
            while op not in received:          # op changes only with the pipeline empty
                await ctx.tick()
        # bias gradient: 3x3 (cols < adder loop: pauses) and 4x9
        for rows, cols in ((3, 3), (4, 9)):
            dy = rng.standard_normal((rows, cols)).astype(F32)
            await stream_put(ctx, dut.bg_cmd, {"rows": rows, "cols": cols})
            for x in dy.ravel():
                await stream_put(ctx, dut.bg_dy, f32_bits(x), rng=prng, idle_prob=0.2)
            got = [await stream_get(ctx, dut.bg_db, rng=prng, stall_prob=0.3)
                   for _ in range(cols)]
            assert [g["r"] for g in got] == [f32_bits(x) for x in bias_grad(dy)]
            assert [g["last"] for g in got] == [0] * (cols - 1) + [1]
        assert ctx.get(dut.bg_error) == 0
        await stream_put(ctx, dut.bg_cmd, {"rows": 1, "cols": 17})     # > max_cols
        await ctx.tick()
        assert ctx.get(dut.bg_error) == 1
        # softmax cross-entropy: 3 rows of 10 classes
        z = (rng.standard_normal((3, 10)) * 4).astype(F32)
        labels = rng.integers(0, 10, 3)
        gscale = F32(1 / 4)
        ctx.set(dut.sx_gscale, f32_bits(gscale))
        grad, s, zt = softmax_xent(z, labels, gscale, dut.config, dut.divsqrt_config)
        for r in range(3):
            for c in range(10):
                await stream_put(ctx, dut.sx_i, {"x": f32_bits(z[r, c]), "label": int(labels[r]),
                                                 "last": int(c == 9)}, rng=prng, idle_prob=0.2)
            got = [await stream_get(ctx, dut.sx_o, rng=prng, stall_prob=0.3) for _ in range(10)]
            assert [g["r"] for g in got] == [f32_bits(x) for x in grad[r]], f"row {r}"
            assert got[-1]["last"] == 1 and got[-1]["sum"] == f32_bits(s[r])
            assert got[-1]["zt"] == f32_bits(zt[r])

    run_sim(dut, tb, ew_consumer)


def test_golden_softmax_within_tolerance_of_float64():
    """The golden model (= hardware, bit-exact) vs float64: |g - g64| <= (C + 8) * 2**-24 *
    gscale and |loss - loss64| <= (C + 8) * 2**-24 * (1 + |zt|) over 200 random rows."""
    cfg = GradConfig()
    rng = np.random.default_rng(11)
    c = 10
    z = (rng.standard_normal((200, c)) * 5).astype(F32)
    labels = rng.integers(0, c, 200)
    gscale = F32(1 / 200)
    grad, s, zt = softmax_xent(z, labels, gscale, cfg, FP32DivSqrtConfig())
    g64, loss64 = softmax_xent_f64(z, labels, float(gscale))
    tol = (c + 8) * 2.0 ** -24
    assert np.abs(grad - g64).max() <= tol * float(gscale)
    assert np.all(np.abs(xent_loss(s, zt) - loss64) <= tol * (1 + np.abs(zt)))


def test_golden_sum_squares_and_bias_grad_vs_float64():
    rng = np.random.default_rng(12)
    x = rng.standard_normal(4096).astype(F32)
    ss = sum_squares(x, GradConfig())
    ref = float(np.sum(x.astype(np.float64) ** 2))
    assert abs(float(ss) - ref) <= 4096 * 2.0 ** -24 * ref
    dy = rng.standard_normal((64, 32)).astype(F32)
    db = bias_grad(dy)
    ref = dy.astype(np.float64).sum(axis=0)
    assert np.all(np.abs(db - ref) <= 64 * 2.0 ** -24 * np.abs(dy).sum(axis=0))
