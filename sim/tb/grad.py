"""cocotb testbench of ``grad_unit`` (elementwise, bias gradient, softmax cross-entropy)
against :mod:`sim.model.grad`, with random idle cycles and backpressure. Payloads are packed
with the sub-blocks' own layouts (``EW_IN_LAYOUT``, ``BG_CMD_LAYOUT``, ``SX_IN_LAYOUT``, ... of
:mod:`hdl.grad`) through :mod:`sim.tb.payload`."""
from __future__ import annotations

import json
import os
import random

import cocotb
import numpy as np
from cocotb.triggers import ClockCycles, ReadOnly, RisingEdge

from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.fp32.log_config import FP32LogConfig
from hdl.grad.biasgrad import BG_CMD_LAYOUT, BG_OUT_LAYOUT
from hdl.grad.config import GradConfig
from hdl.grad.elementwise import EW_IN_LAYOUT, EW_OUT_LAYOUT
from hdl.grad.softmax import SX_IN_LAYOUT, SX_OUT_LAYOUT
from sim.model.grad import (EW_OPS, bias_grad, canon, elementwise, softmax_xent, softmax_xent_f64,
                            softmax_tolerance)
from sim.tb.cocotb_stream import StreamDriver, StreamMonitor, reset, start_clock
from sim.tb.payload import pack, unpack

F32 = np.float32


def _bits(a):
    return np.asarray(a, F32).view(np.uint32).astype(np.int64).tolist()


