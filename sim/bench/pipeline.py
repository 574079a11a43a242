"""Pipeline parallelism on the RTL ring, measured in cycles: ``python -m sim.bench.pipeline``
(``make bench-pipeline``).

The digits MLP 64-64-10, and 64-32-64-48-10 (two nearly equal stages), with Adam and mantissa
width 8, in two stages on the two S = 4 cores of the
multi-core top ``training_ring`` (preset ``tiny``: 16-bit links of latency 2) in Verilator,
and 64-48-40-40-10 in three nearly equal stages (64 x 48 | 48 x 40 | 40 x 40, 40 x 10 and the
softmax) on three cores with reverse links (preset ``tiny-n3-rev``; the gradients go back on
the reverse links), and 64-40-40-40-40-10 in four stages (64 x 40 | 40 x 40 | 40 x 40 |
40 x 40, 40 x 10 and the softmax) on four (``tiny-n4-rev``):
:class:`sim.host.pipeline_ring.RingPipeline`, GPipe (``m = 1, 2, 4, 8``) and 1F1B
(``m = 2, 4, 8``), batch 32 in ``m`` micro-batches, each core running one program per step whose ``SENDRECV`` s carry the
activations and gradients (cocotb ``bench_pipeline`` in ``sim/tb/training_ring.py``; every
step checked bit-exactly against the golden model's ring while it is measured). Per ``m``:

* ``step_cycles``: the measured step's run cycles (START to done), the slower core;
* per stage ``busy``: the cycles in which the matmul engine, the vector unit or the optimizer
  runs (``cycles - check_cycles - idle - (coll_busy - coll_hidden)``); ``coll_only``: the
  cycles only the collective engine runs (a ``SENDRECV`` waiting for the other stage or
  moving words while nothing else runs);
* ``bubble``: ``1 - sum(busy) / (p * step_cycles)``, the idle fraction of the two cores over
  the step, against ``(p - 1) / (m + p - 1)`` and against the golden model's timeline
  of the same stages' array beats on an S = 4 core (:meth:`sim.host.pipeline.Pipeline.timeline`:
  matmul passes only; equal to the formula for equal stages);
* ``speedup``: the single training core's step on the same batch (``sim.bench.scaling``,
  one-pass ``OPT`` program) over ``step_cycles``.

The measured bubble includes what the model's timeline leaves out: the stages' unequal vector
and optimizer work, the ``VEC COPY`` s of the inbox and the stash, the ``OPT`` at the end of
the step, the links' transfer time and the program check. Writes
``docs/bench/pipeline.json`` and ``docs/bench/pipeline.md``; ``--networks`` runs some of the
MLPs and keeps the other MLPs' points from the existing JSON.
"""
from __future__ import annotations

import argparse
import json
import platform
import time

from sim.bench.common import DOCS_BENCH, publish
from sim.bench.scaling import _bench, run_point
from sim.host.pipeline import Pipeline, bubble_formula

__all__ = ["run_micro", "main"]

#: The MLPs measured: the digits MLP (unequal stages: 64 x 64 | 64 x 10 and the softmax) and a
#: deeper one whose two stages do nearly equal matmul work (64 x 32, 32 x 64 | 64 x 48 with its
#: BWD_DATA, 48 x 10; 64-64-64-64-10 does not fit one S = 4 core at batch 32, the reference).
NETWORKS = ((64, 64, 10), (64, 32, 64, 48, 10), (64, 48, 40, 40, 10),
            (64, 40, 40, 40, 40, 10))
#: Stages and stage boundaries per MLP (default: two stages, as even as possible): the
#: three-stage MLP's matmul work per micro-batch (FWD + BWD_WEIGHT, + BWD_DATA after the first
#: layer) is 2 x 64 x 48 = 6144 | 3 x 48 x 40 = 5760 | 3 x 40 x 40 + 3 x 40 x 10 = 6000; the
#: four-stage one's 2 x 64 x 40 = 5120 | 4800 | 4800 | 4800 + 3 x 40 x 10 = 6000.
STAGES = {(64, 48, 40, 40, 10): (3, (0, 1, 2, 4)),
          (64, 40, 40, 40, 40, 10): (4, (0, 1, 2, 3, 5))}
