"""Data-parallel digits training with link compression, **in the golden model**:
``python -m sim.bench.distributed`` (``make bench-distributed``).

``N`` golden-model training cores (:class:`sim.host.dataparallel.DataParallel`) train the
digits MLP on the same shuffled global batches; the gradient regions cross the links as plain
FP32 words, BFP groups (mantissa 8, 4 and 2; at 4 and 2 also rounded stochastically with each
rank's converter LFSR instead of to nearest even) or top-k pairs with error feedback (16 of
every 256 words), for N = 2 and 4 (``--ranks``). Reported per N and compression: the bytes ratio of the links against plain FP32 ring all-reduces (32-bit flits),
the final test accuracy (float32 inference with rank 0's weights; every rank holds the same
bits, checked each epoch) and the mean training loss of the last epoch. These are golden-model
runs (the RTL multi-core top ``training_ring`` equals the golden model bit for bit on
data-parallel steps with FP32 and BFP links: tests/test_training_ring*.py).

Scaling (key ``scaling`` and the top-level ``weak_scaling_efficiency`` /
``strong_scaling_efficiency`` per N): the RTL multi-core top in Verilator,
:mod:`sim.bench.scaling` (``--no-rtl`` skips it).

Pipeline parallelism (key ``pipeline``, :mod:`sim.host.pipeline`): the digits MLP 64-64-10 on
``p = 2`` stages and 64-64-64-10 on ``p = 3``, ``m = 1, 2, 4, 8`` micro-batches of the batch:
one step checked bit-identical to one core running the same micro-batches, the stages'
forward / backward array beats per micro-batch from the golden model, and the bubble fraction
of the simulated GPipe and 1F1B timelines (link latency 0 and ``--latency``) against ``(p - 1)
/ (m + p - 1)``; the same timeline with every stage given the mean duration ("equal stages");
the peak of stashed micro-batches (stage 0) and their words. Writes
``docs/bench/distributed.json`` and ``docs/bench/distributed.md``.
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from hdl.core.config import CoreConfig
from sim.bench.common import publish
from sim.bench.scaling import BATCH, run_point, run_scaling
from sim.bench.scaling import to_markdown as scaling_markdown
from sim.host.compiler import MLP, compile_mlp
from sim.host.dataparallel import DataParallel
from sim.model.bfp import ROUND_NEAREST, ROUND_STOCHASTIC
from sim.host.digits import epoch_batches, load_digits
from sim.host.optim import Adam
from sim.host.pipeline import Pipeline, bubble_formula, timeline
from sim.model.compress import TopK
from sim.model.core import CoreModel
from sim.model.reference import forward

#: ``(label, compression, width, TopK, rounding)`` of every run (rounding of the BFP links'
#: converters, ``sim.model.bfp.ROUND_*``).
RUNS = [("fp32", "none", 0, None, ROUND_NEAREST), ("bfp8", "bfp", 8, None, ROUND_NEAREST),
        ("bfp4", "bfp", 4, None, ROUND_NEAREST),
        ("bfp4 stochastic", "bfp", 4, None, ROUND_STOCHASTIC),
        ("bfp2", "bfp", 2, None, ROUND_NEAREST),
        ("bfp2 stochastic", "bfp", 2, None, ROUND_STOCHASTIC),
        ("topk 16/256", "topk", 0, TopK(seg=256, k=16), ROUND_NEAREST)]


def run(label, compression, width, topk, rounding, *, ranks, epochs, batch, seed) -> dict:
    data = load_digits()
    rng = np.random.default_rng(seed)
    layers = (64, 64, 10)
    W = [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
         for a, b in zip(layers, layers[1:])]
    b = [np.zeros(n, np.float32) for n in layers[1:]]
    desc = MLP(layers=layers, batch=batch, optimizer=Adam(lr=3e-3))
    dp = DataParallel(desc, CoreConfig(), ranks, compression=compression, width=width or 8,
                      topk=topk, rounding=rounding)
    dp.init(W, b)
    t, losses = 0, []
    for epoch in range(epochs):
        losses = []
        for idx in epoch_batches(len(data.y_train), batch, seed, epoch):
            t += 1
            out = dp.step(data.x_train[idx], data.y_train[idx], t)
            losses.append(out["loss"])
        ref = dp.read(0)["params"]
        for r in range(1, ranks):
            if not np.array_equal(dp.read(r)["params"], ref):
                raise AssertionError(f"{label}: rank {r} parameters differ after epoch {epoch}")
    Ws, bs = dp.params(0)
    zs, _ = forward(Ws, bs, data.x_test, np.float32)
    acc = float(np.mean(np.argmax(zs[-1], axis=1) == data.y_test))
    return {"ranks": ranks, "compression": label, "bytes_ratio": round(dp.bytes_ratio, 4),
            "test_accuracy": round(acc, 4), "last_epoch_loss": round(float(np.mean(losses)), 4),
            "steps": t}


#: ``(layers, stages)`` of the pipeline runs.
PIPELINES = [((64, 64, 10), 2), ((64, 64, 64, 10), 3)]
MICRO_BATCHES = (1, 2, 4, 8)


def pipeline_run(layers, stages, m, *, batch, seed, latency) -> dict:
    """One pipeline step on a digits batch, checked against one core; its timelines."""
    data = load_digits()
    rng = np.random.default_rng(seed)
    W = [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
         for a, b in zip(layers, layers[1:])]
    b = [np.zeros(n, np.float32) for n in layers[1:]]
    desc = MLP(layers=layers, batch=batch, micro_batches=m, optimizer=Adam(lr=3e-3))
    x = data.x_train[:batch, :layers[0]]
    y = data.y_train[:batch]
    one = compile_mlp(desc)
    core = CoreModel(CoreConfig())
    core.apply(one.init_actions(W, b))
    want = core.apply(one.step_actions(x, y, 1) + one.read_actions())
    out = {"layers": "-".join(map(str, layers)), "stages": stages, "micro_batches": m,
           "formula": round(bubble_formula(stages, m), 4)}
    for schedule in ("gpipe", "1f1b"):
        pl = Pipeline(desc, CoreConfig(), stages, schedule=schedule)
        pl.init(W, b)
        pl.step(x, y, 1)
        got = pl.read()
        Ws, bs = one.decode_params(want)
        if not all(np.array_equal(u.view(np.uint32), v.view(np.uint32)) for u, v in
                   zip(Ws + bs, got["params"]["W"] + got["params"]["b"])):
            raise AssertionError(f"pipeline {out['layers']} m={m} {schedule}: parameters "
                                 f"differ from one core")
        tl, tl_lat = pl.timeline(), pl.timeline(latency=latency)
        out[schedule] = {"bubble": round(tl["bubble"], 4),
                         "bubble_latency": round(tl_lat["bubble"], 4),
                         "makespan": tl["makespan"], "peak_stash": tl["peak_stash"],
                         "peak_stash_words": [n * w for n, w in zip(tl["peak_stash"],
                                                                      pl.stash_words)]}
    out["beats"] = [list(d) for d in pl.durations]
    out["link_words"] = pl.link_words
    mean = sum(f + g for f, g in pl.durations) / stages
    f = max(1, round(mean / 3))
    eq = timeline([f] * stages, [round(mean) - f] * stages, m)
    out["equal_stages_bubble"] = round(eq["bubble"], 4)
    return out


#: link compressions measured on the RTL ring: ``(label, TB_COMP)``; BFP at 4-bit mantissas
#: (the step compiled with the gradient region in whole groups: 4,944 words instead of 4,940)
#: ``(label, compression, per_layer)`` of the RTL rows: one ALLREDUCE after the backward
#: pass, or (``per_layer``) one per layer's gradient block, each started while the earlier
#: layers are still in their backward pass.
COMPRESSIONS_RTL = (("fp32", "none", False), ("bfp4", "bfp", False),
                    ("topk 16/256", "topk", False), ("fp32 per layer", "none", True),
                    ("bfp4 per layer", "bfp", True), ("topk 16/256 per layer", "topk", True))


def run_compression_rtl(ranks, *, log=print) -> list[dict]:
    """One data-parallel step of the digits MLP per ``N`` and link compression on the RTL
    ring (``training_ring`` in Verilator, global batch :data:`sim.bench.scaling.BATCH`,
    widths 8, checked bit for bit against the golden model by the testbench): step cycles,
    the collective engine's cycles and the share of them hidden behind other units' work,
    flits per link and the bytes ratio against FP32 links (the first row of each ``N``)."""
    rows = []
    for n in ranks:
        plain = None
        for label, comp, per_layer in COMPRESSIONS_RTL:
            p = run_point(n, BATCH // n, comp=comp, per_layer=per_layer)
            flits = max(p["flits"])
            plain = plain or flits
            busy = max(p["coll_busy"])
            rows.append({"ranks": n, "compression": label, "per_layer": per_layer,
                         "step_cycles": p["step_cycles"], "coll_cycles": busy,
                         "hidden_fraction": round(max(p["coll_hidden"]) / busy, 4),
                         "link_flits": flits, "link_width": p["link_width"],
                         "bytes_ratio": round(flits / plain, 4)})
            log(f"compression on the RTL ring: N = {n}, {label}: {rows[-1]}")
    return rows


def compression_rtl_markdown(rows) -> list[str]:
    out = ["## Link compression on the RTL ring", "",
           f"One data-parallel step of the MLP 64-64-10 (Adam, widths 8, global batch {BATCH}) "
           "on N S = 4 cores of `training_ring` in Verilator, every step checked bit for bit "
           "against the golden model. `coll cycles`: the collective engine's busy cycles (top-k: "
           "the compress and sum passes too). Bytes ratio: link flits against FP32 links in the "
           "same run (16-bit flits). With BFP links the step is compiled with the gradient "
           "region in whole groups of 16 (4,944 words instead of 4,940). `per layer`: one "
           "ALLREDUCE per layer's gradient block, issued as soon as the backward pass has "
           "written it, so it runs beside the earlier layers' backward passes; `hidden`: the "
           "share of the collective engine's busy cycles in which another unit was busy too "
           "(the core's `coll_hidden` counter).", "",
           "| N | compression | step cycles | coll cycles | hidden | flits per link | "
           "bytes ratio |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        hidden = r.get("hidden_fraction")
        out.append(f"| {r['ranks']} | {r['compression']} | {r['step_cycles']:,} | "
                   f"{r['coll_cycles']:,} | "
                   f"{'–' if hidden is None else format(hidden, '.3f')} | "
                   f"{r['link_flits']:,} | {r['bytes_ratio']:.4f} |")
    return out


def to_markdown(data: dict) -> str:
    lines = ["# Data-parallel training: link compression (golden model), RTL scaling, "
             "pipeline parallelism", "",
             "## Link compression (golden model)", "",
             f"MLP 64-64-10, Adam 3e-3, global batch {data['batch']}, {data['epochs']} epochs, "
             f"seed {data['seed']}; N golden-model cores (`sim/host/dataparallel.py`; the RTL "
             "top `training_ring` equals them bit for bit, tests/test_training_ring*.py).",
             "Bytes ratio: link bytes over those of plain FP32 ring all-reduces "
             "(32-bit flits).", "",
             "| N | compression | bytes ratio | test accuracy | last-epoch loss |",
             "|---|---|---|---|---|"]
    for r in data["compression"]:
        lines.append(f"| {r['ranks']} | {r['compression']} | {r['bytes_ratio']:.4f} | "
                     f"{r['test_accuracy']:.4f} | {r['last_epoch_loss']:.4f} |")
    if data.get("compression_rtl"):
        lines += [""] + compression_rtl_markdown(data["compression_rtl"])
    if data.get("scaling"):
        lines += [""] + scaling_markdown(data["scaling"])
    lines += ["", "## Pipeline parallelism (golden model)", "",
              f"Batch {data['batch']} in m micro-batches; each step checked bit-identical to "
              "one core running the same micro-batches. Stage durations: the golden model's "
              "array beats per micro-batch pass (forward, backward) of each stage. Bubble: "
              "idle fraction of the simulated timeline (link latency 0; "
              f"`lat` = {data['latency']} cycles). Equal stages: every stage given the mean "
              "duration. Peak stash: micro-batches stage 0 holds at once.", "",
              "| MLP | p | m | (p-1)/(m+p-1) | equal stages | GPipe | GPipe lat | 1F1B | "
              "1F1B lat | stage beats (F, B) | peak stash GPipe / 1F1B |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in data["pipeline"]:
        g, o = r["gpipe"], r["1f1b"]
        beats = " ".join(f"({f}, {b})" for f, b in r["beats"])
        lines.append(f"| {r['layers']} | {r['stages']} | {r['micro_batches']} | "
                     f"{r['formula']:.4f} | {r['equal_stages_bubble']:.4f} | "
                     f"{g['bubble']:.4f} | {g['bubble_latency']:.4f} | {o['bubble']:.4f} | "
                     f"{o['bubble_latency']:.4f} | {beats} | "
                     f"{g['peak_stash'][0]} / {o['peak_stash'][0]} |")
    lines += ["", f"Wall time {data['wall_seconds']} s ({data['machine']})."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4", help="comma-separated core counts")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--latency", type=int, default=64,
                    help="pipeline link latency (cycles) of the second timeline")
    ap.add_argument("--no-rtl", action="store_true",
                    help="skip the RTL scaling runs (Verilator builds of the multi-core top)")
    ap.add_argument("--only-compression-rtl", action="store_true",
                    help="rerun only the RTL link-compression section and keep the rest of "
                         "docs/bench/distributed.json")
    ap.add_argument("--only-compression-model", action="store_true",
                    help="rerun only the golden-model link-compression section (accuracy after "
                         "training) and keep the rest of docs/bench/distributed.json")
    args = ap.parse_args(argv)
    t0 = time.time()
    ranks = [int(x) for x in args.ranks.split(",")]
    if args.only_compression_rtl or args.only_compression_model:
        import json
        from sim.bench.common import DOCS_BENCH
        data = json.loads((DOCS_BENCH / "distributed.json").read_text())
        if args.only_compression_model:
            data["compression"] = [run(*spec, ranks=n, epochs=args.epochs, batch=args.batch,
                                       seed=args.seed) for n in ranks for spec in RUNS]
            data.update(epochs=args.epochs, batch=args.batch, seed=args.seed,
                        compression_seconds=round(time.time() - t0, 1))
        if args.only_compression_rtl:
            t1 = time.time()
            data["compression_rtl"] = run_compression_rtl(ranks)
            data["compression_rtl_seconds"] = round(time.time() - t1, 1)
        publish("distributed", data, to_markdown(data))
        return 0
    rows = [run(*spec, ranks=n, epochs=args.epochs, batch=args.batch, seed=args.seed)
            for n in ranks for spec in RUNS]
    pipe = [pipeline_run(layers, p, m, batch=args.batch, seed=args.seed, latency=args.latency)
            for layers, p in PIPELINES for m in MICRO_BATCHES]
    scaling = None if args.no_rtl else run_scaling(tuple(ranks))
    comp_rtl = None if args.no_rtl else run_compression_rtl(ranks)
    data = {"bench": "distributed", "model": "golden", "ranks": ranks,
            **({} if scaling is None else {
                "scaling": scaling,
                "weak_scaling_efficiency": scaling["weak_scaling_efficiency"],
                "strong_scaling_efficiency": scaling["strong_scaling_efficiency"]}),
            **({} if comp_rtl is None else {"compression_rtl": comp_rtl}),
            "pipeline": pipe, "latency": args.latency,
            "epochs": args.epochs, "batch": args.batch, "seed": args.seed,
            "compression": rows, "wall_seconds": round(time.time() - t0, 1),
            "machine": platform.machine()}
    publish("distributed", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