class TB:
    """Drivers/monitors of the three sub-blocks, golden model and scoreboard."""

    def __init__(self, dut, seed=1, idle=0.2, stall=0.3):
        preset = os.environ.get("TESSERA_PRESET", "tiny")
        self.dut = dut
        self.config = GradConfig.preset(preset)
        self.divsqrt = FP32DivSqrtConfig.preset(preset)
        self.log_config = FP32LogConfig.preset(preset)
        self.rng = np.random.default_rng(seed)
        r = random.Random(seed)
        self.ew_i = StreamDriver(dut, "ew_i", idle_prob=idle, rng=random.Random(r.random()))
        self.ew_o = StreamMonitor(dut, "ew_o", stall_prob=stall, rng=random.Random(r.random()))
        self.bg_cmd = StreamDriver(dut, "bg_cmd")
        self.bg_dy = StreamDriver(dut, "bg_dy", idle_prob=idle, rng=random.Random(r.random()))
        self.bg_db = StreamMonitor(dut, "bg_db", stall_prob=stall, rng=random.Random(r.random()))
        self.sx_i = StreamDriver(dut, "sx_i", idle_prob=idle, rng=random.Random(r.random()))
        self.sx_o = StreamMonitor(dut, "sx_o", stall_prob=stall, rng=random.Random(r.random()))

    async def start(self):
        start_clock(self.dut)
        await reset(self.dut)
        for mon in (self.ew_o, self.bg_db, self.sx_o):
            mon.start()

    async def elementwise(self, op, a, b, scale):
        self.dut.ew_op.value = op
        self.dut.ew_scale.value = int(np.array(scale, F32).view(np.uint32))
        payloads = [pack(EW_IN_LAYOUT, {"a": x, "b": y}) for x, y in zip(_bits(a), _bits(b))]
        await self.ew_i.send_all(payloads)
        got = await self.ew_o.wait_for(len(payloads))
        exp = canon(elementwise(op, a, b, scale))
        # raw words: a NaN result must be the canonical 0x7FC00000 (only the golden side,
        # numpy with free NaN payloads, is canonicalised)
        got = np.array([unpack(EW_OUT_LAYOUT, g)["r"] for g in got], np.uint32)
        bad = np.nonzero(got != exp)[0]
        assert len(bad) == 0, (f"op {op}: {len(bad)} mismatches, first a={a[bad[0]]!r} "
                               f"b={b[bad[0]]!r}: {int(got[bad[0]]):#x} != {int(exp[bad[0]]):#x}")

    async def bias_grad(self, dy):
        rows, cols = dy.shape
        await self.bg_cmd.send(pack(BG_CMD_LAYOUT, {"rows": rows, "cols": cols}))
        await self.bg_dy.send_all(_bits(dy.ravel()))
        got = [unpack(BG_OUT_LAYOUT, g) for g in await self.bg_db.wait_for(cols)]
        assert [g["r"] for g in got] == _bits(bias_grad(dy)), f"db {rows}x{cols}"
        assert [g["last"] for g in got] == [0] * (cols - 1) + [1]
        ref = dy.astype(np.float64).sum(axis=0)
        tol = rows * 2.0 ** -24 * np.abs(dy.astype(np.float64)).sum(axis=0)
        assert np.all(np.abs(bias_grad(dy) - ref) <= tol)

    async def softmax(self, z, labels, gscale, *, timing=None):
        """Stream all rows (the block overlaps them) while the monitor collects the gradients;
        check bit-exactness, the ``last`` flags, ``sum``/``zt`` on every element of a row, and
        the stated float64 tolerance. ``timing`` (a dict) receives the simulated times of the
        first and last output."""
        rows, c = z.shape
        self.dut.sx_gscale.value = int(np.array(gscale, F32).view(np.uint32))
        grad, s, zt, loss = softmax_xent(z, labels, gscale, self.config, self.divsqrt,
                                         self.log_config)
        zb = _bits(np.asarray(z, F32).ravel())
        payloads = [pack(SX_IN_LAYOUT, {"x": zb[r * c + j], "label": labels[r], "last": j == c - 1})
                    for r in range(rows) for j in range(c)]
        sender = cocotb.start_soon(self.sx_i.send_all(payloads))
        first = await self.sx_o.wait_for(1)
        t_first = _now()
        got = first + await self.sx_o.wait_for(rows * c - 1)
        t_last = _now()
        await sender
        if timing is not None:
            timing.update(first=t_first, last=t_last)
        g = [unpack(SX_OUT_LAYOUT, x) for x in got]
        r_bits = np.array([x["r"] for x in g], np.uint64).reshape(rows, c)
        last = np.array([x["last"] for x in g]).reshape(rows, c)
        got_s = np.array([x["sum"] for x in g], np.uint32).reshape(rows, c)
        got_zt = np.array([x["zt"] for x in g], np.uint32).reshape(rows, c)
        got_loss = np.array([x["loss"] for x in g], np.uint32).reshape(rows, c)
        bad = np.argwhere(r_bits != canon(grad))       # raw hardware words
        assert len(bad) == 0, (f"softmax grad {rows}x{c}: {len(bad)} mismatches, first at "
                               f"{tuple(bad[0])}")
        want_last = np.zeros((rows, c), int)
        want_last[:, -1] = 1
        assert np.array_equal(last, want_last), "softmax last flags"
        assert np.array_equal(got_s, np.repeat(canon(s)[:, None], c, 1)), "softmax sum"
        assert np.array_equal(got_zt, np.repeat(canon(zt)[:, None], c, 1)), "softmax zt"
        assert np.array_equal(got_loss, np.repeat(canon(loss)[:, None], c, 1)), "loss"
        # stated tolerance vs float64 (docs/datapaths.md), finite rows only
        ok = np.all(np.isfinite(z), axis=1)
        if ok.any():
            g64, loss64 = softmax_xent_f64(z[ok], labels[ok], float(gscale))
            grad_tol, loss_tol = softmax_tolerance(c, gscale, zt[ok], loss64)
            assert np.abs(grad[ok] - g64).max() <= grad_tol
            hw_loss = got_loss[:, 0].view(F32)[ok].astype(np.float64)
            assert np.all(np.abs(hw_loss - loss64) <= loss_tol), "loss vs float64"


def _now():
    return cocotb.utils.get_sim_time("ns") // 10


SPECIALS = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1.17549435e-38,
                     3.4028235e38, -3.4028235e38, 1.0, -1.0], F32)


