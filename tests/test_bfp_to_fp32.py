"""Fast tier: BFPToFP32 (BFP -> FP32) in Amaranth's simulator, against sim.model.bfp.

Round trip over random groups of every width and mode (the FP32 values equal the exact BFP
values), arbitrary BFP payloads (rounding below the normal range, overflow), the converter and
its inverse chained in hardware, latency and throughput.
"""
import numpy as np
from amaranth.hdl import Module
from amaranth.lib import stream, wiring

from hdl.bfp import BFPConverter, BFPToFP32, fp32_out_layout, fp32_stream_layout
from hdl.config import BFPConfig
from sim.model import bfp
from sim.model.fp32_round import round_to_fp32
from test_bfp_converter import MODES, run_stream

TINY = BFPConfig.preset("tiny")


def exact_value(exp, sign, mag, m):
    """float64 of (-1)**s * M * 2**(E - (m-1)) (exact for |M| < 2**53 in range)."""
    return np.where(np.asarray(sign) == 1, -1.0, 1.0) * np.asarray(mag, float) \
        * np.exp2(float(exp - (m - 1)))


def converted_words(cfg, rng, n):
    """BFP payloads produced by the converter model from random FP32 groups, every width x mode
    (and the FP32 inputs, for the error bound)."""
    model = bfp.BFPConverterModel(cfg)
    vals = bfp.random_fp32_groups(rng, n, cfg.group_size)
    words, srcs = [], []
    for k, v in enumerate(vals):
        w = cfg.widths[k % len(cfg.widths)]
        r = MODES[(k // len(cfg.widths)) % 3]
        words.append(model.accept(bfp.pack_fp32_group(v, cfg, w, r)))
        srcs.append(v)
    return words, srcs


def test_round_trip_exact_every_width_and_mode():
    cfg = TINY
    words, srcs = converted_words(cfg, np.random.default_rng(31), 240)
    res = run_stream(BFPToFP32(config=cfg), words, seed=4, idle=0.3, stall=0.3)
    inverse = bfp.BFPToFP32Model(cfg)
    seen = set()
    for word, src, out in zip(words, srcs, res["out"]):
        assert out == inverse.accept(word)
        g = bfp.unpack_bfp_group(word, cfg)
        bits, inv, ovf = bfp.unpack_fp32_group(out, cfg, with_flags=True)
        assert (inv, ovf) == (g["invalid"], g["overflow"])
        y = bits.view(np.float32).astype(np.float64)
        assert (y == exact_value(g["exp"], g["sign"], g["mag"], g["width"])).all()
        assert ((bits >> 31) == g["sign"]).all()              # signed zeros kept
        if g["rounding"] == bfp.ROUND_NEAREST and not (inv or ovf):
            lsb = 2.0 ** (g["exp"] - (g["width"] - 1))
            err = np.abs(y - src.astype(np.float64))
            sat = g["mag"] == 2 ** g["width"] - 1
            assert (err[~sat] <= lsb / 2).all() and (err[sat] < lsb).all()
        seen.add((g["width"], g["rounding"]))
    assert seen == {(w, r) for w in cfg.widths for r in MODES}


def test_arbitrary_payloads_round_to_nearest_even_and_overflow():
    cfg = TINY
    rng = np.random.default_rng(32)
    G, eb = cfg.group_size, cfg.exp_bits
    words = []
    for k in range(150):
        exp = int(rng.integers(-(1 << (eb - 1)), 1 << (eb - 1)))
        if k % 3 == 0:
            exp = int(rng.integers(-160, -140))            # around the subnormal floor
        elif k % 3 == 1:
            exp = int(rng.integers(120, 140))              # around the overflow threshold
        words.append(bfp.pack_bfp_group(
            exp, rng.integers(0, 2, G), rng.integers(0, 1 << cfg.max_mantissa, G), cfg,
            width=int(rng.integers(0, 16)), rounding=int(rng.integers(0, 4)),
            invalid=bool(rng.integers(2)), overflow=bool(rng.integers(2))))
    # named: ties at the subnormal floor, -0.0, largest finite, first overflow
    named = [(-150, [0, 1, 0, 1], [2, 6, 10, 3], 2),       # {0.5, 1.5, 2.5, 0.75} * 2**-149
             (-149 + 7, [1, 0, 1, 0], [0, 1, 255, 128], 8),
             (127, [0, 1, 0, 0], [255, 255, 1, 0], 8),     # 255 * 2**120 is finite
             (128, [0, 1, 0, 0], [1, 3, 0, 2], 2),         # 2**127, -3 * 2**127 -> -Inf
             (-(1 << (eb - 1)), [0, 0, 1, 1], [255, 1, 2, 3], 8)]
    for exp, s, mg, w in named:
        words.append(bfp.pack_bfp_group(exp, s, mg, cfg, width=w, rounding=0))
    res = run_stream(BFPToFP32(config=cfg), words, seed=5, idle=0.2, stall=0.4)
    inverse = bfp.BFPToFP32Model(cfg)
    for word, out in zip(words, res["out"]):
        assert out == inverse.accept(word)
        g = bfp.unpack_bfp_group(word, cfg)
        m = bfp.decode_width(g["width"], cfg)
        bits = bfp.unpack_fp32_group(out, cfg)
        want = [round_to_fp32(int(s), g["exp"] - (m - 1), int(M))
                for s, M in zip(g["sign"], g["mag"])]
        assert list(bits) == want
    tail = [bfp.unpack_fp32_group(o, cfg).view(np.float32) for o in res["out"][-5:]]
    t = 2.0 ** -149
    assert list(tail[0]) == [0.0, -2 * t, 2 * t, -t]                  # ties to even
    assert list(tail[1][1:]) == [t, -255 * t, 128 * t]
    assert np.signbit(tail[1][0]) and tail[1][0] == 0
    assert tail[2][0] == np.float32(255 * 2.0 ** 120) and np.isfinite(tail[2][0])
    assert tail[3][0] == np.float32(2.0 ** 127) and tail[3][1] == -np.inf


def test_latency_and_one_group_per_cycle():
    dut = BFPToFP32(config=TINY)
    words, _ = converted_words(TINY, np.random.default_rng(33), 30)
    res = run_stream(dut, words)
    assert res["in_cycles"] == list(range(res["in_cycles"][0], res["in_cycles"][0] + 30))
    assert [o - i for i, o in zip(res["in_cycles"], res["out_cycles"])] == [dut.latency] * 30


class Chain(wiring.Component):
    """BFPConverter -> BFPToFP32, connected stream to stream (for the hardware round trip)."""

    def __init__(self, cfg):
        self.conv = BFPConverter(config=cfg)
        self.inv = BFPToFP32(config=cfg)
        self.latency = self.conv.latency + self.inv.latency
        super().__init__({"i": wiring.In(stream.Signature(fp32_stream_layout(cfg))),
                          "o": wiring.Out(stream.Signature(fp32_out_layout(cfg)))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.conv = self.conv
        m.submodules.inv = self.inv
        wiring.connect(m, self.conv.o, self.inv.i)
        wiring.connect(m, wiring.flipped(self.i), self.conv.i)
        wiring.connect(m, self.inv.o, wiring.flipped(self.o))
        return m


def test_converter_then_inverse_in_hardware():
    cfg = TINY
    rng = np.random.default_rng(34)
    vals = bfp.random_fp32_groups(rng, 120, cfg.group_size, special_prob=0.05)
    words = [bfp.pack_fp32_group(v, cfg, cfg.widths[k % 4], MODES[k % 3])
             for k, v in enumerate(vals)]
    res = run_stream(Chain(cfg), words, seed=6, idle=0.25, stall=0.25)
    conv, inv = bfp.BFPConverterModel(cfg), bfp.BFPToFP32Model(cfg)
    for k, (word, out) in enumerate(zip(words, res["out"])):
        assert out == inv.accept(conv.accept(word)), k