BATCH = 32
#: ``(schedule, m)`` of the measured points.
POINTS = [("gpipe", 1), ("gpipe", 2), ("gpipe", 4), ("gpipe", 8),
          ("1f1b", 2), ("1f1b", 4), ("1f1b", 8)]


def stages_of(layers) -> tuple:
    """``(p, bounds)`` of an MLP (:data:`STAGES`; else two stages, ``bounds`` ``None``)."""
    return STAGES.get(tuple(layers), (2, None))


def run_micro(layers, m: int, *, schedule: str = "gpipe", width: int = 8) -> dict:
    """One measured pipeline step of the MLP ``layers`` at ``m`` micro-batches, one stage per
    core (two cores, or :data:`STAGES` on a ring with reverse links); the derived figures."""
    name = "-".join(map(str, layers))
    p, bounds = stages_of(layers)
    preset = "tiny" if p == 2 else f"tiny-n{p}-rev"
    r = _bench("training_ring", preset, "sim.tb.training_ring", "bench_pipeline",
               f"pipeline_{name}_{schedule}_m{m}_w{width}",
               {"TB_LAYERS": ",".join(map(str, layers)), "TB_BATCH": str(BATCH),
                "TB_MICRO": str(m), "TB_BENCH_WIDTH": str(width), "TB_SCHEDULE": schedule,
                **({"TB_BOUNDS": ",".join(map(str, bounds))} if bounds else {})})
    busy = [c - k - i - (cb - ch) for c, k, i, cb, ch in
            zip(r["cycles"], r["check_cycles"], r["idle"], r["coll_busy"], r["coll_hidden"])]
    step = max(r["cycles"])
    return {"layers": name, "stages": p, "schedule": schedule, "micro_batches": m,
            "stash_slots": r["stash_slots"],
            "step_cycles": step, "run_cycles": r["cycles"],
            "busy": busy, "coll_only": [cb - ch for cb, ch in zip(r["coll_busy"],
                                                                   r["coll_hidden"])],
            "matmul_busy": r["matmul_busy"], "vector_busy": r["vector_busy"],
            "optim_busy": r["optim_busy"], "array_beats": r["array_beats"],
            "bubble": round(1 - sum(busy) / (p * step), 4),
            "bubble_formula": round(bubble_formula(p, m), 4),
            "program_lengths": r["program_lengths"], "flits": r["flits"],
            "flits_rev": r["flits_rev"]}


def model_bubble(layers, m: int, schedule: str = "gpipe") -> float:
    """The golden model's bubble of array beats for the same stages (S = 4, tiny)."""
    p, bounds = stages_of(layers)
    import dataclasses

    import numpy as np

    from hdl.core.config import CoreConfig
    from sim.host.compiler import MLP
    from sim.host.optim import Adam
    cfg = dataclasses.replace(CoreConfig.preset("tiny"), ranks=p, reverse_links=p > 2)
    desc = MLP(layers=layers, batch=BATCH, micro_batches=m, optimizer=Adam(lr=3e-3))
    pl = Pipeline(desc, cfg, p, schedule=schedule, bounds=bounds)
    rng = np.random.default_rng(0)
    pl.init([(rng.standard_normal((a, b)) * 0.1).astype(np.float32)
             for a, b in zip(layers, layers[1:])], [np.zeros(b, np.float32) for b in layers[1:]])
    pl.step(rng.standard_normal((BATCH, layers[0])).astype(np.float32),
            rng.integers(0, layers[-1], BATCH), 1, precision=8)
    return round(pl.timeline()["bubble"], 4)


