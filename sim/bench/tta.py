"""Time-to-accuracy sweep (``make bench-tta``, docs/tta.md): the digits MLP trained under every
precision schedule, several seeds each, runs spread over Dask ``distributed`` workers.

    python -m sim.bench.tta [--quick] [--workers N | --scheduler ADDRESS] [--seeds 0,1,2]
                            [--epochs 10] [--schedules 8,4,...] [--engine golden|rtl]

Per run (schedule, seed): the training loop of ``tessera train`` (same compiler, host actions,
batches, float32 reference) on one of two engines, both taking the same host actions:

* ``rtl``: the Verilated training core (:class:`sim.verilated.core.VerilatedCore`); the cycles
  of a step are the simulated cycles of its host actions;
* ``golden`` (default): the golden model (:class:`sim.model.core.CoreModel`), bit-exact with
  the RTL on the same schedule (``tests/test_tta_verilated.py`` runs schedules that change the
  widths between steps on both and compares every word and every step's cycles). Its cycles
  come from the **step-cycle table** (:class:`StepCycles`): the cycles of one step as a
  function of the precision table, measured once per distinct table on the Verilated core
  (cached on disk, keyed by the core's build hash). The core's timing does not depend on the
  data (the test checks it on every step of its runs), so the table is exact, not an estimate.

The program is loaded once before the first step (not counted); every step writes the batch, the
precision table and the registers, runs and reads the losses and status: its cycles are all of
that. Test accuracy (float32 inference with the weights read back) is measured every
``eval_every`` steps and after each epoch; reading the weights is not counted.

The target of a seed is its float32 reference's final test accuracy minus one point;
``cycles_to_target`` is the training cycles until the first measurement at or above it (None if
never). Time = cycles / Fmax, with Fmax the lowest measured Fmax of the synthesized engines
(docs/bench/synth.json; the whole training core has no place-and-route yet).

Runs are cached in ``build/tta/runs/`` keyed by schedule, seed, the spec and the engine's cycle
model: an interrupted sweep resumes with the finished runs kept. Output: ``docs/bench/tta.json``,
``docs/bench/tta.md`` and plots in ``docs/bench/tta/`` (``--quick``: ``build/tta/quick/``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from sim.bench.common import DOCS_BENCH, write_json, write_markdown
from sim.host.schedule import KINDS, WidthSchedule, tensor_stats

ROOT = Path(__file__).resolve().parents[2]
WORK = ROOT / "build" / "tta"
PLOTS = DOCS_BENCH / "tta"
#: Every schedule of the study (docs/tta.md gives their exact widths; ``fast`` uses
#: :data:`sim.host.schedule.FAST_ALPHA`, ``FAST_BETA``, chosen in docs/tta.md;
#: ``fast:0.25,0.2`` is its sensitivity row).
SCHEDULES = ("8", "6", "4", "2", "8+sr", "4+sr", "temporal-hl", "temporal-lh", "mixed",
             "layer-hl", "layer-lh", "xwg:4,8,8", "fast", "fast+sr", "fast:0.25,0.2")
QUICK_SCHEDULES = ("8", "4,8@step+sr", "layer-hl", "fast")


@dataclass(frozen=True)
class SweepSpec:
    """What every run of a sweep shares (a :class:`sim.host.train.TrainSpec` minus schedule and
    seed, plus the accuracy measurement interval)."""

    size: int = 8
    layers: tuple = (64, 64, 10)
    batch: int = 32
    optimizer: str = "adam"
    lr: float = 3e-3
    epochs: int = 10
    steps_per_epoch: int = 0
    eval_every: int = 11

    def __post_init__(self):
        if isinstance(self.eval_every, bool) or not isinstance(self.eval_every, int) \
                or self.eval_every < 1:
            raise ValueError(f"SweepSpec.eval_every must be a positive int, not "
                             f"{self.eval_every!r}")
        object.__setattr__(self, "layers", tuple(self.layers))
        self.train_spec("8", 0)          # TrainSpec validates the rest

    def train_spec(self, schedule: str, seed: int):
        from sim.host.train import TrainSpec
        return TrainSpec(size=self.size, layers=self.layers, batch=self.batch,
                         optimizer=self.optimizer, lr=self.lr, widths=schedule,
                         epochs=self.epochs,
                         seed=seed, steps_per_epoch=self.steps_per_epoch)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["layers"] = list(self.layers)
        return d


def _key(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


#: Prefix of the table keys of FAST steps: their actions differ (``ADAPT`` at the top of the
#: program, the statistics read after the run), so their cycles are measured separately.
FAST_TAG = "fast|"


def _table_key(table: dict, fast: bool = False) -> str:
    return (FAST_TAG if fast else "") + ";".join(
        f"{l}.{m}:{wa},{wb},{r}" for (l, m), (wa, wb, r) in sorted(table.items()))


def _table_of_key(key: str) -> tuple[dict, bool]:
    """``(table, fast)`` back from :func:`_table_key`."""
    fast = key.startswith(FAST_TAG)
    table = {}
    for entry in key[len(FAST_TAG) if fast else 0:].split(";"):
        lm, _, w = entry.partition(":")
        l, m = (int(v) for v in lm.split("."))
        table[(l, m)] = tuple(int(v) for v in w.split(","))
    return table, fast


# -- the step-cycle table ---------------------------------------------------------------------
class StepCycles:
    """Cycles of one training step per precision table, measured on the Verilated core.

    ``path``: a JSON cache ``{core key: {spec key: {table key: cycles}}}`` (:func:`core_key`:
    the core's sources, so nothing needs building to look a table up). :meth:`measure`
    runs one step per missing table (initialise, load the program, one step with the first
    batch) with the step actions of the schedules using it (a FAST key's: ``ADAPT`` and the
    statistics read, :func:`sim.host.train.schedule_step_actions`); :meth:`__call__` looks a
    key up (KeyError if it was never measured). FAST runs choose their tables from the data,
    so the sweep measures theirs as the runs report them. ``core``: a
    :class:`~sim.verilated.core.VerilatedCore` to measure on (default: one of its own).
    """

    def __init__(self, spec: SweepSpec, path: Path | None = None, *, core=None):
        self.spec, self.path = spec, path
        self._core, self._own = core, core is None
        self.spec_key = _key({k: v for k, v in spec.to_dict().items()
                              if k not in ("epochs", "steps_per_epoch", "eval_every")})
        self.config = spec.train_spec("8", 0).config
        self.build_hash = core_key(spec.size)
        if path is not None and path.exists():
            self._all = json.loads(path.read_text())
        else:
            self._all = {}
        self.table: dict = self._all.setdefault(self.build_hash, {}).setdefault(self.spec_key, {})

    def _open(self):
        if self._core is None:       # built on first use (the first table to measure)
            from sim.verilated.core import VerilatedCore
            self._core = VerilatedCore(self.config, build_log=lambda *a: None)
        return self._core

    def measure(self, keys) -> int:
        """Measure every table key (:func:`_table_key`) of ``keys`` not in the cache; returns
        how many were run."""
        core = self._open()
        todo = sorted({k for k in keys if k not in self.table})
        if not todo:
            return 0
        engines = {}
        for key in todo:
            table, fast = _table_of_key(key)
            if fast not in engines:
                engines[fast] = _Engine("rtl", self.spec.train_spec("fast" if fast else "8", 0),
                                        core=core)
            eng = engines[fast]
            eng.start()
            self.table[key] = eng.step(0, table)[1]
        for eng in engines.values():
            eng.close(keep_core=True)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self._all, indent=1, sort_keys=True) + "\n")
        return len(todo)

    def __call__(self, key: str) -> int:
        return self.table[key]

    def close(self):
        if self._core is not None and self._own:
            self._core.close()
        self._core = None


# -- one engine -------------------------------------------------------------------------------
class _Engine:
    """The core (``rtl``) or its golden model (``golden``) driven by the compiler's host
    actions: initialise, load the program once, then steps."""

    def __init__(self, kind: str, tspec, *, core=None):
        from sim.host.compiler import compile_mlp
        from sim.host.digits import load_digits
        self.kind, self.tspec = kind, tspec
        self.sched = tspec.schedule
        self.comp = compile_mlp(tspec.mlp, tspec.config)
        self.data = load_digits()
        if kind == "rtl":
            from sim.host.driver import CoreDriver
            from sim.verilated.core import VerilatedCore, run_sync
            self.core = core or VerilatedCore(tspec.config, build_log=lambda *a: None)
            drv = CoreDriver(tspec.config, self.core)
            self._apply = lambda acts: run_sync(drv.apply(acts))
        elif kind == "golden":
            from sim.model.core import CoreModel
            self.model = CoreModel(tspec.config)
            self._apply = self.model.apply
        else:
            raise ValueError(f"engine must be 'rtl' or 'golden', not {kind!r}")

    def start(self, W=None, b=None):
        from sim.model.train import init_params
        if self.kind == "rtl":
            self.core.reset()
        else:
            self.model.reset()
        if W is None:
            W, b = init_params(self.tspec.mlp, seed=self.tspec.seed)
        self._apply(self.comp.init_actions(W, b, None))
        self._apply([("program", self.sched.program(self.comp.program))])
        self.t = 0

    def step(self, idx, table) -> tuple[dict, int | None, dict | None]:
        """One step on batch ``idx`` (rows of the training set; an int: the first batch) at
        precision ``table``: ``(decoded step, cycles, statistics)``. The cycles are the RTL's
        (None on the golden model); the statistics ``{(layer, mode, operand): StatState}`` of
        the step (FAST schedules only, else None)."""
        from sim.host.train import schedule_step_actions
        d = self.data
        if isinstance(idx, int):
            idx = np.arange(self.tspec.batch)
        acts = schedule_step_actions(self.comp, self.sched, d.x_train[idx], d.y_train[idx],
                                     self.t + 1, table)
        cycles = None
        if self.kind == "rtl":
            c0 = self.core.cycles
            r = self._apply(acts)
            cycles = self.core.cycles - c0
        else:
            r = self._apply(acts)
        step = self.comp.decode_step(r)
        if not step["ok"]:
            raise RuntimeError(f"the core rejected the program: {step['run']}")
        if not step["skipped"]:
            self.t += 1
        return step, cycles, r.get("stats")

    def read(self) -> dict:
        return self._apply(self.comp.read_actions())

    def close(self, keep_core=False):
        if self.kind == "rtl" and not keep_core:
            self.core.close()


def schedule_tables(spec: SweepSpec, schedule: str) -> list:
    """The table keys (:func:`_table_key`) of every precision table a statistics-free
    schedule uses in a run of ``spec`` (a FAST run's depend on its data: none)."""
    from sim.host.digits import epoch_batches, load_digits
    sched = WidthSchedule.parse(schedule)
    if sched.needs_statistics:
        return []
    L = len(spec.layers) - 1
    spe = _steps_per_epoch(spec, len(load_digits().y_train), epoch_batches)
    total = spec.epochs * spe
    seen = {}
    for gi in range(total):
        t = sched.precision(L, epoch=gi // spe, epochs=spec.epochs, step=gi, steps=total)
        seen[_table_key(t)] = t
    return list(seen)


def _steps_per_epoch(spec, ntrain, epoch_batches):
    nb = len(epoch_batches(ntrain, spec.batch, 0, 0))
    return min(nb, spec.steps_per_epoch) if spec.steps_per_epoch else nb


def run_one(spec: SweepSpec, schedule: str, seed: int, *, engine: str = "golden",
            cycles: StepCycles | dict | None = None, core=None) -> dict:
    """Train one run; returns its record (curve, widths per step, accuracies, cycles).

    ``cycles``: the step-cycle table (``golden``): a :class:`StepCycles` (tables it lacks --
    a FAST run's -- are measured on its core when the run ends) or a plain ``{table key:
    cycles}`` dict (what is shipped to Dask workers; a run using a table it lacks comes back
    with ``missing_tables`` and no cycles: :func:`attach_cycles` completes it). The training
    itself does not depend on the cycles. A FAST run reads the statistics after every step
    and sets the next step's widths from them (``r``: the per-tensor statistics per step).
    """
    from sim.host.digits import epoch_batches
    from sim.host.train import Reference, accuracy
    sched = WidthSchedule.parse(schedule)
    tspec = spec.train_spec(schedule, seed)
    if engine == "golden" and cycles is None:
        raise ValueError("the golden engine needs the step-cycle table (cycles=)")
    eng = _Engine(engine, tspec, core=core)
    d = eng.data
    from sim.model.train import init_params
    W0, b0 = init_params(tspec.mlp, seed=seed)
    ref = Reference(tspec, W0, b0)
    eng.start(W0, b0)
    L = len(spec.layers) - 1
    ntrain = len(d.y_train)
    spe = _steps_per_epoch(spec, ntrain, epoch_batches)
    total = spec.epochs * spe
    wall0 = time.perf_counter()
    curve = [{"step": 0, "cycles": 0, "accuracy": accuracy(W0, b0, d.x_test, d.y_test),
              "reference_accuracy": accuracy(W0, b0, d.x_test, d.y_test)}]
    widths_log, rtl_cycles, losses, skipped, keys, r_log = [], [], [], 0, [], []
    current = None
    for epoch in range(spec.epochs):
        batches = epoch_batches(ntrain, spec.batch, seed, epoch)[:spe]
        for i, idx in enumerate(batches):
            gi = epoch * spe + i
            widths = sched.widths(L, epoch=epoch, epochs=spec.epochs, step=gi, steps=total,
                                  current=current)
            table = sched.table(widths, L)
            step, c, states = eng.step(idx, table)
            if sched.needs_statistics:
                rs = tensor_stats(states)
                current = sched.advance(widths, rs, step=gi, steps=total, layers=L)
                r_log.append([[rs.get((l, k)) for k in KINDS] for l in range(L)])
            ref.step(d.x_train[idx], d.y_train[idx])
            keys.append(_table_key(table, sched.needs_statistics))
            rtl_cycles.append(c)
            losses.append(step["loss"])
            skipped += bool(step["skipped"])
            widths_log.append([[widths[(l, k)] for k in KINDS] for l in range(L)])
            if (gi + 1) % spec.eval_every == 0 or i == len(batches) - 1:
                W, b = eng.comp.decode_params(eng.read())
                curve.append({"step": gi + 1, "cycles": None,
                              "accuracy": accuracy(W, b, d.x_test, d.y_test),
                              "reference_accuracy": accuracy(ref.W, ref.b, d.x_test,
                                                             d.y_test)})
    reads = eng.read()
    eng.close(keep_core=core is not None)
    ref_final = curve[-1]["reference_accuracy"]
    tables = sorted(set(keys))
    rec = {"schedule": str(schedule), "seed": seed, "engine": engine,
           "final_accuracy": curve[-1]["accuracy"], "reference_accuracy": ref_final,
           "target": ref_final - 0.01, "steps": total, "skipped_steps": skipped,
           "curve": curve, "losses": losses, "widths": widths_log,
           "r": r_log if sched.needs_statistics else None,
           "tables": tables, "step_tables": [tables.index(k) for k in keys],
           "wall_seconds": time.perf_counter() - wall0,
           "final_words": {k: np.asarray(v, np.uint32) for k, v in reads.items()}}
    if engine == "rtl":
        known = dict(zip(keys, rtl_cycles))
    elif isinstance(cycles, StepCycles):
        cycles.measure(tables)
        known = cycles.table
    else:
        known = cycles
    return attach_cycles(rec, known)


def attach_cycles(rec: dict, known: dict) -> dict:
    """Fill a run record's cycles from ``known`` (``{table key: cycles}``): per step, at every
    accuracy measurement, to the target, in total. Tables ``known`` lacks are listed in
    ``missing_tables`` and the cycles stay None. Returns ``rec``."""
    missing = [k for k in rec["tables"] if k not in known]
    rec["missing_tables"] = missing
    if missing:
        rec.update(step_cycles=None, cycles_to_target=None, steps_to_target=None,
                   total_cycles=None)
        return rec
    per = [known[rec["tables"][j]] for j in rec["step_tables"]]
    cum = np.concatenate([[0], np.cumsum(per)]).tolist()
    for p in rec["curve"]:
        p["cycles"] = int(cum[p["step"]])
    hit = next((p for p in rec["curve"] if p["accuracy"] >= rec["target"]), None)
    rec.update(step_cycles=per, total_cycles=int(cum[-1]),
               cycles_to_target=hit["cycles"] if hit else None,
               steps_to_target=hit["step"] if hit else None)
    return rec


def _task(spec_dict, schedule, seed, cycles):
    """A Dask task (plain arguments, importable on any worker)."""
    spec = SweepSpec(**{**spec_dict, "layers": tuple(spec_dict["layers"])})
    rec = run_one(spec, schedule, seed, engine="golden", cycles=cycles)
    rec.pop("final_words")
    return rec


# -- the sweep --------------------------------------------------------------------------------
#: synth.json rows of whole cores, not engines (``training_core``, ``training_core_fpga``,
#: ``training_ring_fpga``, ``training_ring_node_fpga``): :func:`fmax_mhz` leaves them out.
CORE_BLOCK_PREFIX = "training_"


def fmax_mhz() -> tuple[float, str]:
    """The lowest measured Fmax among the synthesized engines (docs/bench/synth.json; the
    whole-core rows left out: the sweep runs at S = 8, whose core has no routed Fmax, and an
    S = 4 core's or a ring node's figure is not this core's)."""
    rows = json.loads((DOCS_BENCH / "synth.json").read_text())["results"]
    rows = [r for r in rows if isinstance(r.get("fmax_mhz"), (int, float))
            and not r["block"].startswith(CORE_BLOCK_PREFIX)]
    low = min(rows, key=lambda r: r["fmax_mhz"])
    return float(low["fmax_mhz"]), f"{low['block']} ({low['preset']})"


def sweep(spec: SweepSpec, schedules, seeds, *, workers: int = 2, scheduler: str | None = None,
          cache: Path = WORK, progress: bool = True, log=print) -> list:
    """Run every (schedule, seed) not cached yet on Dask; returns every run's record (cached
    ones too). The workers run the golden model only; the tables a run used that the
    step-cycle table lacks (all of a FAST run's, which depend on its data, and any table of a
    new core) are measured here, on the Verilated core (built on first use, while the workers
    train), as each run comes back; then the run's cycles are filled in
    (:func:`attach_cycles`) and it is cached."""
    from distributed import Client, LocalCluster, as_completed
    runs_dir = cache / "runs"
    runs_dir.mkdir(parents=True, exist_ok=True)
    cyc = StepCycles(spec, cache / "step_cycles.json")
    cluster = client = None
    try:
        log(f"step-cycle table: {len(cyc.table)} precision tables measured (core "
            f"{cyc.build_hash[:12]}); the runs' other tables are measured as they come back")

        def path(s, seed):
            return _run_path(cache, spec, s, seed, cyc.build_hash)

        results, todo = [], []
        for seed in seeds:      # seed-major: a sweep cut short has every schedule's first seeds
            for s in schedules:
                p = path(s, seed)
                if p.exists():
                    results.append(json.loads(p.read_text()))
                else:
                    todo.append((s, seed))
        log(f"{len(results)} run(s) cached, {len(todo)} to run")
        if not todo:
            return results
        if scheduler:
            client = Client(scheduler)
        else:
            cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                   dashboard_address=None)
            client = Client(cluster)
        # the task by its module's name (not __main__'s copy under `python -m`): workers import
        # the code instead of receiving it pickled by value
        from sim.bench.tta import _task as task
        table = dict(cyc.table)
        futures = {client.submit(task, spec.to_dict(), s, seed, table, pure=False,
                                 key=f"tta-{s}-{seed}-{_key([s, seed, time.time()])}"): (s, seed)
                   for s, seed in todo}
        bar = None
        if progress:
            from tqdm import tqdm
            bar = tqdm(total=len(futures), desc="tta runs", unit="run", file=sys.stderr)
        for fut in as_completed(futures):
            s, seed = futures[fut]
            rec = fut.result()
            if rec["missing_tables"]:               # tables not measured yet: measure them
                cyc.measure(rec["missing_tables"])
                attach_cycles(rec, cyc.table)
            p = path(s, seed)
            tmp = p.with_suffix(".tmp")
            tmp.write_text(json.dumps(rec))
            tmp.replace(p)                           # a finished run is never redone
            results.append(rec)
            if bar is not None:
                bar.set_postfix_str(f"{s} seed {seed}: acc {rec['final_accuracy']:.3f}",
                                    refresh=False)
                bar.update(1)
        if bar is not None:
            bar.close()
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
        cyc.close()
    return results


def _run_path(cache: Path, spec: SweepSpec, schedule: str, seed: int, build_hash: str) -> Path:
    """Where a finished run is cached: keyed by the sweep spec, schedule, seed and the core's
    build hash (its cycles are that build's step-cycle table's)."""
    canon = str(WidthSchedule.parse(schedule))      # "fast" -> "fast:0.25,0.1": its alpha, beta
    return cache / "runs" / f"{_key([spec.to_dict(), canon, seed, build_hash])}.json"


def core_key(size: int) -> str:
    """What the core's cycles depend on: every source of :mod:`hdl` (and the Amaranth version),
    the preset and the C++ loop that counts them (``sim/verilated/harness.cpp``). Known
    without building, so runs can be looked up and started while the core builds."""
    from sim.host.train import PRESET_OF_SIZE
    from sim.verilated.build import BLOCK, HARNESS
    from sim.verilated.toolchain import hdl_digest
    return hdl_digest(BLOCK, PRESET_OF_SIZE[size], HARNESS.read_bytes())


def cached_runs(spec: SweepSpec, schedules, seeds, cache: Path = WORK) -> list:
    """The finished runs of ``spec`` in ``cache`` for the current core sources
    (``--report-only``, :func:`core_key`): nothing is built or run."""
    key = core_key(spec.size)
    paths = [_run_path(cache, spec, s, seed, key) for s in schedules for seed in seeds]
    return [json.loads(p.read_text()) for p in paths if p.exists()]


def summarize(spec: SweepSpec, schedules, seeds, results, fmax) -> dict:
    mhz, block = fmax
    by = {}
    for r in results:
        by.setdefault(r["schedule"], {})[r["seed"]] = r
    out = {"spec": spec.to_dict(), "seeds": list(seeds), "fmax_mhz": mhz, "fmax_block": block,
           "engine": "golden model, cycles from the step-cycle table measured on the RTL",
           "accuracy_measured_every_steps": spec.eval_every, "schedules": {}}
    L = len(spec.layers) - 1
    for s in schedules:
        sched = WidthSchedule.parse(s)
        runs = [by.get(str(s), {}).get(seed) for seed in seeds]
        runs = [r for r in runs if r is not None]
        if not runs:
            continue
        ctt = [r["cycles_to_target"] for r in runs]
        reached = [c for c in ctt if c is not None]
        # median with "never" as infinitely late: None unless most seeds reached the target
        med = float(np.median([math.inf if c is None else c for c in ctt]))
        med = None if math.isinf(med) else med
        out["schedules"][s] = {
            "description": describe(s, len(spec.layers) - 1),
            "cycles_to_target": {
                "per_seed": {str(r["seed"]): r["cycles_to_target"] for r in runs},
                "mean": float(np.mean(reached)) if len(reached) == len(runs) else None,
                "median": med,
                "reached": len(reached), "runs": len(runs)},
            "final_accuracy": {"per_seed": {str(r["seed"]): r["final_accuracy"] for r in runs},
                               "mean": float(np.mean([r["final_accuracy"] for r in runs]))},
            "reference_accuracy": float(np.mean([r["reference_accuracy"] for r in runs])),
            "total_cycles": float(np.mean([r["total_cycles"] for r in runs])),
            "time_to_target_ms": med / (mhz * 1e3) if med is not None else None,
        }
        if sched.needs_statistics:
            out["schedules"][s]["fast"] = {
                "alpha": sched.alpha, "beta": sched.beta,
                "distinct_tables": {str(r["seed"]): len(r["tables"]) for r in runs},
                "raised_at_step": {str(r["seed"]): fast_switches(r, L) for r in runs}}
    base = out["schedules"].get("8", {}).get("cycles_to_target", {}).get("median")
    for s, row in out["schedules"].items():
        m = row["cycles_to_target"]["median"]
        row["vs_fixed8"] = (m / base) if base and m is not None else None
    return out


def fast_switches(rec: dict, layers: int) -> dict:
    """``{"L0 x": [[step, width], ...], ...}``: the steps (0-based) at which a FAST run first
    used each width of each tensor."""
    out = {}
    for l in range(layers):
        for j, k in enumerate(KINDS):
            seq = [w[l][j] for w in rec["widths"]]
            out[f"L{l} {k}"] = [[i, w] for i, w in enumerate(seq) if i == 0 or w != seq[i - 1]]
    return out


def merge_previous(summary: dict, previous: dict, schedules) -> list:
    """Rows of ``previous`` (an earlier ``tta.json``) for the schedules of ``schedules`` this
    sweep did not run, copied into ``summary`` with ``measured_on`` (the earlier commit) and
    their ``vs_fixed8`` recomputed against this sweep's fixed 8-bit row. Only for the same
    sweep spec and seeds (ValueError otherwise). Returns the schedules copied."""
    if previous.get("spec") != summary["spec"] or previous.get("seeds") != summary["seeds"]:
        raise ValueError("--merge-previous: the earlier tta.json has another spec or seeds")
    copied = []
    rows = {}
    for s in schedules:
        if s in summary["schedules"]:
            rows[s] = summary["schedules"][s]
        elif s in previous.get("schedules", {}):
            row = dict(previous["schedules"][s])
            row.setdefault("measured_on", previous.get("commit", "?"))
            rows[s] = row
            copied.append(s)
    summary["schedules"] = rows
    base = rows.get("8", {}).get("cycles_to_target", {}).get("median")
    for row in rows.values():
        m = row["cycles_to_target"]["median"]
        row["vs_fixed8"] = (m / base) if base and m is not None else None
    summary["merged_from"] = {"commit": previous.get("commit", "?"), "schedules": copied}
    return copied


def describe(schedule: str, layers: int) -> str:
    """The exact widths of a schedule, in words (the table's description column)."""
    s = WidthSchedule.parse(schedule)
    rnd = "; backward passes stochastic" if s.grad_rounding else ""
    if s.kind == "fast":
        return f"FAST: widths rise from 2 when r(X) > {s.alpha:g} - {s.beta:g} i/I - " \
               f"{s.beta:g} l/L{rnd}"
    if s.kind == "xwg":
        return f"x {s.stages[0]}, w {s.stages[1]}, g {s.stages[2]} bits{rnd}"
    if s.kind == "layer":
        w = s.widths(layers, epoch=0, epochs=1)
        return "per layer " + ", ".join(f"L{l} {w[(l, 'x')]}" for l in range(layers)) + rnd
    if len(s.stages) == 1:
        return f"{s.stages[0]} bits throughout{rnd}"
    return (" -> ".join(map(str, s.stages)) + f" bits, equal shares of the "
            f"{'steps' if s.per == 'step' else 'epochs'}{rnd}")


def _fmt_c(v):
    return "never" if v is None else f"{v / 1e6:,.2f} M"


def markdown(summary: dict, plots_rel: str | None) -> str:
    sp = summary["spec"]
    mhz, block = summary["fmax_mhz"], summary["fmax_block"]
    lines = [
        "# Time to accuracy: the digits MLP under each precision schedule", "",
        "Generated by `make bench-tta` (`sim/bench/tta.py`, docs/tta.md) from "
        "`docs/bench/tta.json`. "
        f"MLP {'-'.join(map(str, sp['layers']))}, S = {sp['size']}, batch {sp['batch']}, "
        f"{sp['optimizer']} lr {sp['lr']}, {sp['epochs']} epochs, seeds "
        f"{', '.join(map(str, summary['seeds']))}. Runs on the golden model (bit-exact with "
        "the RTL, tests/test_tta_verilated.py) with each step's cycles from the step-cycle table measured "
        "on the Verilated core. Test accuracy measured every "
        f"{summary['accuracy_measured_every_steps']} steps and after each epoch. Target per "
        "seed: its float32 reference's final accuracy - 1 point. Time at "
        f"{mhz:g} MHz: the lowest measured Fmax of the synthesized engines ({block}, "
        "docs/bench/synth.md); the S = 8 training core's FPGA build has no routed Fmax yet.", "",
        "| schedule | widths | cycles to target (median) | per seed | reached | vs fixed 8 "
        "| time to target (ms) | final accuracy (mean) | float32 reference | total cycles |",
        "|---|---|---|---|---|---|---|---|---|---|"]
    for s, r in summary["schedules"].items():
        c = r["cycles_to_target"]
        per = ", ".join(_fmt_c(v) for v in c["per_seed"].values())
        n = len(summary["seeds"])
        missing = f" ({n - c['runs']} of {n} seeds not run)" if c["runs"] < n else ""
        vs = f"{r['vs_fixed8']:.2f}" if r["vs_fixed8"] is not None else "-"
        t = f"{r['time_to_target_ms']:.1f}" if r["time_to_target_ms"] is not None else "-"
        when = f" (measured on {r['measured_on']})" if r.get("measured_on") else ""
        lines.append(f"| `{s}` | {r['description']}{when} | {_fmt_c(c['median'])} | {per} | "
                     f"{c['reached']}/{c['runs']}{missing} | {vs} | {t} | "
                     f"{100 * r['final_accuracy']['mean']:.2f} % | "
                     f"{100 * r['reference_accuracy']:.2f} % | {r['total_cycles'] / 1e6:,.1f} M |")
    fast = {s: r["fast"] for s, r in summary["schedules"].items() if "fast" in r}
    if fast:
        lines += ["", "FAST runs: the step (0-based) at which each tensor moved to each width, "
                  "per seed "
                  "(`L0 x 2@0 4@12` = layer 0's activations at 2 bits from step 0, 4 bits "
                  "from step 12); the widths are decided by the host after every step from "
                  "the statistics read from the core (docs/tta.md).", "",
                  "| schedule | seed | tables | widths over the steps |", "|---|---|---|---|"]
        for s, f in fast.items():
            for seed, sw in f["raised_at_step"].items():
                text = "; ".join(f"{t} " + " ".join(f"{w}@{i}" for i, w in ch)
                                 for t, ch in sw.items())
                lines.append(f"| `{s}` | {seed} | {f['distinct_tables'][seed]} | {text} |")
    if plots_rel:
        lines += ["", f"Plots: [accuracy vs cycles]({plots_rel}/accuracy.png), "
                  f"[widths per layer over the steps]({plots_rel}/widths.png)"
                  + (f", [FAST's statistics and thresholds over the steps]({plots_rel}/"
                     f"fast_r.png)" if fast else "") + "."]
    lines += ["", f"Measured on commit {summary.get('commit', '?')}, machine "
              f"{summary.get('machine', '?')}."]
    merged = summary.get("merged_from")
    if merged and merged["schedules"]:
        lines[-1] += (f" The rows marked \"measured on {merged['commit']}\" ("
                      + ", ".join(f"`{s}`" for s in merged["schedules"])
                      + f") are kept from the sweep at commit {merged['commit']} (not rerun "
                      f"here); their `vs fixed 8` is against this sweep's fixed 8-bit row. The "
                      f"plots show this sweep's runs only.")
    return "\n".join(lines)


def plots(summary: dict, results, out: Path) -> list:
    """Accuracy vs cycles per schedule (seeds' mean at each measurement); widths per layer and
    tensor over the steps as a heat map per schedule (seed 0's run)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    out.mkdir(parents=True, exist_ok=True)
    by = {}
    for r in results:
        by.setdefault(r["schedule"], []).append(r)
    names = [s for s in summary["schedules"] if s in by]     # merged rows have no runs here
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.get_cmap("tab20").colors
    for n_, s in enumerate(names):
        runs = sorted(by.get(s, []), key=lambda r: r["seed"])
        if not runs:
            continue
        n = min(len(r["curve"]) for r in runs)
        cyc = np.mean([[p["cycles"] for p in r["curve"][:n]] for r in runs], axis=0)
        acc = np.mean([[p["accuracy"] for p in r["curve"][:n]] for r in runs], axis=0)
        ax.plot(cyc / 1e6, 100 * acc, label=s, lw=1.2, color=colors[2 * n_ % 20],
                ls=("-", "--")[n_ >= 10])
    tgt = np.mean([r["target"] for r in results])
    ax.axhline(100 * tgt, color="k", ls=":", lw=1, label="target (mean)")
    ax.set_ylim(max(0, 100 * tgt - 30), 100)
    ax.set_xlabel("simulated training cycles (millions)")
    ax.set_ylabel("test accuracy (%)")
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(out / "accuracy.png", dpi=110)
    plt.close(fig)
    rows = len(names)
    fig, axes = plt.subplots(rows, 1, figsize=(8, 1.2 + 0.8 * rows), squeeze=False,
                             layout="constrained")
    im = None
    for ax, s in zip(axes[:, 0], names):
        r = min(by[s], key=lambda r: r["seed"])
        w = np.array(r["widths"])                             # [steps, layers, kinds]
        img = w.reshape(w.shape[0], -1).T                     # rows: layer.kind
        im = ax.imshow(img, aspect="auto", cmap="viridis", vmin=2, vmax=8,
                       interpolation="nearest")
        L = w.shape[1]
        ax.set_yticks(range(L * len(KINDS)),
                      [f"L{l} {k}" for l in range(L) for k in KINDS], fontsize=5)
        ax.set_ylabel(s, fontsize=7, rotation=0, ha="right", va="center")
        ax.tick_params(axis="x", labelsize=6)
    axes[-1, 0].set_xlabel("training step")
    if im is not None:
        fig.colorbar(im, ax=axes[:, 0].tolist(), label="mantissa width (bits)", shrink=0.6)
    fig.savefig(out / "widths.png", dpi=110)
    plt.close(fig)
    made = [out / "accuracy.png", out / "widths.png"]
    fast = [s for s in names if WidthSchedule.parse(s).needs_statistics]
    if fast:
        made.append(_plot_fast_r(plt, fast, by, out))
    return made


def _plot_fast_r(plt, names, by, out: Path) -> Path:
    """FAST runs (each schedule's lowest seed): every tensor's statistic r per step (log
    scale; gaps where a tensor is at the top width and has none) and each layer's threshold
    eps(l, i)."""
    from sim.host.schedule import fast_threshold
    fig, axes = plt.subplots(len(names), 1, figsize=(8, 3.2 * len(names)), squeeze=False,
                             layout="constrained")
    for ax, s in zip(axes[:, 0], names):
        sched = WidthSchedule.parse(s)
        r = min(by[s], key=lambda r: r["seed"])
        rs = np.array([[[np.nan if v is None else v for v in layer] for layer in step]
                       for step in r["r"]], float)                  # [steps, layers, kinds]
        n, L = rs.shape[0], rs.shape[1]
        for l in range(L):
            for j, k in enumerate(KINDS):
                ax.plot(rs[:, l, j], lw=0.8, label=f"L{l} {k}",
                        ls=("-", "--", ":")[j], color=f"C{l}")
            ax.plot([fast_threshold(l, L, i, n, sched.alpha, sched.beta) for i in range(n)],
                    color=f"C{l}", lw=1.6, alpha=0.4, label=f"eps(L{l}, i)")
        ax.set_yscale("log")
        ax.set_title(f"{s} (seed {r['seed']}): r(X) per tensor after each step", fontsize=8)
        ax.set_xlabel("training step")
        ax.legend(fontsize=6, ncol=4)
        ax.grid(alpha=0.3)
    fig.savefig(out / "fast_r.png", dpi=110)
    plt.close(fig)
    return out / "fast_r.png"


def _git_head() -> str:
    r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                       cwd=ROOT)
    return r.stdout.strip() or "unknown"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim.bench.tta", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke test: S = 4, 1 seed, 1 epoch of 6 steps, 3 schedules; writes "
                        "build/tta/quick/ (not docs/)")
    p.add_argument("--workers", type=int, default=2, help="LocalCluster worker processes (2)")
    p.add_argument("--scheduler", default=None, metavar="ADDRESS",
                   help="a running Dask scheduler (tcp://host:8786) instead of a LocalCluster")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated seeds (0,1,2)")
    p.add_argument("--epochs", type=int, default=None, help="epochs per run (10)")
    p.add_argument("--size", type=int, default=None, help="array size S (8)")
    p.add_argument("--schedules", default=None,
                   help="';'-separated schedules (they contain commas), e.g. '8;4;layer-hl' "
                        "(default: all of docs/tta.md)")
    p.add_argument("--cache", type=Path, default=None,
                   help="cache of finished runs and step cycles (build/tta, --quick: "
                        "build/tta/quick); the quick report is written there too")
    p.add_argument("--report-only", action="store_true",
                   help="write the report from the finished runs in the cache, run nothing "
                        "(the table says how many seeds each schedule has)")
    p.add_argument("--merge-previous", action="store_true",
                   help="keep the rows of docs/bench/tta.json for the schedules this sweep "
                        "does not run (marked with the commit they were measured on)")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    try:
        if args.quick:
            spec = SweepSpec(size=4, epochs=1, steps_per_epoch=6, eval_every=3)
            schedules, seeds, cache = QUICK_SCHEDULES, (0,), WORK / "quick"
        else:
            spec = SweepSpec()
            seeds = tuple(int(v) for v in args.seeds.split(","))
            schedules, cache = SCHEDULES, WORK
        if args.epochs is not None:
            spec = replace(spec, epochs=args.epochs)
        if args.size is not None:
            spec = replace(spec, size=args.size)
        if args.cache is not None:
            cache = args.cache
        if args.schedules:
            schedules = tuple(s.strip() for s in args.schedules.split(";") if s.strip())
        for s in schedules:
            WidthSchedule.parse(s).check(spec.train_spec("8", 0).config.array.widths)
        if args.workers < 1:
            raise ValueError(f"--workers must be >= 1, not {args.workers}")
    except (ValueError, TypeError) as exc:
        print(f"bench-tta: error: {exc}", file=sys.stderr)
        return 2
    if args.report_only:
        results = cached_runs(spec, schedules, seeds, cache)
    else:
        results = sweep(spec, schedules, seeds, workers=args.workers,
                        scheduler=args.scheduler, cache=cache, progress=not args.no_progress)
    if not results:
        print("bench-tta: no finished runs to report", file=sys.stderr)
        return 1
    summary = summarize(spec, schedules, seeds, results, fmax_mhz())
    summary.update(commit=_git_head(), machine=platform.machine())
    if args.merge_previous and not args.quick and (DOCS_BENCH / "tta.json").exists():
        try:
            merge_previous(summary, json.loads((DOCS_BENCH / "tta.json").read_text()),
                           SCHEDULES + tuple(s for s in schedules if s not in SCHEDULES))
        except ValueError as exc:
            print(f"bench-tta: error: {exc}", file=sys.stderr)
            return 2
    if args.quick:
        out = cache
        (out / "tta.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        (out / "tta.md").write_text(markdown(summary, ".") + "\n")
        plots(summary, results, out)
    else:
        write_json("tta", summary)
        write_markdown("tta", markdown(summary, "tta"))
        plots(summary, results, PLOTS)
        out = DOCS_BENCH
    print(f"wrote {out}/tta.json, tta.md and the plots")
    return 0


if __name__ == "__main__":
    sys.exit(main())