@cocotb.test()
async def elementwise_random(dut):
    """Every op: 2,000 random pairs (normal, subnormal, huge) plus all special pairs."""
    tb = TB(dut, seed=1)
    await tb.start()
    rng = tb.rng
    for op in EW_OPS:
        a = (rng.standard_normal(2000) * 10.0 ** rng.uniform(-40, 38, 2000)).astype(F32)
        b = (rng.standard_normal(2000) * 10.0 ** rng.uniform(-40, 38, 2000)).astype(F32)
        sa, sb = np.meshgrid(SPECIALS, SPECIALS)
        a = np.concatenate([a, sa.ravel()])
        b = np.concatenate([b, sb.ravel()])
        await tb.elementwise(op, a, b, F32(rng.uniform(-4, 4)))


@cocotb.test()
async def bias_grad_random(dut):
    """Batches with short rows (adder-loop pauses), long rows and one row."""
    tb = TB(dut, seed=2)
    await tb.start()
    for rows, cols in ((16, 3), (32, tb.config.max_cols), (1, 7), (64, 10), (5, 1)):
        await tb.bias_grad((tb.rng.standard_normal((rows, cols)) * 3).astype(F32))
    # invalid command: dropped, sticky error
    assert dut.bg_error.value == 0
    await tb.bg_cmd.send(pack(BG_CMD_LAYOUT, {"rows": 0, "cols": 4}))
    await ClockCycles(dut.clk, 2)
    assert dut.bg_error.value == 1


@cocotb.test()
async def softmax_random(dut):
    """Rows streamed back to back (overlapping in the block) with random idle cycles and
    backpressure: 512 rows of 10 classes, 24 rows of max_classes, rows shorter than the lane
    count (1..7 classes), extreme logits, NaN/Inf rows; bit-exact with the golden model, within
    the stated tolerance of float64."""
    tb = TB(dut, seed=3)
    await tb.start()
    rng = tb.rng
    z = (rng.standard_normal((512, 10)) * 4).astype(F32)
    await tb.softmax(z, rng.integers(0, 10, 512), F32(1 / 512))
    c = tb.config.max_classes
    z = (rng.standard_normal((24, c)) * 20).astype(F32)
    await tb.softmax(z, rng.integers(0, c, 24), F32(2.0 ** 10 / 24))   # loss scale 2**10
    for c in range(1, 8):
        z = (rng.standard_normal((20, c)) * 3).astype(F32)
        await tb.softmax(z, rng.integers(0, c, 20), F32(1 / 20))
    z = np.array([[80.0, -80.0, 0.0, 1e-30], [-1e30, -1e30, -1e30, -1e30],
                  [3.0, 3.0, 3.0, 3.0], [-0.0, 0.0, -0.0, 0.0], [1e-45, -1e-45, 0, 88.0],
                  [np.nan, 1.0, 2.0, 3.0], [np.inf, 1.0, 2.0, 3.0], [-np.inf, 1.0, 2.0, 3.0],
                  [-np.inf] * 4, [3e38, -3e38, 3e38, 0.0]], F32)
    await tb.softmax(z, np.array([0, 2, 3, 1, 3, 1, 0, 2, 1, 2]), F32(1 / 3))


@cocotb.test()
async def reset_mid_softmax(dut):
    """Reset while rows are in every stage (LOAD, EXP, OUT) under heavy backpressure, then a
    correct run."""
    tb = TB(dut, seed=4, stall=0.9)
    await tb.start()
    z = (tb.rng.standard_normal((6, 40)) * 4).astype(F32)
    sender = cocotb.start_soon(tb.sx_i.send_all(
        [pack(SX_IN_LAYOUT, {"x": x, "label": 3, "last": j % 40 == 39})
         for j, x in enumerate(_bits(z.ravel()))]))
    await ClockCycles(dut.clk, 150)
    sender.cancel()
    dut.sx_i__valid.value = 0
    await reset(dut)
    tb.sx_o.queue.clear()
    tb.sx_o.stall_prob = 0.3
    z = (tb.rng.standard_normal((40, 12)) * 4).astype(F32)
    await tb.softmax(z, tb.rng.integers(0, 12, 40), F32(0.25))


