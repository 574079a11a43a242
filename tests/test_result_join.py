"""The matmul engine's result join (:class:`hdl.array.results.ResultJoin`) on its own: every
output vector leaves with its own descriptor, in order, while the consumer stalls for long
stretches so the descriptor FIFO fills; ``desc.ready`` stays high while fewer than ``depth``
descriptors are held and never lets more in; the lines ahead name the next two descriptors."""
from __future__ import annotations

import numpy as np
import pytest
from amaranth.sim import Simulator

from hdl.array.array import array_out_layout
from hdl.array.config import ArrayConfig
from hdl.array.results import ResultJoin, desc_layout

#: Deadline (cycles) of one run: 200 descriptors with long consumer stalls pass in about
#: 1,500; a join that stops delivering fails here instead of running on.
MAX_CYCLES = 20_000


def _descs(cfg, rng, n):
    dl = desc_layout(cfg)
    lo, hi = -(1 << (cfg.edge_exp_bits - 1)), (1 << (cfg.edge_exp_bits - 1))
    return [{"exp": [int(x) for x in rng.integers(lo, hi, cfg.size)],
             "addr": int(rng.integers(0, cfg.mem_depth)), "mask": int(rng.integers(0, 1 << cfg.size)),
             "first": int(rng.integers(0, 2)), "write": int(rng.integers(0, 2))}
            for _ in range(n)], dl


@pytest.mark.parametrize("size", [2, 4, 8])
def test_result_join_order_room_and_lines_ahead(size):
    """Descriptors offered at random (70 % of cycles), each output vector no earlier than
    ``2S + 1`` cycles after its descriptor was taken (the array's shortest latency), the
    consumer stalled in random stretches of up to 80 cycles: every joined line carries its
    vector's values and its own descriptor, in order; ``desc.ready`` is high in every cycle
    that holds fewer than ``depth`` descriptors, and none more are held (through the write
    register; a directly written FIFO holds up to ``depth + 3``); ``ahead`` names
    the next two lines. (S = 2 writes the FIFO directly, S >= 4 through the write register.)"""
    cfg = ArrayConfig(size=size, mem_depth=256)
    S = cfg.size
    depth = 4 * S + 8
    dut = ResultJoin(config=cfg, depth=depth)
    rng = np.random.default_rng(70 + S)
    n = 200
    descs, dl = _descs(cfg, rng, n)
    vlo = -(1 << (cfg.acc_bits - 1))
    vectors = [[int(x) for x in rng.integers(vlo, -vlo, S, dtype=np.int64)] for _ in range(n)]
    ol = array_out_layout(cfg)
    seen = {"full": 0}
    # most held at once: ``depth`` through the write register (its own count); a FIFO written
    # directly takes more while its block RAM part has room, up to its ``depth + 3`` entries
    most = depth if dut.write_reg else depth + 3
    assert dut.write_reg == (S >= 4)

    async def tb(ctx):
        taken_at, k_d, k_o, stall = [], 0, 0, 0
        for cycle in range(MAX_CYCLES):
            held = k_d - k_o
            assert held <= most, f"cycle {cycle}: {held} descriptors held, at most {most}"
            offer = k_d < n and rng.random() < 0.7
            ctx.set(dut.desc.valid, offer)
            if offer:
                ctx.set(dut.desc.payload, dl.const(descs[k_d]))
            present = (k_o < k_d and cycle >= taken_at[k_o] + 2 * S + 1)
            ctx.set(dut.out.valid, present)
            if present:
                ctx.set(dut.out.payload, ol.const({"value": vectors[k_o]}))
            if stall == 0 and rng.random() < 0.05:
                stall = int(rng.integers(1, 81))
            ctx.set(dut.acc.ready, stall == 0)
            stall = max(0, stall - 1)
            ready = ctx.get(dut.desc.ready)
            if held < depth:
                assert ready, f"cycle {cycle}: desc.ready low with {held} of {depth} held"
            elif not ready:
                seen["full"] += 1
            a = dut.ahead
            if ctx.get(a.head.valid):
                assert k_o < k_d and ctx.get(a.head.addr) == descs[k_o]["addr"], \
                    f"cycle {cycle}: head line"
            if ctx.get(a.next.valid):
                assert k_o + 1 < k_d and ctx.get(a.next.addr) == descs[k_o + 1]["addr"], \
                    f"cycle {cycle}: next line"
            if present and ctx.get(dut.out.ready):
                assert ctx.get(dut.acc.valid)
                got = ctx.get(dut.acc.payload)
                want = descs[k_o]
                assert [int(v) for v in got.value] == vectors[k_o], f"line {k_o}: values"
                assert [int(e) for e in got.exp] == want["exp"], f"line {k_o}: exponents"
                assert (int(got.addr), int(got.mask), int(got.first), int(got.write)) == \
                    (want["addr"], want["mask"], want["first"], want["write"]), f"line {k_o}"
                k_o += 1
            if offer and ready:
                taken_at.append(cycle)
                k_d += 1
            await ctx.tick()
            if k_o == n:
                break
        assert k_o == n, f"only {k_o} of {n} lines joined in {MAX_CYCLES} cycles"

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(tb)
    sim.run()
    # the stalls filled the FIFO until it refused: the full case was exercised
    assert seen["full"] > 0