def to_markdown(data: dict) -> str:
    lines = ["# Pipeline parallelism on the RTL ring", "",
             f"MLPs {', '.join(data['networks'])} (Adam, widths {data['width']}) "
             f"in p stages on p S = {data['S']} cores of `training_ring` "
             f"(16-bit links of latency 2; preset `tiny` for p = 2, `tiny-n<p>-rev` for "
             f"p > 2, whose gradients go back on the reverse links) in Verilator, "
             f"batch {data['batch']} "
             "in `m` micro-batches; every step checked bit-exactly against the golden model. "
             "busy = cycles the matmul engine, vector unit or optimizer of a stage runs; "
             "coll only = cycles only its collective engine runs (a `SENDRECV` waiting or "
             "moving words); bubble = 1 - sum(busy) / (p x step cycles). model = the golden "
             "model's timeline of the schedule with array beats (matmul passes only). stash = "
             "the stash slots per stage. speedup = one core's "
             "step of the same MLP on the same batch "
             f"({', '.join(f'{k}: {v}' for k, v in data['one_core_cycles'].items())} cycles) "
             "/ step cycles. "
             "Regenerate with `make bench-pipeline` (docs/multicore.md, \"Pipeline parallelism "
             "on the ring\").", "",
             "flits: per link (link r leaves core r), then per reverse link.", "",
             "| MLP | p | schedule | m | step cycles | busy (per stage) | coll only (per stage) | "
             "bubble | (p-1)/(m+p-1) | model (array beats) | speedup | stash | "
             "flits (links; reverse links) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def per(v):
        return ", ".join(map(str, v))

    for r in data["points"]:
        rev = f"; {per(r['flits_rev'])}" if r.get("flits_rev") else ""
        lines.append(f"| {r['layers']} | {r.get('stages', 2)} | {r['schedule']} | "
                     f"{r['micro_batches']} | {r['step_cycles']} | "
                     f"{per(r['busy'])} | {per(r['coll_only'])} | {r['bubble']:.4f} | "
                     f"{r['bubble_formula']:.4f} | {r['bubble_model']:.4f} | "
                     f"{r['speedup']:.3f} | {per(r['stash_slots'])} | "
                     f"{per(r['flits'])}{rev} |")
    lines += ["", f"Wall time of the last run {data['wall_seconds']} s ({data['machine']}; "
                  f"`--networks` reruns some MLPs and keeps the others' points)."]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", default=",".join(f"{s}:{m}" for s, m in POINTS),
                    help="comma-separated schedule:micro-batches points")
    ap.add_argument("--networks", default=",".join("-".join(map(str, n)) for n in NETWORKS),
                    help="comma-separated MLPs (e.g. 64-64-10); the others' points are kept "
                         "from the existing docs/bench/pipeline.json")
    ap.add_argument("--width", type=int, default=8)
    args = ap.parse_args(argv)
    t0 = time.time()
    nets = [tuple(int(v) for v in n.split("-")) for n in args.networks.split(",")]
    names = ["-".join(map(str, n)) for n in NETWORKS]
    for n in nets:
        if n not in NETWORKS:
            ap.error(f"--networks: {'-'.join(map(str, n))} is not one of {names}")
    old = DOCS_BENCH / "pipeline.json"
    prev = json.loads(old.read_text()) if old.exists() else {}
    keep = [p for p in prev.get("points", []) if tuple(map(int, p["layers"].split("-")))
            not in nets and p.get("width") == args.width]
    one = {k: v for k, v in prev.get("one_core_cycles", {}).items()
           if tuple(map(int, k.split("-"))) not in nets} if isinstance(
        prev.get("one_core_cycles"), dict) else {}
    points = []
    for layers in nets:
        name = "-".join(map(str, layers))
        one[name] = run_point(1, BATCH, width=args.width,
                              layers=",".join(map(str, layers)))["step_cycles"]
        for point in args.points.split(","):
            schedule, m = point.split(":")
            m = int(m)
            r = run_micro(layers, m, schedule=schedule, width=args.width)
            r["width"] = args.width
            r["bubble_model"] = model_bubble(layers, m, schedule)
            r["speedup"] = round(one[name] / r["step_cycles"], 4)
            print(f"pipeline {name} {schedule} m={m}: {r['step_cycles']} cycles, bubble "
                  f"{r['bubble']} (formula {r['bubble_formula']}, model {r['bubble_model']}), "
                  f"speedup {r['speedup']}")
            points.append(r)
    points = sorted(keep + points, key=lambda p: (names.index(p["layers"]),
                                                 p["schedule"] != "gpipe", p["micro_batches"]))
    data = {"bench": "pipeline", "networks": [n for n in names if n in one], "batch": BATCH,
            "width": args.width, "S": 4,
            "stages": {n: stages_of(tuple(map(int, n.split("-"))))[0] for n in names
                       if n in one}, "one_core_cycles": one,
            "points": points, "wall_seconds": round(time.time() - t0, 1),
            "machine": platform.machine()}
    publish("pipeline", data, to_markdown(data))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
