"""Fast tier of the gradient datapaths (Amaranth simulator, small vector counts)."""
import functools
import random

import numpy as np
import pytest

from hdl.fp32.config import FP32Config
from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.fp32.log_serial import LOG_SERIAL_LATENCY
from hdl.grad.config import GradConfig
from hdl.grad.softmax import SoftmaxXent
from hdl.grad.unit import GradUnit
from hdl.lib.mustuse import mark_used
from sim.model.grad import (EW_OPS, bias_grad, canon, elementwise, f32_max, row_sum,
                            softmax_tolerance, softmax_xent, softmax_xent_f64, sum_squares,
                            xent_loss)
from sim.model.optim import f32_bits, lane_sum
from sim.tb.amaranth_tb import ReusableSim, run_sim, stream_get, stream_put

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
    gradient (a short-row batch that exercises the stall and a longer one), two softmax rows
    (the overlapped-row tests below use :class:`SoftmaxXent` directly)."""
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
            # raw hardware words: a NaN result must be the canonical 0x7FC00000 (docs/fp32.md);
            # only the golden side (numpy, free NaN payloads) is canonicalised
            assert [int(g) for g in got] == list(exp), f"op {op}"
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
        # bias gradient: 3x3 (cols < adder loop: pauses), 4x9, and the edges of the row and
        # column counters: one column, one row, one element
        for rows, cols in ((3, 3), (4, 9), (3, 1), (1, 5), (1, 1)):
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
        # softmax cross-entropy through the unit's sx_* ports: 2 rows of 10 classes
        z = (rng.standard_normal((2, 10)) * 4).astype(F32)
        labels = rng.integers(0, 10, 2)
        gscale = F32(1 / 4)
        ctx.set(dut.sx_gscale, f32_bits(gscale))
        grad, s, zt, loss = softmax_xent(z, labels, gscale, dut.config, dut.divsqrt_config,
                                         dut.log_config)
        for r in range(2):
            for c in range(10):
                await stream_put(ctx, dut.sx_i, {"x": f32_bits(z[r, c]), "label": int(labels[r]),
                                                 "last": int(c == 9)}, rng=prng, idle_prob=0.2)
            got = [await stream_get(ctx, dut.sx_o, rng=prng, stall_prob=0.3) for _ in range(10)]
            assert [g["r"] for g in got] == [f32_bits(x) for x in grad[r]], f"row {r}"
            assert got[-1]["last"] == 1 and got[-1]["sum"] == f32_bits(s[r])
            assert got[-1]["zt"] == f32_bits(zt[r]) and got[-1]["loss"] == f32_bits(loss[r])

    run_sim(dut, tb, ew_consumer)


@pytest.mark.parametrize("la_delta", [-2, -1, 0, 1])
def test_bias_grad_short_rows_back_to_back(la_delta):
    """Bias gradient rows shorter than the adder loop (``cols`` around the adder's latency
    ``la``), the ``dy`` words back to back (no idle cycle to hide a hazard) and the output
    taken at once: each column's running sum is read only after its previous add was
    written (the pause between rows), so every column is exact."""
    from hdl.grad.biasgrad import BiasGrad
    fc = FP32Config()
    la = fc.latency("fp32_add")
    cols = la + la_delta
    rows = 4
    dut = BiasGrad(config=GradConfig(max_cols=16, max_classes=16), fp32_config=fc)
    rng = np.random.default_rng(40 + la_delta)
    dy = rng.standard_normal((rows, cols)).astype(F32)
    got = []

    async def tb(ctx):
        await stream_put(ctx, dut.cmd, {"rows": rows, "cols": cols})
        for x in dy.ravel():
            await stream_put(ctx, dut.dy, f32_bits(x))

    async def out(ctx):
        for _ in range(cols):
            got.append(await stream_get(ctx, dut.db))

    run_sim(dut, tb, out)
    assert [g["r"] for g in got] == [f32_bits(x) for x in bias_grad(dy)]


def test_golden_softmax_within_tolerance_of_float64():
    """The golden model (= hardware, bit-exact) vs float64 over 200 random rows of 10 and 20 of
    64 classes: gradient within ``(C + 8) * 2**-24 * gscale``; the FP32 loss (hardware log)
    within ``2**-24 * (C + 8 + 3 (|zt| + |loss|))``, and much closer than that to the float64
    loss of the same ``s`` and ``zt`` (the log unit is within 0.51 ulp)."""
    rng = np.random.default_rng(11)
    for rows, c, scale in ((200, 10, 5), (20, 64, 20)):
        z = (rng.standard_normal((rows, c)) * scale).astype(F32)
        labels = rng.integers(0, c, rows)
        gscale = F32(1 / rows)
        grad, s, zt, loss = softmax_xent(z, labels, gscale, GradConfig(), FP32DivSqrtConfig())
        g64, loss64 = softmax_xent_f64(z, labels, float(gscale))
        grad_tol, loss_tol = softmax_tolerance(c, gscale, zt, loss64)
        assert np.abs(grad - g64).max() <= grad_tol
        assert np.all(np.abs(loss - loss64) <= loss_tol)
        host = xent_loss(s, zt)                       # float64 log of the same terms
        assert np.all(np.abs(loss - host) <= 2.0 ** -23 * (np.abs(host) + np.abs(zt) + 1e-30))


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


# ------------------------------------------------------------------------------------------------
# Softmax cross-entropy: overlapped rows
# ------------------------------------------------------------------------------------------------

def _softmax(preset_units: str, max_classes=16, serial_log=False, read_reg=False):
    return SoftmaxXent(config=GradConfig(max_cols=16, max_classes=max_classes),
                       fp32_config=FP32Config.preset(preset_units),
                       divsqrt_config=FP32DivSqrtConfig.preset("tiny"), serial_log=serial_log,
                       read_reg=read_reg)


def test_softmax_serial_log_errors():
    """``serial_log`` must be a bool, and needs rows of at least ``LOG_SERIAL_II`` (7) slots:
    ``GradConfig.lanes >= 7``; both named in the message."""
    with pytest.raises(TypeError, match=r"SoftmaxXent\.serial_log must be a bool, not 1"):
        SoftmaxXent(serial_log=1)
    with pytest.raises(ValueError, match=r"GradConfig\.lanes \(4\) must be >= the serial log's "
                                         r"initiation interval \(7\)"):
        SoftmaxXent(config=GradConfig(lanes=4), fp32_config=FP32Config.preset("tiny"),
                    serial_log=True)
    mark_used(SoftmaxXent(config=GradConfig(lanes=4), fp32_config=FP32Config.preset("tiny")))


@functools.cache
def _softmax_sim(preset_units: str, serial_log=False, read_reg=False) -> ReusableSim:
    """One elaborated :func:`_softmax` block per FP32 preset (and log: pipelined, or the FPGA
    build's serial one; and ``read_reg``, the FPGA build's registers), shared by the softmax
    tests (about 3 s to build; each run starts from the initial state, :class:`ReusableSim`)."""
    return ReusableSim(_softmax(preset_units, serial_log=serial_log, read_reg=read_reg),
                       testbenches=2, processes=0)


#: Deadline of a softmax test's run (cycles): each passes with 2,000 (tried), so ten times
#: that leaves room, and a unit that stops delivering fails in seconds instead of running to
#: the simulator's default 1,000,000.
SX_MAX_CYCLES = 20_000


def _sx_payloads(rows):
    return [{"x": f32_bits(x), "label": int(lab), "last": int(j == len(z) - 1)}
            for z, lab in rows for j, x in enumerate(z)]


def _sx_producer(dut, payloads, gscale, rng=None, idle=0.0):
    """A testbench sending ``payloads`` on the softmax's input (``gscale`` set first), with
    random idle cycles."""
    async def producer(ctx):
        ctx.set(dut.gscale, f32_bits(gscale))
        for p in payloads:
            await stream_put(ctx, dut.i, p, rng=rng, idle_prob=idle)
    return producer


def _sx_consumer(dut, count, got, rng=None, stall=0.0, wait=0):
    """A testbench taking ``count`` results into ``got`` after ``wait`` cycles, with random
    backpressure."""
    async def consumer(ctx):
        for _ in range(wait):
            await ctx.tick()
        for _ in range(count):
            got.append(await stream_get(ctx, dut.o, rng=rng, stall_prob=stall))
    return consumer


def _check_rows(dut, rows, got, gscale):
    k = 0
    for z, lab in rows:
        grad, s, zt, loss = softmax_xent(z[None, :], [lab], gscale, dut.config,
                                         dut.divsqrt_config, dut.log_config)
        out = got[k:k + len(z)]
        k += len(z)
        assert [int(g["r"]) for g in out] == list(canon(grad[0])), \
            f"row of {len(z)}: {z}"
        assert [g["last"] for g in out] == [0] * (len(z) - 1) + [1]
        assert {g["sum"] for g in out} == {f32_bits(s[0])}
        assert {g["zt"] for g in out} == {f32_bits(zt[0])}
        assert {int(g["loss"]) for g in out} == {int(canon(loss)[0])}


@pytest.mark.parametrize("units, idle, stall, serial_log, read_reg",
                         [("default", 0.2, 0.3, False, False), ("tiny", 0.0, 0.7, False, False),
                          ("default", 0.0, 0.0, True, False), ("tiny", 0.1, 0.5, True, False),
                          ("tiny", 0.2, 0.4, True, True)])
def test_softmax_rows_back_to_back(units, idle, stall, serial_log, read_reg):
    """Rows of 1..16 classes (shorter and longer than the 8 lanes; a full 16-class bank) sent
    without waiting for results, with random idle cycles and backpressure, deep (default) and
    1-cycle (tiny) add/mul pipelines, the pipelined log and the serial one (rows of fewer than
    8 classes back to back at full rate reach it every 8 cycles): every gradient, sum, zt and
    loss bit-exact with the golden model; also with ``read_reg`` (the FPGA build's input and
    e FIFO registers)."""
    sim = _softmax_sim(units, serial_log, read_reg)
    dut = sim.dut
    rng = np.random.default_rng(21)
    prng = random.Random(22)
    rows = []
    for c in (3, 16, 5, 1, 12, 16, 16, 8, 2, 9, 16, 7):
        z = (rng.standard_normal(c) * 4).astype(F32)
        rows.append((z, int(rng.integers(0, c))))
    rows.append((np.array([1.0, np.nan, 2.0], F32), 0))
    rows.append((np.array([-0.0, 0.0, np.inf], F32), 1))
    # a negative NaN with a payload: the smallest order key, so the row's maximum is a NaN only
    # through the row's NaN flag (QNAN)
    rows.append((np.array([3.0, np.uint32(0xFFC0_0001).view(F32), -1.0], F32), 2))
    gscale = F32(1 / 8)
    payloads = _sx_payloads(rows)
    got = []

    sim.run(_sx_producer(dut, payloads, gscale, prng, idle),
            _sx_consumer(dut, len(payloads), got, prng, stall), max_cycles=SX_MAX_CYCLES)
    _check_rows(dut, rows, got, gscale)


@pytest.mark.parametrize("units", ["default", "tiny"])
def test_softmax_rows_on_an_idle_unit(units):
    """Rows of 1, 2 and 3 classes, each sent to an idle unit (the next one after the last
    result): EXP reads a row's first word a cycle ahead, in the cycle the row's last word is
    written when the unit is idle -- the same word for a 1-class row. Every result bit-exact
    (without the bypass of that write the port gives the word that was there before)."""
    sim = _softmax_sim(units, False)
    dut = sim.dut
    rng = np.random.default_rng(31)
    rows = []
    for c in (1, 1, 2, 1, 3, 1, 1):
        z = (rng.standard_normal(c) * 4).astype(F32)
        rows.append((z, int(rng.integers(0, c))))
    gscale = F32(1 / 4)
    got = []

    async def tb(ctx):
        ctx.set(dut.gscale, f32_bits(gscale))
        ctx.set(dut.o.ready, 1)
        for z, lab in rows:
            for p in _sx_payloads([(z, lab)]):
                await stream_put(ctx, dut.i, p)
            for _ in range(len(z)):
                payload, = await ctx.tick().sample(dut.o.payload).until(dut.o.valid)
                got.append(payload)
            for _ in range(3):
                await ctx.tick()

    sim.run(tb, max_cycles=SX_MAX_CYCLES)
    _check_rows(dut, rows, got, gscale)


@pytest.mark.parametrize("units, serial_log, read_reg", [("tiny", False, False),
                                                         ("tiny", True, True)])
def test_softmax_output_held_back(units, serial_log, read_reg):
    """Rows sent at full rate while ``o.ready`` stays low for 600 cycles, then every result
    taken: the unit fills up to its bounds (the e FIFO's reservations, the rows in flight, the
    output FIFO's credits) and stops taking input, and loses nothing. Every result
    bit-exact (with either bound one more, results are lost or wrong)."""
    sim = _softmax_sim(units, serial_log, read_reg)
    dut = sim.dut
    rng = np.random.default_rng(41)
    rows = []
    # long rows fill the output FIFO; then short ones (one e FIFO entry each: the rows in
    # flight bound), then long ones again (the e FIFO's bound)
    for c in (16, 16, 16, 16) + (1, 2, 1, 1, 3) * 6 + (16, 3, 16, 9, 16, 16, 12, 16, 16):
        z = (rng.standard_normal(c) * 4).astype(F32)
        rows.append((z, int(rng.integers(0, c))))
    gscale = F32(1 / 2)
    payloads = _sx_payloads(rows)
    got = []

    sim.run(_sx_producer(dut, payloads, gscale),
            _sx_consumer(dut, len(payloads), got, wait=600), max_cycles=SX_MAX_CYCLES)
    _check_rows(dut, rows, got, gscale)


def _timed_run(sim, z, label=0):
    """Rows of ``z`` at full rate, ``o.ready`` held high, on ``sim`` (a :func:`_softmax_sim`,
    from its initial state); returns (cycle of each accepted input, cycle of each output) and
    the outputs."""
    dut = sim.dut
    t_in, t_out, got = [], [], []
    rows, c = z.shape

    async def tb(ctx):
        ctx.set(dut.o.ready, 1)
        ctx.set(dut.gscale, f32_bits(F32(1)))
        cycle, k = 0, 0
        while len(t_out) < z.size:
            if k < z.size:
                ctx.set(dut.i.valid, 1)
                ctx.set(dut.i.payload, {"x": f32_bits(z.flat[k]), "label": label,
                                        "last": int(k % c == c - 1)})
            else:
                ctx.set(dut.i.valid, 0)
            _, _, iv, ir, ov, op = await ctx.tick().sample(dut.i.valid, dut.i.ready,
                                                           dut.o.valid, dut.o.payload)
            if iv and ir:
                t_in.append(cycle)
                k += 1
            if ov:
                t_out.append(cycle)
                got.append(op)
            cycle += 1
            assert cycle < 20 * z.size + 500, "softmax stalled"

    sim.run(tb, max_cycles=SX_MAX_CYCLES)
    return t_in, t_out, got


def test_softmax_label_outside_the_row():
    """A label that is not an element of its row (``>= C``): no onehot term and ``z_y = +0``,
    so ``zt = +0 - max`` (the FP32 subtraction: ``-max``, ``+0`` for a zero max, the canonical
    NaN for a NaN) and ``loss = log(s) - zt``, with ordinary rows around it; the gradients are
    the row's softmax times ``gscale`` (the golden model's with the label's term added back
    gives the same words only where ``p - 1`` is exact, so only ``zt``, ``loss`` and ``s`` are
    compared with the model here, and the gradient of a one-class row: ``p = 1``)."""
    from sim.model.fp32_log import FP32Log
    sim = _softmax_sim("default")
    dut = sim.dut
    rows = [(np.array([0.5, -2.0, 3.0], F32), 7),
            (np.array([1.0, 2.0], F32), 1),
            (np.array([-0.0, -0.0, -0.0, -0.0], F32), 4),
            (np.array([0.0, -1.0], F32), 9),
            (np.array([1.0, np.nan], F32), 2),
            (np.array([-np.inf, -3.0], F32), 5),
            (np.array([2.5], F32), 1)]
    gscale = F32(0.25)
    payloads = _sx_payloads(rows)
    got = []

    sim.run(_sx_producer(dut, payloads, gscale), _sx_consumer(dut, len(payloads), got),
            max_cycles=SX_MAX_CYCLES)
    log = FP32Log(dut.log_config)
    k = 0
    for z, lab in rows:
        out = got[k:k + len(z)]
        k += len(z)
        _, s, zt, loss = softmax_xent(z[None, :], [0], gscale, dut.config, dut.divsqrt_config,
                                      dut.log_config)
        assert {g["sum"] for g in out} == {f32_bits(s[0])}
        if lab < len(z):
            assert {g["zt"] for g in out} == {f32_bits(zt[0]) if lab == 0 else
                                              int(canon(F32(z[lab] - f32_max(z)))[()])}
            continue
        with np.errstate(all="ignore"):
            want_zt = F32(F32(0.0) - f32_max(z))
            log_s = np.array(log(np.array([f32_bits(s[0])], np.int64))["r"],
                             np.int64).astype(np.uint32).view(F32)[0]
            want_loss = F32(log_s - want_zt)
        assert {int(g["zt"]) for g in out} == {int(canon(want_zt)[()])}, (z, lab)
        assert {int(g["loss"]) for g in out} == {int(canon(want_loss)[()])}, (z, lab)
        if len(z) == 1:
            assert int(out[0]["r"]) == f32_bits(gscale)



@pytest.mark.parametrize("units, serial_log, read_reg", [("tiny", False, False),
                                                         ("default", False, False),
                                                         ("default", True, False),
                                                         ("default", True, True)])
def test_softmax_latency_and_throughput(units, serial_log, read_reg):
    """An idle block delivers a row's first gradient exactly ``latency + max(C, lanes)``
    cycles after the row's last logit; 12 rows of 16 classes stream in and out at exactly
    one element per cycle (no bubble between rows after the first row's latency); the results
    are bit-exact. The serial log's rows come ``LOG_SERIAL_LATENCY + 2`` cycles later, and
    with ``read_reg`` three cycles later again (the input's register stage, the e FIFO's
    read register, the output FIFO's head register)."""
    sim = _softmax_sim(units, serial_log, read_reg)
    dut = sim.dut
    plain = mark_used(_softmax(units))                    # its latency only
    assert dut.latency == plain.latency + serial_log * (LOG_SERIAL_LATENCY + 2) + 3 * read_reg
    rng = np.random.default_rng(23)
    z = rng.standard_normal((1, 16)).astype(F32)
    t_in, t_out, got = _timed_run(sim, z)
    assert t_out[0] - t_in[-1] == dut.latency + 16
    z = rng.standard_normal((1, 3)).astype(F32)
    t_in, t_out, got = _timed_run(sim, z)           # again from the initial (idle) state
    assert t_out[0] - t_in[-1] == dut.latency + dut.config.lanes     # short row: lanes slots
    z = rng.standard_normal((12, 16)).astype(F32)
    t_in, t_out, got = _timed_run(sim, z)
    assert t_in == list(range(z.size)), "input stalled"
    assert t_out == list(range(t_out[0], t_out[0] + z.size)), "output not one per cycle"
    _check_rows(dut, [(row, 0) for row in z], got, F32(1))


def test_golden_row_sum_order():
    """The documented order: lanes of slots ``i mod lanes`` (short rows padded with +0), finals
    rotated by ``max(C, lanes) mod lanes``, pairwise tree. Values chosen so that a different
    order gives a different FP32 result."""
    big, one = F32(2.0 ** 24), F32(1.0)
    # 4 lanes, C = 5: part = [big + 0, 1, 1, -big]; finals rotated by 5 mod 4 = 1
    x = np.array([[big, one, one, -big, F32(0)]], F32)
    f = [one, one, -big, big]                                   # part[1], part[2], part[3], part[0]
    want = F32(F32(f[0] + f[1]) + F32(f[2] + f[3]))             # (1 + 1) + (-big + big) = 2
    assert row_sum(x, 4)[0] == want == F32(2)
    unrotated = F32(F32(big + one) + F32(one - big))            # big + (1 - big) = 1
    assert unrotated == F32(1) and lane_sum(x[0], 4) == F32(0)  # ((big + 1) + 1) - big = 0
    # short row: padded to `lanes` slots
    assert row_sum(np.array([[1.5, 2.5]], F32), 8)[0] == F32(4.0)
    with pytest.raises(ValueError, match="power-of-two"):
        row_sum(np.zeros((2, 3), F32), 3)


@pytest.mark.parametrize("lanes, idle, seed", [(8, 0.0, 1), (8, 0.4, 2), (16, 0.3, 3),
                                               (8, 0.1, 4), (32, 0.2, 5)])
def test_row_sum_block_idle_cycles_and_junk(lanes, idle, seed):
    """``hdl.grad.rowsum.row_sum`` alone, bit-exact with the golden ``row_sum``: rows of 1 to
    3 * lanes non-negative values, some subnormal (short ones padded by the feeder with +0 slots), back to back or with
    random idle cycles between slots, and random ``lane``/``x``/``first``/``final`` while
    ``valid`` is low (the contract leaves them free). Catches a lane part selected ahead from
    the idle cycle's ``lane`` instead of the last slot's, or without the result written in
    the same cycle (``lanes`` = adder latency + 1)."""
    from amaranth.hdl import Module, Signal
    from amaranth.lib import wiring
    from amaranth.lib.wiring import In, Out

    from hdl.fp32.config import FP32Config
    from hdl.grad.rowsum import row_sum as hw_row_sum, row_sum_latency

    fc = FP32Config()
    lb = (lanes - 1).bit_length()

    class Harness(wiring.Component):
        valid: In(1)
        x: In(32)
        first: In(1)
        final: In(1)
        lane: In(lb)
        s_valid: Out(1)
        s: Out(32)

        def elaborate(self, platform):
            m = Module()
            v, s = hw_row_sum(m, valid=self.valid, x=self.x, first=self.first,
                              final=self.final, lane=self.lane, lanes=lanes, fp32_config=fc)
            m.d.comb += [self.s_valid.eq(v), self.s.eq(s)]
            return m

    dut = Harness()
    rng = np.random.default_rng(seed)
    prng = random.Random(seed)
    # non-negative values, as the softmax's e = exp(z - mx) (the adders are ``same_sign``):
    # normal ones, and every fourth row subnormal ones whose sums carry into the normal range
    rows = [np.abs(rng.standard_normal(int(rng.integers(1, 3 * lanes + 1)))).astype(F32)
            * (F32(3) if k % 4 else F32(2.0 ** -128)) for k in range(40)]
    want = [row_sum(r[None, :], lanes)[0] for r in rows]
    got, last_slot, sum_at = [], [], []

    async def feed(ctx):
        cycle = 0
        for r in rows:
            slots = max(len(r), lanes)
            for i in range(slots):
                while idle and prng.random() < idle:
                    ctx.set(dut.valid, 0)
                    ctx.set(dut.lane, prng.randrange(lanes))
                    ctx.set(dut.x, prng.getrandbits(32))
                    ctx.set(dut.first, prng.getrandbits(1))
                    ctx.set(dut.final, prng.getrandbits(1))
                    await ctx.tick()
                    cycle += 1
                ctx.set(dut.valid, 1)
                ctx.set(dut.x, int(r[i].view(np.uint32)) if i < len(r) else 0)
                ctx.set(dut.first, i < lanes)
                ctx.set(dut.final, i >= slots - lanes)
                ctx.set(dut.lane, i % lanes)
                if i == slots - 1:
                    last_slot.append(cycle)
                await ctx.tick()
                cycle += 1
        ctx.set(dut.valid, 0)
        for _ in range(row_sum_latency(lanes, fc) + 4):
            await ctx.tick()

    async def watch(ctx):
        cycle = 0
        async for _, _, v, s in ctx.tick().sample(dut.s_valid, dut.s):
            if v:
                got.append(np.uint32(s).view(F32))
                sum_at.append(cycle)
            cycle += 1

    run_sim(dut, feed, processes=[watch], max_cycles=20_000)
    assert len(got) == len(rows)
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.view(np.uint32) == w.view(np.uint32), (k, g, w)
    # every sum exactly row_sum_latency cycles after its row's last slot, whatever the gaps
    # (the last two tree levels share an adder, lanes >= 8, without moving a sum)
    lat = row_sum_latency(lanes, fc)
    assert [t - s for s, t in zip(last_slot, sum_at)] == [lat] * len(rows)
