"""Data-parallel digits training with link compression, **in the golden model**:
``python -m sim.bench.distributed`` (``make bench-distributed``).

``N`` golden-model training cores (:class:`sim.host.dataparallel.DataParallel`) train the
digits MLP on the same shuffled global batches; the gradient regions cross the links as plain
FP32 words, BFP groups (mantissa 8 and 4) or top-k pairs with error feedback (16 of every 256
words), for N = 2 and 4 (``--ranks``). Reported per N and compression: the bytes ratio of the links against plain FP32 ring all-reduces (32-bit flits),
the final test accuracy (float32 inference with rank 0's weights; every rank holds the same
bits, checked each epoch) and the mean training loss of the last epoch. These are golden-model
results: there is no RTL multi-core top yet (docs/multicore.md). Writes
``docs/bench/distributed.json`` and ``docs/bench/distributed.md``.
"""
from __future__ import annotations

import argparse
import platform
import time

import numpy as np

from hdl.core.config import CoreConfig
from sim.bench.common import publish
from sim.host.compiler import MLP
from sim.host.dataparallel import DataParallel
from sim.host.digits import epoch_batches, load_digits
from sim.host.optim import Adam
from sim.model.compress import TopK
from sim.model.reference import forward

#: ``(label, compression, width, TopK)`` of every run.
RUNS = [("fp32", "none", 0, None), ("bfp8", "bfp", 8, None), ("bfp4", "bfp", 4, None),
        ("topk 16/256", "topk", 0, TopK(seg=256, k=16))]


def run(label, compression, width, topk, *, ranks, epochs, batch, seed) -> dict:
    data = load_digits()
    rng = np.random.default_rng(seed)
    layers = (64, 64, 10)
    W = [(rng.standard_normal((a, b)) * np.sqrt(2.0 / a)).astype(np.float32)
         for a, b in zip(layers, layers[1:])]
    b = [np.zeros(n, np.float32) for n in layers[1:]]
    desc = MLP(layers=layers, batch=batch, optimizer=Adam(lr=3e-3))
    dp = DataParallel(desc, CoreConfig(), ranks, compression=compression, width=width or 8,
                      topk=topk)
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


def to_markdown(data: dict) -> str:
    lines = ["# Data-parallel digits training with link compression (golden model)", "",
             f"MLP 64-64-10, Adam 3e-3, global batch {data['batch']}, {data['epochs']} epochs, "
             f"seed {data['seed']}; N golden-model cores (`sim/host/dataparallel.py`). "
             "Golden-model results: no RTL multi-core top yet.",
             "Bytes ratio: link bytes over those of plain FP32 ring all-reduces "
             "(32-bit flits).", "",
             "| N | compression | bytes ratio | test accuracy | last-epoch loss |",
             "|---|---|---|---|---|"]
    for r in data["compression"]:
        lines.append(f"| {r['ranks']} | {r['compression']} | {r['bytes_ratio']:.4f} | "
                     f"{r['test_accuracy']:.4f} | {r['last_epoch_loss']:.4f} |")
    lines += ["", f"Wall time {data['wall_seconds']} s ({data['machine']})."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="2,4", help="comma-separated core counts")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    t0 = time.time()
    ranks = [int(x) for x in args.ranks.split(",")]
    rows = [run(*spec, ranks=n, epochs=args.epochs, batch=args.batch, seed=args.seed)
            for n in ranks for spec in RUNS]
    data = {"bench": "distributed", "model": "golden", "ranks": ranks,
            "epochs": args.epochs, "batch": args.batch, "seed": args.seed,
            "compression": rows, "wall_seconds": round(time.time() - t0, 1),
            "machine": platform.machine()}
    publish("distributed", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
