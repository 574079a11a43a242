"""Data-parallel scaling of the RTL multi-core top (part of ``make bench-distributed``).

Every point runs the generated Verilog under Verilator (cocotb, ``sim/tb/training_ring.py``
``bench_scaling``; one core: ``sim/tb/core.py`` ``bench_step``) and is checked bit-exactly
against the golden model while it is measured. The digits MLP (64-64-10, Adam) at mantissa
width 8 on S = 4 cores (preset ``tiny``: 16-bit links of latency 2):

* **one core**, batch 32: the single-core step program (one-pass ``OPT``), the reference;
* **strong scaling**: the global batch 32 on ``N`` cores (32 / N rows each):
  ``strong_scaling_efficiency = T1(32) / (N * T_N)``;
* **weak scaling**: 32 rows per core (global batch 32 N):
  ``weak_scaling_efficiency = T1(32) / T_N``.

``T`` is the step's run cycles (START to done; the slowest core), host I/O excluded (each core
has its own host port, loaded in parallel). Per point also: the collective engine's busy
cycles (communication), the part of them hidden behind another unit (``coll_hidden``), and the
flits per link against the cycles of the all-reduce (link utilization).
"""
from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

__all__ = ["run_point", "run_scaling"]

LAYERS = "64,64,10"
BATCH = 32


def _bench(block, preset, module, testcase, name, env) -> dict:
    from sim.tb.runner import run_cocotb
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "bench.json"
        run_cocotb(block, preset, module, name=name, testcase=testcase,
                   extra_env={**env, "TESSERA_BENCH_OUT": str(out)})
        return json.loads(out.read_text())


def run_point(ranks: int, per_core: int, *, width: int = 8, per_layer: bool = False,
              comp: str = "none", layers: str = LAYERS) -> dict:
    """One measured step on ``ranks`` cores (1: the single training core) of the MLP
    ``layers`` (comma-separated widths)."""
    env = {"TB_LAYERS": layers, "TB_BATCH": str(per_core), "TB_BENCH_WIDTH": str(width)}
    if ranks == 1:
        tag = "" if layers == LAYERS else "_" + layers.replace(",", "-")
        r = _bench("training_core", "tiny", "sim.tb.core", "bench_step",
                   f"scaling_n1_b{per_core}_w{width}{tag}", {**env, "TB_OPT": "adam"})
        return {"ranks": 1, "batch_per_core": per_core, "global_batch": per_core,
                "width": width, "step_cycles": r["run_cycles"], "coll_busy": [0],
                "coll_hidden": [0], "flits": [0]}
    env.update(TB_PER_LAYER="1" if per_layer else "0", TB_COMP=comp)
    tag = f"n{ranks}_b{per_core}_w{width}{'_pl' if per_layer else ''}_{comp}"
    preset = "tiny" if ranks == 2 else f"tiny-n{ranks}"     # tiny is two cores: one build
    return _bench("training_ring", preset, "sim.tb.training_ring", "bench_scaling",
                  f"scaling_{tag}", env)


def _summary(p: dict) -> dict:
    busy = max(p["coll_busy"])
    flits = max(p["flits"])
    return {**{k: p[k] for k in ("ranks", "batch_per_core", "global_batch", "width",
                                 "step_cycles")},
            "per_layer": p.get("per_layer", False),
            "coll_cycles": busy,
            "comm_fraction": round(busy / p["step_cycles"], 4),
            "hidden_fraction": round(max(p["coll_hidden"]) / busy, 4) if busy else None,
            "link_flits": flits,
            "link_utilization": round(flits / busy, 4) if busy else None}


def run_scaling(ranks=(2, 4), *, width: int = 8, log=print) -> dict:
    """Strong and weak scaling at each ``ranks``; returns the JSON section."""
    one = run_point(1, BATCH, width=width)
    log(f"scaling: 1 core, batch {BATCH}: {one['step_cycles']} cycles")
    rows = [_summary(one)]
    eff = {"strong": {}, "weak": {}, "strong_per_layer": {}, "weak_per_layer": {}}
    for n in ranks:
        if BATCH % n:
            raise ValueError(f"the global batch {BATCH} must divide by ranks {n}")
        for kind, per_core, per_layer in (("strong", BATCH // n, False),
                                          ("weak", BATCH, False),
                                          ("strong", BATCH // n, True),
                                          ("weak", BATCH, True)):
            p = _summary(run_point(n, per_core, width=width, per_layer=per_layer))
            p["scaling"] = kind
            rows.append(p)
            T1, TN = one["step_cycles"], p["step_cycles"]
            key = kind + ("_per_layer" if per_layer else "")
            eff[key][str(n)] = round(T1 / (n * TN) if kind == "strong" else T1 / TN, 4)
            log(f"scaling: {n} cores, {kind}{', per layer' if per_layer else ''}, {per_core} "
                f"rows each: {TN} cycles (comm {p['coll_cycles']}, hidden "
                f"{p['hidden_fraction']})")
    return {"S": 4, "layers": [int(v) for v in LAYERS.split(",")], "width": width,
            "reference_batch": BATCH, "points": rows,
            "strong_scaling_efficiency": eff["strong"], "weak_scaling_efficiency": eff["weak"],
            "strong_scaling_efficiency_per_layer": eff["strong_per_layer"],
            "weak_scaling_efficiency_per_layer": eff["weak_per_layer"],
            "host": os.uname().machine}


def to_markdown(sc: dict) -> list[str]:
    out = ["## Scaling of the RTL multi-core top", "",
           f"Digits MLP {'-'.join(map(str, sc['layers']))}, Adam, widths {sc['width']}, "
           f"S = {sc['S']} cores (`training_ring` preset `tiny-n<N>`, 16-bit links of "
           f"latency 2) in Verilator, every step checked bit-exactly against the golden "
           "model. Step = run cycles of the slowest core (host I/O excluded). Strong: global "
           f"batch {sc['reference_batch']}; weak: {sc['reference_batch']} rows per core. "
           "comm = cycles the collective engine runs; hidden = the part of them another unit "
           "runs too; link utilization = flits per link / comm cycles. all-reduce: one over "
           "the gradient region before the OPT, or per layer (after each layer's last "
           "gradient write, the last layer's block in a bank of its own when it fits).", "",
           "| N | scaling | all-reduce | rows per core | step cycles | efficiency | comm cycles "
           "| comm fraction | hidden | link flits | link utilization |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for p in sc["points"]:
        n = p["ranks"]
        kind = p.get("scaling", "reference")
        pl = "_per_layer" if p.get("per_layer") else ""
        eff = "1" if n == 1 else sc[f"{kind}_scaling_efficiency{pl}"][str(n)]
        how = "-" if n == 1 else ("per layer" if pl else "one")
        out.append(f"| {n} | {kind} | {how} | {p['batch_per_core']} | {p['step_cycles']:,} | "
                   f"{eff} | "
                   f"{p['coll_cycles']:,} | {p['comm_fraction']} | {p['hidden_fraction']} | "
                   f"{p['link_flits']:,} | {p['link_utilization']} |")
    return out + [""]