async def softmax_row_latency(tb, z, label) -> int:
    """One row into the idle softmax block, ``sx_o`` always ready: cycles from the transfer of
    the row's last logit to the first cycle with ``sx_o.valid`` (the published
    ``latency + max(C, lanes)``); the row's results are checked."""
    dut = tb.dut
    c = len(z)
    dut.sx_gscale.value = int(np.array(F32(1), F32).view(np.uint32))
    zb = _bits(z)
    payloads = [pack(SX_IN_LAYOUT, {"x": zb[j], "label": label, "last": j == c - 1})
                for j in range(c)]
    await ClockCycles(dut.clk, 5)
    cycle, k, t_last = 0, 0, None
    while True:
        if k < c:
            dut.sx_i__valid.value = 1
            dut.sx_i__payload.value = payloads[k]
        else:
            dut.sx_i__valid.value = 0
        await ReadOnly()
        if k < c and dut.sx_i__ready.value == 1:
            t_last = cycle
            k += 1
        if dut.sx_o__valid.value == 1:
            break
        await RisingEdge(dut.clk)
        cycle += 1
        assert cycle < 1000, "no softmax output"
    await RisingEdge(dut.clk)
    dut.sx_i__valid.value = 0
    got = await tb.sx_o.wait_for(c)
    grad = softmax_xent(z[None, :], [label], F32(1), tb.config, tb.divsqrt, tb.log_config)[0]
    assert [unpack(SX_OUT_LAYOUT, g)["r"] for g in got] == \
        canon(grad[0]).tolist(), "softmax row (latency run)"
    return cycle - t_last


@cocotb.test(skip=os.environ.get("TESSERA_BENCH_OUT") is None)
async def bench_throughput(dut):
    """Latency and elements/cycle of each sub-block without stalls (JSON to
    ``$TESSERA_BENCH_OUT``). Softmax: ``elements_per_cycle`` over the whole run (fill and
    drain included) and ``steady_elements_per_cycle`` between the first and the last output."""
    from hdl.registry import get_block
    preset = os.environ.get("TESSERA_PRESET", "tiny")
    lat = get_block("grad_unit").params(preset)["latencies"]
    tb = TB(dut, seed=5, idle=0.0, stall=0.0)
    await tb.start()
    out = {"block": "grad_unit", "preset": preset, "latency": lat,
           "config": tb.config.to_dict()}

    n = 2000
    a = tb.rng.standard_normal(n).astype(F32)
    t0 = _now()
    await tb.elementwise(0, a, a, F32(1))
    out["elementwise"] = {"n": n, "cycles": int(_now() - t0),
                          "elements_per_cycle": n / (_now() - t0)}
    dy = tb.rng.standard_normal((64, 32)).astype(F32)
    t0 = _now()
    await tb.bias_grad(dy)
    out["biasgrad_64x32"] = {"cycles": int(_now() - t0),
                             "elements_per_cycle": dy.size / (_now() - t0)}
    for c in (16, 3):
        z = tb.rng.standard_normal(c).astype(F32)
        measured = await softmax_row_latency(tb, z, 1)
        published = lat["softmax"] + max(c, tb.config.lanes)
        assert measured == published, f"softmax row latency {measured}, published {published}"
        out[f"softmax_row_latency_{c}"] = {"cycles": measured, "published": published}
    for rows, c in ((64, 10), (64, 16), (16, tb.config.max_classes)):
        z = tb.rng.standard_normal((rows, c)).astype(F32)
        timing = {}
        t0 = _now()
        await tb.softmax(z, tb.rng.integers(0, c, rows), F32(1 / rows), timing=timing)
        out[f"softmax_{rows}x{c}"] = {
            "cycles": int(_now() - t0), "elements_per_cycle": z.size / (_now() - t0),
            "steady_elements_per_cycle": (z.size - 1) / (timing["last"] - timing["first"])}
    with open(os.environ["TESSERA_BENCH_OUT"], "w") as f:
        json.dump(out, f, indent=2)
