"""Training-run benchmark (``make bench-train``): the digits MLP trained in the Verilated core.

    python -m sim.bench.train [--parts speed,cycles,accuracy] [--epochs 10]

Three parts, each merged into ``docs/bench/train.json`` (so one part can be re-measured alone);
``docs/bench/train.md`` and the plots in ``docs/bench/train/`` are regenerated from the JSON:

* **speed** -- simulated cycles per second of the training run (Python at step boundaries:
  batch, START, wait, losses, counters) beside the *bare C++ loop* replaying the very same
  recorded host commands on the same Verilated core with no Python
  (``build/verilated/<preset>/tessera_core_bare``), measured one after the other in this
  process: ``sim_speed_ratio`` = run / bare, per S.
* **cycles** -- cycles per training step at widths 2, 4 and 8 at S = 4 and 8, with the
  breakdown from the core's counters (array, vector, optimizer busy, overlap, idle, host I/O)
  and ``mac_bound_cycles`` = useful MACs x beat cycles / S^2 (the array alone, fully busy).
* **accuracy** -- full runs (default 10 epochs, S = 8) at fixed 8-bit widths and at the mixed
  schedule (:data:`sim.host.schedule.MIXED`), each with the golden model beside the RTL
  (memories compared after every epoch and at the end, losses and status every step), and the
  float32 reference on the same batches: ``test_accuracy``, ``reference_accuracy``, curves,
  time to train one epoch.
"""
from __future__ import annotations

import argparse
import json
import platform
import shutil
import subprocess
import time
from pathlib import Path

from hdl.core.config import CoreConfig
from sim.bench.common import DOCS_BENCH, write_json, write_markdown
from sim.host.schedule import MIXED
from sim.host.train import PRESET_OF_SIZE, TrainSpec, train

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "build" / "bench-train"
PLOTS = DOCS_BENCH / "train"
PARTS = ("speed", "cycles", "accuracy")


def _git_head() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                       cwd=ROOT)
    return r.stdout.strip() or "unknown"


def _core(size):
    from sim.verilated.core import VerilatedCore
    return VerilatedCore(CoreConfig.preset(PRESET_OF_SIZE[size]))


def speed(sizes, steps: int = 12) -> dict:
    """Training-run speed vs the bare C++ loop on the same commands."""
    from sim.verilated.core import Recorder
    out = {}
    for size in sizes:
        core = _core(size)
        core.recorder = Recorder()
        spec = TrainSpec(size=size, widths="8", epochs=1, steps_per_epoch=steps)
        res = train(spec, WORK / f"speed-S{size}", progress=False, plots=False,
                    log=lambda *a: None, core=core)
        rec = WORK / f"speed-S{size}.cmds"
        core.recorder.save(rec)
        bare = subprocess.run([str(core.build_dir / "tessera_core_bare"), str(rec)],
                              capture_output=True, text=True, check=True)
        b = json.loads(bare.stdout)
        s = res.summary
        out[str(size)] = {
            "steps": steps, "width": 8,
            "run_cycles": s["sim_cycles"], "run_seconds": round(s["wall_seconds"], 3),
            "run_cycles_per_second": round(s["sim_cycles_per_second"]),
            "bare_cycles": b["cycles"], "bare_seconds": round(b["seconds"], 3),
            "bare_cycles_per_second": round(b["cycles_per_second"]),
            "sim_speed_ratio": round(s["sim_cycles_per_second"] / b["cycles_per_second"], 3),
        }
        print(f"speed S={size}: run {s['sim_cycles_per_second']:.0f} cycles/s, bare "
              f"{b['cycles_per_second']:.0f} cycles/s, ratio "
              f"{out[str(size)]['sim_speed_ratio']:.3f}", flush=True)
        core.close()
    return out


