"""hdl.lib.blockfifo: BufferedFIFO, BlockFIFO and RegBlockFIFO (also with ``ahead``) against a
Python queue under random writes and reads (Amaranth simulator): the same entries in order,
capacity ``depth``, an entry readable exactly ``VISIBLE`` cycles after its write, the entry
after the head on ``n_data`` exactly when it is readable too, and reads back to back at full
rate; every memory marked ``no_rw_check``, the block kinds' for block RAM."""
import random
from collections import deque

import pytest
from amaranth.back import rtlil

from hdl.lib.blockfifo import BlockFIFO, BufferedFIFO, RegBlockFIFO
from sim.tb.amaranth_tb import run_sim



class AheadFIFO(RegBlockFIFO):
    """RegBlockFIFO with ``ahead`` (its own class so that the tables below can name it)."""

    def __init__(self, *, width, depth):
        super().__init__(width=width, depth=depth, ahead=True)


class DecoupledFIFO(RegBlockFIFO):
    """RegBlockFIFO with ``decouple``."""

    def __init__(self, *, width, depth):
        super().__init__(width=width, depth=depth, decouple=True)


KINDS = [BufferedFIFO, BlockFIFO, RegBlockFIFO, AheadFIFO, DecoupledFIFO]
STAGED = (AheadFIFO, DecoupledFIFO)
#: entries below ``depth`` under which each kind always takes a write
SLACK = {BufferedFIFO: 0, BlockFIFO: 0, RegBlockFIFO: 2, AheadFIFO: 3, DecoupledFIFO: 3}


@pytest.mark.parametrize("kind, depth", [
    pytest.param(k, d, id=f"{k.__name__}-{d}") for k in KINDS for d in (3, 4, 5, 16)
    if not (k in STAGED and d < 4)])         # a second stage needs depth >= 4 (tested below)
@pytest.mark.parametrize("seed", [1, 2])
def test_random_traffic_matches_a_queue(kind, depth, seed):
    rng = random.Random(seed * 100 + depth)
    dut = kind(width=12, depth=depth)
    written, read = [], []
    n = 400

    async def tb(ctx):
        queue = deque()                   # (value, first cycle it may be read)
        cycle = 0
        while len(read) < n:
            w_en = len(written) < n and rng.random() < 0.6
            r_en = rng.random() < 0.6
            value = rng.randrange(1 << 12)
            ctx.set(dut.w_en, w_en)
            ctx.set(dut.w_data, value)
            ctx.set(dut.r_en, r_en)
            # capacity and visibility as the class promises
            visible = sum(1 for _ in _prefix(queue, cycle))
            # room before this cycle's read: BlockFIFO takes an entry whenever it holds fewer
            # than depth; RegBlockFIFO at least when fewer than depth - 2 (depth - 3 with
            # ahead: entries moving towards the empty stages still count against the block RAM
            # part)
            room = bool(ctx.get(dut.w_rdy))
            assert not room or len(queue) < depth
            if len(queue) < depth - SLACK[kind]:
                assert room == (len(queue) < depth)
            assert ctx.get(dut.r_rdy) == (visible > 0), (cycle, queue)
            assert ctx.get(dut.level) == len(queue)
            if visible:
                assert ctx.get(dut.r_data) == queue[0][0]
            if kind is AheadFIFO:
                # the entry after the head, as soon as it is readable
                assert ctx.get(dut.n_rdy) == (visible > 1), (cycle, queue)
                if visible > 1:
                    assert ctx.get(dut.n_data) == queue[1][0]
            if r_en and visible:
                read.append(queue.popleft()[0])
            if w_en and room:
                queue.append((value, cycle + kind.VISIBLE))
                written.append(value)
            await ctx.tick()
            cycle += 1
            assert cycle < 20 * n, "no progress"

    run_sim(dut, tb)
    assert read == written[:n]


def _prefix(queue, cycle):
    for _, ready_at in queue:
        if ready_at > cycle:
            return
        yield 1


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_back_to_back_reads_at_full_rate(kind):
    """Filled, then read every cycle: one entry per cycle, no gap."""
    dut = kind(width=8, depth=8)

    async def tb(ctx):
        for v in range(8):
            ctx.set(dut.w_en, 1)
            ctx.set(dut.w_data, v + 1)
            await ctx.tick()
        ctx.set(dut.w_en, 0)
        for _ in range(kind.VISIBLE):
            await ctx.tick()
        ctx.set(dut.r_en, 1)
        got = []
        for _ in range(8):
            assert ctx.get(dut.r_rdy)
            got.append(ctx.get(dut.r_data))
            await ctx.tick()
        assert got == list(range(1, 9))
        assert not ctx.get(dut.r_rdy) and ctx.get(dut.level) == 0

    run_sim(dut, tb)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.__name__)
def test_memory_is_marked_for_block_ram_and_without_collision_logic(kind):
    dut = kind(width=8, depth=8)
    text = rtlil.convert(dut, ports=[dut.w_data, dut.w_en, dut.r_en, dut.r_data])
    assert ('attribute \\ram_style "block"' in text) == (kind is not BufferedFIFO)
    assert "attribute \\no_rw_check 1" in text


@pytest.mark.parametrize("depth", [0, 2, 2.5, True])
def test_reg_block_fifo_depth_is_checked(depth):
    with pytest.raises(ValueError, match="RegBlockFIFO depth must be an integer >= 3"):
        RegBlockFIFO(width=8, depth=depth)


def test_reg_block_fifo_ahead_is_checked():
    with pytest.raises(ValueError, match="RegBlockFIFO depth must be an integer >= 4 with ahead"):
        RegBlockFIFO(width=8, depth=3, ahead=True)
    with pytest.raises(TypeError, match="RegBlockFIFO ahead must be a bool"):
        RegBlockFIFO(width=8, depth=8, ahead=1)


def test_reg_block_fifo_decouple_is_checked():
    with pytest.raises(ValueError,
                       match="RegBlockFIFO depth must be an integer >= 4 with decouple"):
        RegBlockFIFO(width=8, depth=3, decouple=True)
    with pytest.raises(TypeError, match="RegBlockFIFO decouple must be a bool"):
        RegBlockFIFO(width=8, depth=8, decouple=1)
    with pytest.raises(ValueError, match="RegBlockFIFO ahead and decouple are exclusive"):
        RegBlockFIFO(width=8, depth=8, ahead=True, decouple=True)


@pytest.mark.parametrize("seed", [3, 4])
def test_decouple_reads_the_block_ram_part_only_from_registers(seed):
    """With ``decouple`` the block RAM part's read enable follows only state: set against
    the stages' registers every cycle, whatever ``r_en`` is (without it, a read of a full
    head refills it from the block RAM part in the same cycle)."""
    rng = random.Random(seed)
    dut = DecoupledFIFO(width=8, depth=8)

    async def tb(ctx):
        inner = dut._inner_for_test
        for cycle in range(300):
            ctx.set(dut.w_en, rng.random() < 0.6)
            ctx.set(dut.w_data, rng.randrange(256))
            r_en = rng.random() < 0.6
            ctx.set(dut.r_en, r_en)
            expect = ctx.get(inner.r_rdy) and not ctx.get(dut._next_valid_for_test)
            assert ctx.get(inner.r_en) == expect, cycle
            await ctx.tick()

    run_sim(dut, tb)
