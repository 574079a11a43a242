"""Fast tier: the multi-core link (hdl/multi/link.py): credits, serialisation, backpressure."""
import random

import pytest
from amaranth.hdl import Fragment, Module
from amaranth.lib import stream

from hdl.lib.mustuse import mark_used
from hdl.multi.config import CollectiveConfig, LinkConfig, RingConfig
from hdl.multi.link import Link, LinkGate, connect_ring
from sim.tb.amaranth_tb import run_sim, stream_through


# (width, latency, fifo_depth): full word, serialised 2 / 4 / 32 flits, no wire latency,
# a one-entry FIFO (one flit in flight), a long wire with too few credits for full rate
LINKS = [(32, 2, 8), (16, 2, 4), (8, 1, 6), (1, 1, 4), (32, 0, 1), (16, 0, 1), (32, 5, 3)]


def _words(n, seed):
    rng = random.Random(seed)
    edge = [0, 0xFFFFFFFF, 0x80000000, 0x7FC00000, 1]
    return edge + [rng.getrandbits(32) for _ in range(n - len(edge))]


@pytest.mark.parametrize("width,latency,depth", LINKS)
@pytest.mark.parametrize("idle,stall", [(0.0, 0.0), (0.5, 0.6)])
def test_link_delivers_every_word_once_in_order(width, latency, depth, idle, stall):
    words = _words(40, seed=width * 100 + latency)
    link = Link(config=LinkConfig(width=width, latency=latency, fifo_depth=depth))
    assert stream_through(link, words, idle_prob=idle, stall_prob=stall, seed=7) == words


def _timed_transfer(config: LinkConfig, n: int, *, stall_seed=None):
    """Send ``n`` words back to back (receiver always ready unless ``stall_seed``); return the
    cycles from the first offer to the last word received, the flit count and overflow."""
    link = Link(config=config)
    words = _words(n, seed=3)
    got, out = [], {}
    rng = random.Random(stall_seed)

    async def producer(ctx):
        for w in words:
            ctx.set(link.i.valid, 1)
            ctx.set(link.i.payload, w)
            await ctx.tick().until(link.i.ready)
        ctx.set(link.i.valid, 0)

    async def consumer(ctx):
        cycles = 0
        while len(got) < n:
            ready = stall_seed is None or rng.random() < 0.3
            ctx.set(link.o.ready, ready)
            _, _, valid, payload = await ctx.tick().sample(link.o.valid, link.o.payload)
            cycles += 1
            if valid and ready:
                got.append(int(payload))
        out.update(cycles=cycles, flits=ctx.get(link.flits), overflow=ctx.get(link.overflow))

    run_sim(link, producer, consumer, max_cycles=20_000)
    assert got == words
    return out


def test_link_full_rate_when_credits_cover_the_round_trip():
    """fifo_depth >= 2 * latency + 2 sustains a flit per cycle (LinkConfig.full_rate);
    fewer credits throttle to fifo_depth flits per round trip."""
    n, lat = 64, 3
    fast = LinkConfig(width=32, latency=lat, fifo_depth=2 * lat + 2)
    assert fast.full_rate
    r = _timed_transfer(fast, n)
    assert r["cycles"] <= n + lat + 2, r
    # one credit fewer than the round trip is not full rate: the bound is tight
    r = _timed_transfer(LinkConfig(width=32, latency=lat, fifo_depth=2 * lat + 1), n)
    assert r["cycles"] > n + lat + 2, r
    slow = LinkConfig(width=32, latency=lat, fifo_depth=2)
    assert not slow.full_rate
    r = _timed_transfer(slow, n)
    round_trip = 2 * lat + 2
    assert r["cycles"] >= (n // 2) * round_trip - round_trip, r
    ser = LinkConfig(width=8, latency=lat, fifo_depth=2 * lat + 2)
    r = _timed_transfer(ser, n)                         # 4 flits per word
    assert 4 * n <= r["cycles"] <= 4 * n + lat + 3, r
    assert r["flits"] == 4 * n


@pytest.mark.parametrize("width,latency,depth", [(32, 2, 1), (8, 3, 2)])
def test_link_never_overflows_under_backpressure(width, latency, depth):
    r = _timed_transfer(LinkConfig(width=width, latency=latency, fifo_depth=depth), 32,
                        stall_seed=5)
    assert r["overflow"] == 0
    assert r["flits"] == 32 * (32 // width)


def test_link_gate_blocks_while_stalled():
    gate = LinkGate(width=8)

    async def bench(ctx):
        ctx.set(gate.i.valid, 1)
        ctx.set(gate.o.ready, 1)
        ctx.set(gate.stall, 1)
        await ctx.delay(1e-9)
        assert ctx.get(gate.o.valid) == 0 and ctx.get(gate.i.ready) == 0
        ctx.set(gate.stall, 0)
        await ctx.delay(1e-9)
        assert ctx.get(gate.o.valid) == 1 and ctx.get(gate.i.ready) == 1

    run_sim(gate, bench, max_cycles=10)


def test_connect_ring_joins_rank_r_to_r_plus_1():
    m = Module()
    txs = [stream.Signature(32).create(path=(f"tx{r}",)) for r in range(3)]
    rxs = [stream.Signature(32).flip().create(path=(f"rx{r}",)) for r in range(3)]
    links = connect_ring(m, txs, rxs, LinkConfig())
    assert [type(x) for x in links] == [Link] * 3
    frag = Fragment.get(m, None)          # elaborates: every connection is legal
    assert sorted(name for _, name, _ in frag.subfragments) == ["link0", "link1", "link2"]
    with pytest.raises(ValueError, match="same length"):
        connect_ring(mark_used(Module()), txs, rxs[:2], LinkConfig())
    with pytest.raises(ValueError, match="at least 2"):
        connect_ring(mark_used(Module()), txs[:1], rxs[:1], LinkConfig())


def test_constructors_check_their_arguments():
    """(Config fields: tests/test_config_errors.py.)"""
    assert RingConfig.preset("tiny").collective == CollectiveConfig.preset("tiny")
    assert RingConfig.preset("tiny-n4").collective.ranks == 4
    assert RingConfig.preset("tiny-n4").link == RingConfig.preset("tiny").link
    for bad in ("tiny-n", "tiny-nx", "small-n4", 4):
        with pytest.raises(ValueError, match="RingConfig preset"):
            RingConfig.preset(bad)
    with pytest.raises(ValueError, match="preset"):
        RingConfig.preset("huge")
    with pytest.raises(TypeError, match="config must be a LinkConfig"):
        Link(config=CollectiveConfig())
    with pytest.raises(ValueError, match="LinkGate.width"):
        LinkGate(width=0)