def cycles(sizes, widths=(2, 4, 8), steps: int = 2) -> dict:
    """Cycles per step and breakdown per (S, width): the last of ``steps`` steps."""
    out = {}
    for size in sizes:
        core = _core(size)
        for w in widths:
            spec = TrainSpec(size=size, widths=str(w), epochs=1, steps_per_epoch=steps)
            res = train(spec, WORK / f"cycles-S{size}-w{w}", progress=False, plots=False,
                        log=lambda *a: None, core=core)
            st = res.steps[-1]
            row = {k: st[k] for k in ("step_cycles", "run_cycles", "host_io_cycles",
                                      "mac_bound_cycles", "array_busy", "vector_busy",
                                      "optim_busy", "overlap", "idle", "array_stalls")}
            row["step_over_mac_bound"] = round(st["step_cycles"] / st["mac_bound_cycles"], 3)
            out.setdefault(str(size), {})[str(w)] = row
            print(f"cycles S={size} w={w}: {row['step_cycles']} per step, MAC bound "
                  f"{row['mac_bound_cycles']} ({row['step_over_mac_bound']:.2f}x)", flush=True)
        core.close()
    return out


def accuracy(size: int, epochs: int, schedules=("8", "mixed")) -> dict:
    out = {}
    PLOTS.mkdir(parents=True, exist_ok=True)
    for sched in schedules:
        run_dir = WORK / f"acc-S{size}-{sched}"
        if run_dir.exists():
            shutil.rmtree(run_dir)
        spec = TrainSpec(size=size, widths=sched, epochs=epochs, check_every=44)
        t0 = time.time()
        res = train(spec, run_dir, progress=False, log=lambda m: print(m, flush=True))
        if res.interrupted:
            raise KeyboardInterrupt
        s = res.summary
        ep = res.epochs
        out[sched] = {
            "schedule": str(spec.schedule), "epochs": epochs, "steps": len(res.steps),
            "test_accuracy": s["test_accuracy"], "reference_accuracy": s["reference_accuracy"],
            "accuracy_gap_points": round(100 * (s["reference_accuracy"] - s["test_accuracy"]),
                                         2),
            "golden_checked": s["golden_checked"], "golden_checks": s["golden_checks"],
            "sim_cycles": s["sim_cycles"], "wall_seconds": round(time.time() - t0, 1),
            "sim_cycles_per_second": round(s["sim_cycles_per_second"]),
            "epoch_seconds": [round(e["wall_seconds"], 1) for e in ep],
            "epoch_sim_cycles": [e["sim_cycles"] for e in ep],
            "curve": [{"epoch": e["epoch"] + 1, "width": e["width"], "loss": e["loss"],
                       "ref_loss": e["ref_loss"], "test_accuracy": e["test_accuracy"],
                       "reference_accuracy": e["reference_accuracy"]} for e in ep],
        }
        for png in ("loss.png", "accuracy.png", "cycles.png"):
            if (run_dir / png).exists():
                shutil.copy(run_dir / png, PLOTS / f"{sched}-{png}")
    return out


