"""Benchmark of the ring all-reduce: ``python -m sim.bench.collective`` (``make bench-collective``).

Runs one all-reduce of ``--length`` N(0, 1) words on the ring top
(:class:`hdl.multi.ring.CollectiveRing`, default FP32 and BFP presets, links of latency 2 and
FIFO 8) in Amaranth's simulator for N = 2 and 4, 32- and 8-bit flits, plain FP32 words, BFP
groups at mantissa widths 8 and 4, and top-k (the training core's ``TopK()``, 16 of every 256
words, residual starting at zero: the compress, gather and sum passes of
docs/multicore.md). Every run is checked bit for bit against the golden model
(:mod:`sim.model.collective`), every rank must hold the same result and the flit counters must
equal :func:`sim.model.collective.link_flits`. Reported: the response's ``cycles``, the link
bound (``2 (N-1)/N * length * flits per word`` cycles for FP32), flits and bytes per link, the
bytes ratio against FP32 on the same link, and the error (largest ``|result - exact sum|`` over
the largest ``|exact sum|``). Writes ``docs/bench/collective.json`` and
``docs/bench/collective.md``.
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from hdl.fp32.config import FP32Config
from hdl.multi.config import CollComp, CollectiveConfig, LinkConfig, RingConfig, TopK
from hdl.multi.ring import CollectiveRing
from sim.bench.common import publish
from sim.model.collective import CollectiveModel, link_flits
from sim.model.fp32 import bits_to_f32, f32_to_bits
from sim.tb.collective_tb import command, run_ring

MODES = [(CollComp.NONE, 0), (CollComp.BFP, 8), (CollComp.BFP, 4), (CollComp.TOPK, 0)]


def measure(N: int, flit: int, length: int, seed: int = 1) -> list[dict]:
    """One ring, every mode of :data:`MODES` on the same vectors; rows of results."""
    # the vector at 0; top-k: its residual (zeros) at length, the gather buffer at 2 * length
    cc = CollectiveConfig(ranks=N, depth=4 * length, topk=TopK())
    link = LinkConfig(width=flit, latency=2, fifo_depth=8)
    dut = CollectiveRing(config=RingConfig(collective=cc, link=link),
                         fp32_config=FP32Config.preset("default"))
    rng = np.random.default_rng(seed)
    images = [np.concatenate([f32_to_bits(rng.standard_normal(length).astype(np.float32)),
                              np.zeros(3 * length, np.uint32)]) for _ in range(N)]
    exact = np.sum([bits_to_f32(v[:length]).astype(np.float64) for v in images], axis=0)
    rows, plain_flits = [], None
    for comp, width in MODES:
        c = command(base=0, length=length, seg=length // N, timeout=2000, comp=comp,
                    width=width, rbase=length if comp == CollComp.TOPK else 0,
                    gbase=2 * length if comp == CollComp.TOPK else 0)
        run = run_ring(dut, images, [c], deadline=200_000, max_cycles=2_000_000)
        model = CollectiveModel(cc)
        for r in range(N):
            model.mem[r][:] = images[r]
        assert model.allreduce(**c) == 0
        for r in range(N):
            assert np.array_equal(run.memories[r], model.mem[r]), f"rank {r} differs"
            assert np.array_equal(run.memories[r][:length], run.memories[0][:length])
        flits = link_flits(cc, flit, length=length, seg=length // N, comp=comp, width=width)
        assert run.flits == flits, (run.flits, flits)
        if comp == CollComp.NONE:
            plain_flits = flits[0]
        result = bits_to_f32(run.memories[0][:length]).astype(np.float64)
        mode = {CollComp.NONE: "FP32", CollComp.BFP: f"BFP{width}",
                CollComp.TOPK: f"top-k {cc.topk.k}/{cc.topk.seg}"}[comp]
        rows.append({
            "ranks": N, "flit_bits": flit, "length": length, "mode": mode,
            "cycles": max(g["cycles"] for g in run.responses[0]),
            "link_bound": 2 * (N - 1) * (length // N) * (32 // flit),
            "flits_per_link": flits[0], "bytes_per_link": flits[0] * flit // 8,
            "bytes_ratio": flits[0] / plain_flits,
            "error": float(np.max(np.abs(result - exact)) / np.max(np.abs(exact))),
        })
    return rows


def to_markdown(data: dict) -> str:
    lines = ["# Ring all-reduce (`make bench-collective`)", "",
             f"One all-reduce of {data['length']} N(0, 1) words per rank on the ring top "
             "(Amaranth simulator; links latency 2, FIFO 8; default FP32 and BFP presets: "
             "7-cycle adder, groups of 16). Every run bit-exact with the golden model, the same "
             "on every rank, flit counters equal to the model's. `bound`: cycles a link needs "
             "for FP32 words, 2 (N-1)/N x length x flits per word. `ratio`: bytes against FP32 "
             "on the same link. `error`: largest |result - exact| / largest |exact| (top-k: of "
             "one round from a zero residual; what it holds back stays in the residual for "
             "the next round). "
             "docs/multicore.md explains the figures.", "",
             "| N | flit bits | mode | cycles | bound | flits per link | bytes per link | "
             "ratio | error |", "|---|---|---|---|---|---|---|---|---|"]
    for r in data["rows"]:
        lines.append(f"| {r['ranks']} | {r['flit_bits']} | {r['mode']} | {r['cycles']:,} | "
                     f"{r['link_bound']:,} | {r['flits_per_link']:,} | "
                     f"{r['bytes_per_link']:,} | {r['bytes_ratio']:.3f} | {r['error']:.1e} |")
    lines += ["", f"Wall time {data['wall_seconds']} s ({data['machine']})."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--length", type=int, default=256, help="words per rank (multiple of 64)")
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--flits", default="32,8")
    args = ap.parse_args(argv)
    if args.length < 64 or args.length % 64:
        ap.error(f"--length must be a positive multiple of 64, not {args.length}")
    t0 = time.time()
    rows = []
    for N in (int(x) for x in args.ranks.split(",")):
        for flit in (int(x) for x in args.flits.split(",")):
            rows += measure(N, flit, args.length)
    data = {"bench": "collective", "length": args.length, "rows": rows,
            "wall_seconds": round(time.time() - t0, 1), "machine": platform.machine()}
    publish("collective", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
