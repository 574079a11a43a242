"""Fast tier: the link codecs (hdl/multi/codec.py) through a LinkEndpoint in loopback.

Words go in at the transmit codec and come out of the receive codec: plain words unchanged; in
BFP mode each group as the model's quantize-then-decode (:func:`sim.model.bfp.quantize_group`
with the codec's LFSR draw, :func:`sim.model.bfp.dequantize_group_bits`; a NaN/Inf group as
canonical NaNs), at every width and rounding mode, two flit widths and two group sizes, with
random idle cycles and backpressure. Without either, the pair moves one word per cycle.
"""
import numpy as np
import pytest
from amaranth.hdl import Module
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from hdl.config import BFPConfig
from hdl.multi.codec import LinkRxCodec, LinkTxCodec
from hdl.multi.endpoint import LinkEndpoint
from sim.model import bfp
from sim.tb.amaranth_tb import run_sim, stream_through

QNAN = 0x7FC00000
CFG16 = BFPConfig()                       # G = 16, the ring's
CFG4 = BFPConfig.preset("tiny")           # G = 4
MODES = (bfp.ROUND_NEAREST, bfp.ROUND_STOCHASTIC, bfp.ROUND_TRUNCATE)


class _Loop(wiring.Component):
    """A LinkEndpoint looped back on itself, its mode fixed."""

    def __init__(self, flit_bits, cfg, comp, width, rounding, conv_skid=False):
        self.ends = LinkEndpoint(flit_bits=flit_bits, bfp_config=cfg, conv_skid=conv_skid)
        self.mode = (comp, width, rounding)
        super().__init__({"i": In(stream.Signature(32)), "o": Out(stream.Signature(32))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.ends = e = self.ends
        comp, width, rounding = self.mode
        m.d.comb += [e.mode.comp.eq(comp), e.mode.width.eq(width),
                     e.mode.rounding.eq(rounding), e.loop.eq(1), e.enable.eq(1),
                     e.link_tx.ready.eq(0), e.link_rx.valid.eq(0)]
        wiring.connect(m, wiring.flipped(self.i), e.i)
        wiring.connect(m, e.o, wiring.flipped(self.o))
        return m


def _expected(words, cfg, width, rounding, groups_before=0):
    lfsr = bfp.LFSR(cfg)
    for _ in range(groups_before):
        lfsr.noise()
    out = []
    G = cfg.group_size
    for k in range(0, len(words), G):
        grp = np.array(words[k:k + G], dtype=np.uint32)
        exp, sign, mag, inv, ovf = bfp.quantize_group(grp, cfg, width, rounding, lfsr.noise())
        if inv or ovf:
            out += [QNAN] * G
        else:
            out += [int(x) for x in bfp.dequantize_group_bits(exp, sign, mag, width)]
    return out


def _words(cfg, groups, seed):
    rng = np.random.default_rng(seed)
    vals = bfp.random_fp32_groups(rng, groups, cfg.group_size, special_prob=0.03)
    return [int(w) for w in vals.view(np.uint32).reshape(-1)]


@pytest.mark.parametrize("flit_bits,cfg,conv_skid", [(16, CFG16, False), (8, CFG4, False),
                                                     (32, CFG4, False), (16, CFG4, True),
                                                     (32, CFG4, True)])
@pytest.mark.parametrize("width", [2, 4, 8])
def test_bfp_groups_round_trip_every_mode_with_backpressure(flit_bits, cfg, conv_skid, width):
    """Every width and rounding mode through the looped endpoint under random stalls on both
    sides; also with the skid buffer after the transmit codec's converter (``conv_skid``, the
    FPGA build's)."""
    for rounding in MODES:
        words = _words(cfg, 12, seed=width * 10 + rounding)
        got = stream_through(_Loop(flit_bits, cfg, 1, width, rounding, conv_skid), words,
                             idle_prob=0.3, stall_prob=0.3, seed=rounding)
        want = _expected(words, cfg, width, rounding)
        bad = [k for k, (g, w) in enumerate(zip(got, want)) if g != w]
        assert not bad, [(k, hex(got[k]), hex(want[k])) for k in bad[:5]]


def test_a_nan_or_inf_group_arrives_as_nans_and_sets_the_flags():
    cfg = CFG4
    words = [0x3F800000, 0x7F800000, 0x40000000, 0x00000001,       # an Inf
             0x3F800000, 0x3F000000, 0x80000000, 0x00000000,       # finite
             0x7FC00001, 0x3F800000, 0x3F800000, 0x3F800000]       # a NaN
    got = stream_through(_Loop(16, cfg, 1, 4, bfp.ROUND_NEAREST), words)
    assert got[:4] == [QNAN] * 4 and got[8:] == [QNAN] * 4
    assert got[4:8] == _expected(words[4:8], cfg, 4, bfp.ROUND_NEAREST, groups_before=1)


@pytest.mark.parametrize("conv_skid", [False, True])
def test_plain_words_unchanged(conv_skid):
    """Plain words under random stalls on both sides, also with the FPGA build's converter
    skid: none lost, none duplicated, in order."""
    words = [0, 0xFFFFFFFF, QNAN, 0x80000000] + list(range(1, 60, 3))
    assert stream_through(_Loop(8, CFG16, 0, 4, 0, conv_skid), words, idle_prob=0.4,
                          stall_prob=0.4, seed=3) == words


def _cycles_for(dut, words):
    """Cycles from the first word offered to the last one received, both sides always
    ready."""
    got, span = [], {}

    async def producer(ctx):
        ctx.set(dut.i.valid, 1)
        for w in words:
            ctx.set(dut.i.payload, w)
            await ctx.tick().until(dut.i.ready)
        ctx.set(dut.i.valid, 0)

    async def consumer(ctx):
        ctx.set(dut.o.ready, 1)
        cycle = 0
        while len(got) < len(words):
            *_, valid, payload = await ctx.tick().sample(dut.o.valid, dut.o.payload)
            cycle += 1
            if valid:
                got.append(payload)
        span["cycles"] = cycle

    run_sim(dut, producer, consumer, max_cycles=20_000)
    return span["cycles"], got


@pytest.mark.parametrize("comp,flit_bits,conv_skid", [(1, 16, False), (1, 32, False),
                                                      (0, 32, False), (1, 32, True)])
def test_one_word_per_cycle(comp, flit_bits, conv_skid):
    """48 groups of 16 words at 4 bits (a packet is 6 flits of 16 bits, 3 of 32), or plain
    words on a 32-bit link: the pair keeps up with one word per cycle; only the pipeline's
    fill (a group gathered, converted, sent and decoded) comes on top. The converter's skid
    buffer (``conv_skid``) keeps the rate."""
    words = _words(CFG16, 48, seed=5)
    cycles, got = _cycles_for(_Loop(flit_bits, CFG16, comp, 4, bfp.ROUND_NEAREST, conv_skid),
                              words)
    want = _expected(words, CFG16, 4, bfp.ROUND_NEAREST) if comp else words
    assert got == want
    assert cycles <= len(words) + 2 * CFG16.group_size + 20, cycles


def test_codecs_take_the_same_parameter_checks():
    with pytest.raises(ValueError, match="flit_bits"):
        LinkTxCodec(flit_bits=12, bfp_config=CFG16)
    with pytest.raises(TypeError, match="bfp_config"):
        LinkRxCodec(flit_bits=16, bfp_config=None)
    with pytest.raises(TypeError, match="LinkTxCodec.conv_skid"):
        LinkTxCodec(flit_bits=16, bfp_config=CFG16, conv_skid=1)
    with pytest.raises(TypeError, match="LinkEndpoint.conv_skid"):
        LinkEndpoint(flit_bits=16, bfp_config=CFG16, conv_skid="yes")