def to_markdown(d: dict) -> str:
    lines = ["# Training run: the digits MLP in the Verilated training core", "",
             "Generated by `make bench-train` (`sim/bench/train.py`) from "
             "`docs/bench/train.json`. MLP 64-64-10, batch 32, Adam (lr 3e-3), scikit-learn "
             "digits (1,437 train / 360 test images, fixed split), every training step executed "
             "by the generated Verilog in Verilator.", ""]
    acc = d.get("accuracy", {})
    if acc:
        lines += ["## Accuracy (RTL vs float32 reference on the same batches)", "",
                  "| schedule | epochs | test accuracy (RTL) | float32 reference | gap (points) "
                  "| golden model | sim cycles | wall s | s / epoch |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for k, r in acc.items():
            per = sum(r["epoch_seconds"]) / max(1, len(r["epoch_seconds"]))
            lines.append(f"| {r['schedule']} | {r['epochs']} | {100 * r['test_accuracy']:.2f} % "
                         f"| {100 * r['reference_accuracy']:.2f} % | {r['accuracy_gap_points']} "
                         f"| {'bit-exact, ' + str(r['golden_checks']) + ' checks' if r['golden_checked'] else 'not run'} "
                         f"| {r['sim_cycles']:,} | {r['wall_seconds']} | {per:.1f} |")
        lines += ["", "Curves: " + ", ".join(f"[{k} {p}](train/{k}-{p}.png)" for k in acc
                                               for p in ("accuracy", "loss", "cycles")), ""]
    sp = d.get("speed", {})
    if sp:
        lines += ["## Simulation speed (training run vs bare C++ loop, same commands)", "",
                  "| S | steps | run cycles/s | bare C++ loop cycles/s | ratio |",
                  "|---|---|---|---|---|"]
        for size, r in sp.items():
            lines.append(f"| {size} | {r['steps']} | {r['run_cycles_per_second']:,} | "
                         f"{r['bare_cycles_per_second']:,} | {r['sim_speed_ratio']:.3f} |")
        lines.append("")
    cy = d.get("cycles", {})
    if cy:
        lines += ["## Cycles per training step", "",
                  "| S | width | step | MAC bound | step / bound | array busy | vector busy | "
                  "optimizer busy | overlap | idle | host I/O | array stalls |",
                  "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        for size, ws in cy.items():
            for w, r in ws.items():
                lines.append(f"| {size} | {w} | {r['step_cycles']:,} | {r['mac_bound_cycles']:,}"
                             f" | {r['step_over_mac_bound']:.2f} | {r['array_busy']:,} | "
                             f"{r['vector_busy']:,} | {r['optim_busy']:,} | {r['overlap']:,} | "
                             f"{r['idle']:,} | {r['host_io_cycles']:,} | "
                             f"{r['array_stalls']:,} |")
        lines.append("")
    meta = d.get("meta", {})
    if acc and meta.get("accuracy_commit") not in (None, meta.get("cycles_commit")):
        lines += [f"The accuracy runs were measured at commit {meta['accuracy_commit']}, the "
                  f"cycles and speed at {meta.get('cycles_commit')}: hardware changes between "
                  f"them that change timing but no result bit (checked by the test suite against "
                  f"the same golden model) leave the accuracy columns valid, not the accuracy "
                  f"runs' cycle and time columns.", ""]
    if meta:
        lines.append("Measured on " + ", ".join(f"{k} {v}" for k, v in sorted(meta.items()))
                     + ".")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS))
    ap.add_argument("--sizes", default="4,8", help="array sizes of speed and cycles")
    ap.add_argument("--epochs", type=int, default=10, help="epochs of the accuracy runs")
    ap.add_argument("--accuracy-size", type=int, default=8)
    args = ap.parse_args(argv)
    parts = [p for p in args.parts.split(",") if p and p != "none"]   # none: tables only
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"unknown parts {bad}; choose from {PARTS}")
    sizes = [int(s) for s in args.sizes.split(",")]
    path = DOCS_BENCH / "train.json"
    d = json.loads(path.read_text()) if path.exists() else {}
    d["bench"] = "train"
    meta = d.setdefault("meta", {})
    head = _git_head()
    if "speed" in parts:
        d["speed"] = speed(sizes)
        meta["speed_commit"] = head
    if "cycles" in parts:
        d["cycles"] = cycles(sizes)
        meta["cycles_commit"] = head
    if "accuracy" in parts:
        d["accuracy"] = accuracy(args.accuracy_size, args.epochs)
        meta["accuracy_commit"] = head
    meta["machine"] = platform.machine()
    # the keys the issue names, at the top level
    if "accuracy" in d and "8" in d["accuracy"]:
        d["test_accuracy"] = d["accuracy"]["8"]["test_accuracy"]
        d["reference_accuracy"] = d["accuracy"]["8"]["reference_accuracy"]
    if "speed" in d:
        d["sim_speed_ratio"] = min(r["sim_speed_ratio"] for r in d["speed"].values())
    if "cycles" in d:
        top = str(max(int(s) for s in d["cycles"]))
        d["widths"] = {w: {"step_cycles": r["step_cycles"],
                           "mac_bound_cycles": r["mac_bound_cycles"], "S": int(top)}
                       for w, r in d["cycles"][top].items()}
    write_json("train", d)
    write_markdown("train", to_markdown(d))
    print(to_markdown(d))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
