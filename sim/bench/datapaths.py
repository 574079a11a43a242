"""``make bench-datapaths``: measured latency and throughput of the FP32 units, the optimizer
engine and the gradient datapaths, plus the exp and log error in ulp.

Runs the ``bench_throughput`` cocotb hook of each block one after another (every hook
measures on the Verilated DUT and asserts its results against the golden model):

* ``fp32_add``, ``fp32_mul``, ``fp32_compare``, ``int_to_fp32``, ``fp32_to_int``
  (``sim.tb.fp32_units``, preset default);
* ``fp32_div``, ``fp32_sqrt``, ``fp32_exp`` (``sim.tb.fp32_func``, preset default; the exp
  hook also measures the exp error against float64);
* ``fp32_log`` and ``fp32_log_serial`` (the same words on one shared multiplier, one every 7
  cycles; ``sim.tb.fp32_func``, preset default; with the log error);
* ``optim_engine`` (``sim.tb.optim``) and ``grad_unit`` (``sim.tb.grad``), preset tiny (the
  variants the cocotb tier builds).

Writes ``docs/bench/datapaths.json`` and ``docs/bench/datapaths.md``. A block whose hook fails
is reported in both files (``errors``) and the exit status is 1. ``--only BLOCK ...`` reruns
the named blocks and merges them into the existing JSON (the rest is kept as measured before);
``--render`` rewrites the Markdown from the JSON.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
import traceback

from sim.bench.common import DOCS_BENCH, run_bench, write_json, write_markdown

#: (block, preset, cocotb module) in run order.
UNITS = [
    ("fp32_add", "default", "sim.tb.fp32_units"),
    ("fp32_mul", "default", "sim.tb.fp32_units"),
    ("fp32_compare", "default", "sim.tb.fp32_units"),
    ("int_to_fp32", "default", "sim.tb.fp32_units"),
    ("fp32_to_int", "default", "sim.tb.fp32_units"),
    ("fp32_div", "default", "sim.tb.fp32_func"),
    ("fp32_sqrt", "default", "sim.tb.fp32_func"),
    ("fp32_exp", "default", "sim.tb.fp32_func"),
    ("fp32_log", "default", "sim.tb.fp32_func"),
    ("fp32_log_serial", "default", "sim.tb.fp32_func"),
]
DATAPATHS = [
    ("optim_engine", "tiny", "sim.tb.optim"),
    ("grad_unit", "tiny", "sim.tb.grad"),
]


def _unit_entry(block: str, raw: dict) -> dict:
    """One row of the unit table from a hook's JSON (``sim.tb.fp32_units`` writes the entry;
    ``sim.tb.fp32_func`` writes ``{block: entry}``)."""
    e = raw.get(block, raw)
    out = {
        "preset": e["preset"], "config": e.get("config"),
        "latency_cycles": e["latency_cycles"], "published_latency": e["published_latency"],
        "results_per_cycle": e["results_per_cycle"],
        "operations": e.get("operations", e.get("ops")),
    }
    if "sim_operations_per_second" in e:
        out["sim_operations_per_second"] = e["sim_operations_per_second"]
    for key in ("exp", "log"):
        if f"{key}_max_ulp" in e:
            out[f"{key}_max_ulp"] = e[f"{key}_max_ulp"]
            out[f"{key}_accuracy"] = e[f"{key}_accuracy"]
    return out


def run_all(only=None, data=None) -> dict:
    data = data or {"units": {}, "errors": {}}
    data["machine"] = (f"{platform.machine()} {platform.python_implementation()} "
                       f"{platform.python_version()}")
    for block, preset, module in UNITS + DATAPATHS:
        if only and block not in only:
            continue
        data["errors"].pop(block, None)
        t0 = time.perf_counter()
        print(f"bench-datapaths: {block} ({preset}) ...", flush=True)
        try:
            raw = run_bench(block, preset, module, "bench_throughput")
            if (block, preset, module) in UNITS:
                data["units"][block] = _unit_entry(block, raw)
            else:
                data[block] = raw
        except Exception as exc:          # keep going: report which hook failed and why
            traceback.print_exc()
            data["errors"][block] = f"{type(exc).__name__}: {exc}"
        print(f"bench-datapaths: {block} done in {time.perf_counter() - t0:.0f} s", flush=True)
    return data


def _fmt(x, nd=3):
    return "—" if x is None else (f"{x:.{nd}f}" if isinstance(x, float) else str(x))


def markdown(data: dict) -> str:
    lines = ["# FP32 units and datapaths: measured", "",
             "Regenerate with `make bench-datapaths` (`python -m sim.bench.datapaths`). Every "
             "number is measured on the Verilated DUT by a cocotb `bench_throughput` hook that "
             "also checks the results bit-exactly against the golden model; the exp and log "
             "errors come from the golden models (bit-exact with the hardware) against float64.",
             "", f"Machine: {data['machine']}.", "",
             "## FP32 units (one operation per cycle, stream ports)", "",
             "| unit | preset | latency (cycles) | published | results per cycle | "
             "max error vs float64 |", "|---|---|---|---|---|---|"]
    for block, _, _ in UNITS:
        u = data["units"].get(block)
        if u is None:
            lines.append(f"| {block} | — | — | — | — | hook failed: see errors |")
            continue
        err = "IEEE-exact (bit-exact with numpy float32)"
        if block == "fp32_compare":
            err = "exact (bit-exact with the numpy model)"
        elif block == "fp32_to_int":
            err = "exact (bit-exact with the numpy model)"
        elif "exp_max_ulp" in u:
            err = f"**{u['exp_max_ulp']:.3f} ulp** (exp)"
        elif "log_max_ulp" in u:
            err = f"**{u['log_max_ulp']:.3f} ulp** (log)"
        lines.append(f"| {block} | {u['preset']} | {u['latency_cycles']} | "
                     f"{u['published_latency']} | {u['results_per_cycle']:.3f} | {err} |")
    for key in ("exp", "log"):
        blk = f"fp32_{key}"
        acc = data["units"].get(blk, {}).get(f"{key}_accuracy")
        if acc:
            lines += ["", f"`{blk}` accuracy: max **{acc['max_ulp']:.4f} ulp** at "
                          f"x = {acc['argmax_x']:.9g} (bits {acc['argmax_bits']:#010x}), mean "
                          f"{acc['mean_ulp']:.3f} ulp over {acc['count']:,} arguments (every "
                          f"{acc['stride']:,}th float32 plus exhaustive bands "
                          f"{', '.join(f'[{lo}, {hi})' for lo, hi in acc['bands'])}); "
                          f"{acc['not_correctly_rounded']:,} results differ from the correctly "
                          f"rounded float32."]

    opt = data.get("optim_engine")
    if opt:
        lines += ["", f"## Optimizer engine (`optim_engine`, preset {opt['preset']})", "",
                  f"Update pipeline latency: {opt['update_latency']} cycles. A STEP is two "
                  "passes over the gradients (check: Inf/NaN and sum of squares; update: one "
                  "element per cycle); `*_one_pass` rows are STEP1 (one fused pass, clipping "
                  "off), see docs/datapaths.md.", "",
                  "| operation | N | ACCUM cycles | ACCUM elements/cycle | STEP cycles | "
                  "STEP elements/cycle |", "|---|---|---|---|---|---|"]
        for name, r in opt["passes"].items():
            lines.append(f"| {name} | {r['n']} | {r['accum_cycles']} | "
                         f"{r['accum_elements_per_cycle']:.3f} | {r['step_cycles']} | "
                         f"{r['step_elements_per_cycle']:.3f} |")
    g = data.get("grad_unit")
    if g:
        lat = g["latency"]
        lines += ["", f"## Gradient datapaths (`grad_unit`, preset {g['preset']})", "",
                  f"Latencies: elementwise {lat['elementwise']}, bias gradient "
                  f"{lat['biasgrad']}, softmax {lat['softmax']} cycles (softmax: a row's first "
                  "gradient comes `latency + max(C, lanes)` cycles after its last logit).", "",
                  "| operation | cycles | elements per cycle (whole run) | "
                  "elements per cycle (steady state) |", "|---|---|---|---|"]
        lines.append(f"| elementwise ({g['elementwise']['n']} elements) | "
                     f"{g['elementwise']['cycles']} | "
                     f"{g['elementwise']['elements_per_cycle']:.3f} | — |")
        lines.append(f"| bias gradient 64×32 | {g['biasgrad_64x32']['cycles']} | "
                     f"{g['biasgrad_64x32']['elements_per_cycle']:.3f} | — |")
        for key, r in g.items():
            if (key.startswith("softmax_") and not key.startswith("softmax_row_latency")
                    and isinstance(r, dict) and "steady_elements_per_cycle" in r):
                rows, c = key[len("softmax_"):].split("x")
                lines.append(f"| softmax + loss, {rows} rows × {c} classes | {r['cycles']} | "
                             f"{r['elements_per_cycle']:.3f} | "
                             f"{r['steady_elements_per_cycle']:.3f} |")
        rl = [(k[len("softmax_row_latency_"):], v) for k, v in g.items()
              if k.startswith("softmax_row_latency_")]
        if rl:
            lines += ["", "Softmax row latency into an idle block (last logit accepted to first "
                          "gradient valid; asserted equal to the published value): " +
                      ", ".join(f"C = {c}: {v['cycles']} cycles (published {v['published']})"
                                for c, v in rl) + "."]
    if data["errors"]:
        lines += ["", "## Errors", ""]
        lines += [f"* `{b}`: {msg}" for b, msg in data["errors"].items()]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    names = [b for b, _, _ in UNITS + DATAPATHS]
    ap.add_argument("--only", nargs="+", choices=names, help="rerun these blocks only (merge)")
    ap.add_argument("--render", action="store_true",
                    help="only rewrite datapaths.md from the existing datapaths.json")
    args = ap.parse_args(argv)
    if args.render:
        text = markdown(json.loads((DOCS_BENCH / "datapaths.json").read_text()))
        write_markdown("datapaths", text)
        print(text)
        return 0
    old = None
    if args.only and (DOCS_BENCH / "datapaths.json").exists():
        old = json.loads((DOCS_BENCH / "datapaths.json").read_text())
    data = run_all(args.only, old)
    write_json("datapaths", data)
    text = markdown(data)
    write_markdown("datapaths", text)
    print(text)
    return 1 if data["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
