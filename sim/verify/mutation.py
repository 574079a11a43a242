"""Mutation testing of the Amaranth sources against the fast test tier (``make mutation``).

``python -m sim.verify.mutation [--sample N --seed S] [--budget SECONDS] [--jobs J]``

1. **Sites.** :mod:`sim.verify.mutants` lists every mutant of ``hdl/**/*.py`` (operators,
   comparisons, integer constants, ``m.If`` conditions, ``.eq`` sources).
2. **Test map.** Every fast-tier test file (``tests/test_*.py`` without ``cocotb`` or
   ``verilated`` in its name) runs once under :mod:`sim.verify.linetrace`, which records the
   ``hdl/`` lines each test executes (cached per file in ``build/mutation/map/``, traced
   again when the file or ``hdl/``/``sim/`` change). A mutant runs only the passing tests that execute
   one of its lines (all tests that execute any line of its file, for a site outside any
   function: module and class bodies run once, at import), the quickest parametrization of
   each test function first, then the others, quickest first, as many as fit
   ``--test-budget`` traced seconds (at least one); a survivor runs again with as many as fit
   ``--survivor-test-budget`` seconds (the quickest tests are often ones that only elaborate
   a design, which cannot see a change of behaviour), then, within the same budget, with the
   tests that execute the fewest ``hdl/`` files first, every parametrization (the block's
   own tests before those of the designs holding it).
3. **Runs.** Each worker owns a copy of the tree (``build/mutation/work/<n>/``: the files
   ``git ls-files`` lists, without ``__pycache__``); a mutant's file is written into the copy,
   pytest runs there (``python -m pytest -x -q -p no:cacheprovider -p no:xdist``, the copy's
   root first on ``sys.path``, bytecode writing off) and the file is restored. The worker
   checks once that ``hdl`` is imported from its copy. A mutant is ``killed`` when a test
   fails or errors, ``error`` when pytest reports a usage error or collects nothing (a fault of the tool, left
   out of the score), ``timeout`` when the run exceeds its deadline (``--timeout-factor`` times
   the tests' traced time plus ``--timeout-base`` seconds: a hang is caught, counted as
   killed, reported apart), ``survived`` otherwise. With ``--wide`` a survivor of the selected
   tests runs again on the whole files those tests are in (a test may depend on a design
   another test elaborated). A mutant no fast test executes survives without a run (``covered: false``).
4. **Equivalents.** ``sim/verify/mutation_equivalent.toml`` names, by mutant id, the
   survivors that cannot change behaviour, each with its reason and the ``code`` of its site
   (:meth:`Mutant.code <sim.verify.mutants.Mutant.code>`); they are reported as
   ``equivalent`` and left out of the score's denominator. An entry whose id no longer
   exists, or now names a site with other code (ids count identical sites in order, so a new
   one earlier in the same function shifts them), is *drifted*: it is not applied (such a
   survivor stays ``survived``), the report lists it (``drifted_equivalents``) and
   ``tests/test_mutation_tool.py`` fails until the table is corrected.

``--sample N --seed S`` draws N mutants deterministically (from the id-sorted list); the report
states the sampled and the full totals. ``--budget`` stops starting mutants after that many
seconds; mutants not started are reported as ``not_run`` and left out of the score.
``--rerun`` runs the survivors (and equivalents, errors) of the existing report again, e.g.
after adding tests that kill them, and updates that report.
Results go to ``docs/bench/mutation.json`` and ``docs/bench/mutation.md``.
"""
from __future__ import annotations

import argparse
import concurrent.futures as cf
import hashlib
import json
import os
import queue
import random
import shutil
import subprocess
import sys
import time
import tomllib
from collections import Counter
from pathlib import Path

from .mutants import OPERATORS, Mutant, all_mutants

ROOT = Path(__file__).resolve().parents[2]
DOCS_BENCH = ROOT / "docs" / "bench"
BUILD = ROOT / "build" / "mutation"
EQUIVALENT_TABLE = ROOT / "sim" / "verify" / "mutation_equivalent.toml"
PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
               "-m", "not cocotb and not verilator"]


def _env(extra=None) -> dict:
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", AMARANTH_USE_YOSYS="builtin")
    env.pop("PYTHONPATH", None)
    env.update(extra or {})
    return env


def fast_test_files(root: Path = ROOT) -> list[str]:
    """The fast tier's test files, relative to ``root``."""
    return sorted(p.relative_to(root).as_posix() for p in (root / "tests").glob("test_*.py")
                  if "cocotb" not in p.name and "verilated" not in p.name)


def _tree_files(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root,
                         capture_output=True, text=True, check=True).stdout.split("\n")
    return [f for f in out if f and (root / f).is_file() and "__pycache__" not in f]


def _fingerprint(root: Path) -> str:
    """Hash of the Python sources a test can depend on (``hdl/``, ``sim/`` but this tool)."""
    h = hashlib.sha1()
    for f in sorted(_tree_files(root)):
        if (f.split("/")[0] in ("hdl", "sim") and f.endswith(".py")
                and not f.startswith("sim/verify/")):
            h.update(f.encode())
            h.update((root / f).read_bytes())
    return h.hexdigest()


# --- the test map --------------------------------------------------------------------------
def build_map(jobs: int, log=print) -> dict:
    """Run every fast test file under the line tracer; return the merged map.

    Each file's trace is cached in ``build/mutation/map/`` under a key of the file's source
    and the sources of ``hdl/`` and ``sim/``: adding a test file traces that file alone.
    """
    (BUILD / "map").mkdir(parents=True, exist_ok=True)
    fp = _fingerprint(ROOT)

    def one(f):
        out = BUILD / "map" / (Path(f).stem + ".json")
        key_file = out.with_suffix(".key")
        key = hashlib.sha1(fp.encode() + (ROOT / f).read_bytes()).hexdigest()
        if out.exists() and key_file.exists():
            cached = json.loads(key_file.read_text())
            if cached["key"] == key:
                return json.loads(out.read_text())["tests"], cached["seconds"]
        out.unlink(missing_ok=True)
        t0 = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                            "-p", "no:xdist", "-p", "sim.verify.linetrace",
                            "-m", "not cocotb and not verilator", f],
                           cwd=ROOT, env=_env({"TESSERA_LINETRACE_OUT": str(out)}),
                           capture_output=True, text=True)
        dt = time.perf_counter() - t0
        log(f"map {f}: exit {r.returncode}, {dt:.1f} s", flush=True)
        if not out.exists():
            return {}, dt
        key_file.write_text(json.dumps({"key": key, "seconds": round(dt, 1)}))
        return json.loads(out.read_text())["tests"], dt

    tests, seconds = {}, 0.0
    with cf.ThreadPoolExecutor(jobs) as ex:
        for part, dt in ex.map(one, fast_test_files()):
            tests.update(part)
            seconds += dt
    return {"seconds": round(seconds, 1), "tests": tests}


class LineMap:
    """Which passing tests execute which ``hdl/`` lines."""

    def __init__(self, data: dict):
        self.seconds = {n: t["seconds"] for n, t in data["tests"].items()
                        if t["outcome"] == "passed"}
        self.by_line: dict[tuple[str, int], set[str]] = {}
        self.by_file: dict[str, set[str]] = {}
        #: how many hdl/ files each test executes: a block's own tests execute few
        self.n_files = {n: len(t["lines"]) for n, t in data["tests"].items()}
        for n, t in data["tests"].items():
            if n not in self.seconds:
                continue
            for path, lines in t["lines"].items():
                self.by_file.setdefault(path, set()).add(n)
                for ln in lines:
                    self.by_line.setdefault((path, ln), set()).add(n)

    def tests_for(self, m: Mutant, *, specific: bool = False) -> list[str]:
        """The tests that execute ``m``'s site: the quickest parametrization of each test
        function first (quickest first), then the other parametrizations (quickest first), so
        that a budget spends its seconds on different tests before repeating one.

        With ``specific``, every test in order of how many ``hdl/`` files it executes, then
        of its seconds: the block's own tests, every parametrization, before the tests of
        the designs that contain it. (Elaboration code runs in every test that builds a
        design holding the block, so the quickest parametrization of each of those can fill
        a budget before the block's own test reaches the parametrization that fails.)"""
        if m.module_level:
            found = set(self.by_file.get(m.path, ()))
        else:
            found = set()
            for ln in range(m.line, m.end_line + 1):
                found |= self.by_line.get((m.path, ln), set())
        if specific:
            return sorted(found, key=lambda n: (self.n_files[n], self.seconds[n], n))
        ordered = sorted(found, key=lambda n: (self.seconds[n], n))
        first, seen = [], set()
        for n in ordered:
            func = n.split("[")[0]
            if func not in seen:
                seen.add(func)
                first.append(n)
        return first + [n for n in ordered if n not in set(first)]

    def budgeted(self, tests: list[str], seconds: float) -> list[str]:
        """The leading ``tests`` whose traced seconds add up to at most ``seconds``; at least
        one."""
        out, total = [], 0.0
        for t in tests:
            if out and total + self.seconds[t] > seconds:
                break
            out.append(t)
            total += self.seconds[t]
        return out

    def files_of(self, tests: list[str]) -> list[str]:
        """Every passing test of the files ``tests`` are in, quickest first."""
        files = {t.split("::")[0] for t in tests}
        return sorted((n for n in self.seconds if n.split("::")[0] in files),
                      key=lambda n: (self.seconds[n], n))


# --- workers -------------------------------------------------------------------------------
class Worker:
    """A private copy of the tree in which one mutant at a time is tested."""

    def __init__(self, index: int):
        self.dir = BUILD / "work" / str(index)
        shutil.rmtree(self.dir, ignore_errors=True)
        for f in _tree_files(ROOT):
            dst = self.dir / f
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dst)
        r = subprocess.run([sys.executable, "-c", "import hdl; print(hdl.__file__)"],
                           cwd=self.dir, env=_env(), capture_output=True, text=True, check=True)
        if not Path(r.stdout.strip()).is_relative_to(self.dir):
            raise RuntimeError(f"worker {index} imports hdl from {r.stdout.strip()}, "
                               f"not from its copy {self.dir}")

    def pytest(self, tests: list[str], timeout: float) -> tuple[str, str | None, float]:
        """Run ``tests`` in the copy; (result, first failing test, seconds)."""
        t0 = time.perf_counter()
        try:
            r = subprocess.run([sys.executable, "-m", "pytest", *PYTEST_ARGS, *tests],
                               cwd=self.dir, env=_env(), capture_output=True, text=True,
                               timeout=timeout)
        except subprocess.TimeoutExpired:
            return "timeout", None, time.perf_counter() - t0
        dt = time.perf_counter() - t0
        if r.returncode == 0:
            return "survived", None, dt
        if r.returncode in (4, 5):      # usage error / nothing collected: a tool fault
            tail = (r.stdout + r.stderr).strip().splitlines() or [""]
            return "error", f"pytest exit {r.returncode}: {tail[-1][:200]}", dt
        killer = None
        for line in r.stdout.splitlines():
            if line.startswith(("FAILED ", "ERROR ")):
                killer = line.split(" ", 2)[1]
                break
        return "killed", killer or "(pytest exit %d)" % r.returncode, dt

    def run(self, m: Mutant, tmap: LineMap, args) -> dict:
        rec = {"id": m.id, "file": m.path, "line": m.line, "scope": m.scope,
               "operator": m.operator, "original": m.original, "mutant": m.mutated}
        covering = tmap.tests_for(m)
        tests = tmap.budgeted(covering, args.test_budget)
        rec["covering"] = len(covering)
        rec["tests"] = len(tests)
        rec["covered"] = bool(tests)
        if not tests:
            rec.update(result="survived", killed_by=None, seconds=0.0)
            return rec
        path = self.dir / m.path
        original = path.read_bytes()
        path.write_bytes(m.apply(original))
        try:
            stages = [tests]
            second = tmap.budgeted(covering, args.survivor_test_budget)
            if len(second) > len(tests):
                stages.append(second)
            # then the block's own tests first, every parametrization (same budget)
            own = tmap.budgeted(tmap.tests_for(m, specific=True), args.survivor_test_budget)
            if not set(own) <= set(second):
                stages.append(own)
            wider = tmap.files_of(second)
            if args.wide and len(wider) > len(tests):
                stages.append(wider)
            total = 0.0
            for sel in stages:
                timeout = args.timeout_base + args.timeout_factor * sum(tmap.seconds[t]
                                                                        for t in sel)
                result, killer, dt = self.pytest(sel, timeout)
                total += dt
                if result == "error":
                    # The mutant renamed a parametrized test (its ids come from the design's
                    # constants): run the whole files of the selected tests instead.
                    files = list(dict.fromkeys(t.split("::")[0] for t in sel))
                    result, killer, dt = self.pytest(files, timeout)
                    total += dt
                if result != "survived":
                    break
            rec.update(result=result, killed_by=killer, seconds=round(total, 2),
                       tests=len(sel))
        finally:
            path.write_bytes(original)
        return rec


# --- the run -------------------------------------------------------------------------------
def load_equivalents(path: Path = EQUIVALENT_TABLE) -> dict[str, dict]:
    """The equivalent-mutant table: ``{id: {"reason": ..., "code": ..., "site": ...}}``."""
    if not path.exists():
        return {}
    table = tomllib.loads(path.read_text())
    for mid, entry in table.items():
        for key in ("reason", "code"):
            if not entry.get(key):
                raise ValueError(f"{path.name}: mutant {mid} has no {key!r}")
    return table


def drifted_equivalents(table: dict[str, dict], everything: list[Mutant],
                        root: Path = ROOT) -> dict[str, str]:
    """The entries of ``table`` that no longer name the site they were written for,
    ``{id: why}``: the id is gone, or its mutant's :meth:`~sim.verify.mutants.Mutant.code`
    differs from the entry's ``code``."""
    by_id = {m.id: m for m in everything}
    sources: dict[str, bytes] = {}
    out = {}
    for mid, entry in table.items():
        m = by_id.get(mid)
        if m is None:
            out[mid] = "no such mutant in hdl/ now"
            continue
        src = sources.setdefault(m.path, (root / m.path).read_bytes())
        now = m.code(src)
        if now != " ".join(entry["code"].split()):
            out[mid] = f"now {m.describe()}: {now!r}, not {entry['code']!r}"
    return out


def applicable_equivalents(everything: list[Mutant]) -> tuple[dict[str, dict], list[str]]:
    """The equivalence table without its drifted entries, and the drifted ids (printed)."""
    table = load_equivalents()
    drifted = drifted_equivalents(table, everything)
    for mid, why in drifted.items():
        print(f"equivalent-table entry {mid} drifted, not applied: {why}", flush=True)
    return {k: v for k, v in table.items() if k not in drifted}, sorted(drifted)


def select(mutants: list[Mutant], sample: int | None, seed: int) -> list[Mutant]:
    ordered = sorted(mutants, key=lambda m: m.id)
    if sample is None or sample >= len(ordered):
        return ordered
    # In the sample's random order: mutants a --budget leaves unrun are a random subset too.
    return random.Random(seed).sample(ordered, sample)


def run(args) -> dict:
    t_start = time.perf_counter()
    everything = all_mutants(ROOT)
    chosen = select(everything, args.sample, args.seed)
    previous = []
    if args.rerun or args.only:
        # update the existing report: its sample, its other mutants, its run time
        report = json.loads((DOCS_BENCH / f"{args.out}.json").read_text())
        args.sample, args.seed = report["sample"], report["seed"]
        previous = report["mutants"]
        t_start -= report["seconds"]
        if args.rerun:
            ids = {r["id"] for r in previous
                   if r["result"] in ("survived", "equivalent", "error")}
            chosen = [m for m in everything if m.id in ids]
        else:
            # in the order given (e.g. the sample's order): a --budget leaves the tail unrun
            by_id = {m.id: m for m in everything}
            chosen = [by_id[i] for i in dict.fromkeys(args.only.split(",")) if i in by_id]
    equivalents, drifted = applicable_equivalents(everything)
    print(f"{len(everything)} mutants in hdl/, {len(chosen)} selected", flush=True)
    data = build_map(args.jobs)
    tmap = LineMap(data)
    map_seconds = data["seconds"]
    print(f"test map: {len(tmap.seconds)} passing fast tests ({map_seconds:.0f} s)", flush=True)

    workers: queue.Queue = queue.Queue()
    for i in range(args.jobs):
        workers.put(Worker(i))
    deadline = time.perf_counter() + args.budget if args.budget else None
    results: dict[str, dict] = {r["id"]: r for r in previous}

    def job(m: Mutant):
        if deadline is not None and time.perf_counter() > deadline:
            return {"id": m.id, "file": m.path, "line": m.line, "scope": m.scope,
                    "operator": m.operator, "original": m.original, "mutant": m.mutated,
                    "result": "not_run", "killed_by": None, "seconds": 0.0}
        w = workers.get()
        try:
            return w.run(m, tmap, args)
        finally:
            workers.put(w)

    with cf.ThreadPoolExecutor(args.jobs) as ex:
        for n, rec in enumerate(ex.map(job, chosen), 1):
            if rec["id"] in equivalents and rec["result"] == "survived":
                rec["result"] = "equivalent"
                rec["reason"] = equivalents[rec["id"]]["reason"]
            results[rec["id"]] = rec
            if rec["result"] != "not_run":
                print(f"[{n}/{len(chosen)}] {rec['result']:10s} {rec['seconds']:6.1f} s "
                      f"{rec['file']}:{rec['line']} {rec['operator']} {rec['original']} -> "
                      f"{rec['mutant']}  {rec.get('killed_by') or ''}", flush=True)
    stale = [mid for mid in equivalents if mid in results
             and results[mid]["result"] in ("killed", "timeout")]
    return summarize(list(results.values()), everything, args, time.perf_counter() - t_start,
                     map_seconds, stale, drifted)


def render(args) -> dict:
    """The existing report with the equivalent table applied again (no mutant runs)."""
    report = json.loads((DOCS_BENCH / f"{args.out}.json").read_text())
    everything = all_mutants(ROOT)
    equivalents, drifted = applicable_equivalents(everything)
    for r in report["mutants"]:
        if r["result"] in ("survived", "equivalent"):
            if r["id"] in equivalents:
                r["result"], r["reason"] = "equivalent", equivalents[r["id"]]["reason"]
            else:
                r["result"] = "survived"
                r.pop("reason", None)
    args.sample, args.seed, args.only = report["sample"], report["seed"], report["only"]
    args.jobs, args.budget = report["jobs"], report["budget_s"]
    stale = [r["id"] for r in report["mutants"]
             if r["id"] in equivalents and r["result"] in ("killed", "timeout")]
    return summarize(report["mutants"], everything, args, report["seconds"],
                     report["map_seconds"], stale, drifted)


def summarize(results, everything, args, seconds, map_seconds, stale, drifted=()) -> dict:
    counts = Counter(r["result"] for r in results)
    ran = [r for r in results if r["result"] != "not_run"]
    killed = counts["killed"] + counts["timeout"]
    scored = len(ran) - counts["equivalent"] - counts["error"]
    timed = [r["seconds"] for r in ran if r.get("covered", True) and r["seconds"]]
    # a mutant of an earlier run's sample left unrun whose site a later change of hdl/ removed
    # (a --rerun keeps the earlier records): it can no longer run
    current = {m.id for m in everything}
    gone = sum(1 for r in results if r["result"] == "not_run" and r["id"] not in current)
    return {
        "sites": len(everything),
        "sites_by_operator": dict(Counter(m.operator for m in everything)),
        "sample": args.sample, "seed": args.seed, "only": args.only or None,
        "selected": len(results),
        "total": len(ran),
        "killed": killed,
        "killed_by_failure": counts["killed"],
        "timeout": counts["timeout"],
        "survived": counts["survived"],
        "equivalent": counts["equivalent"],
        "not_run": counts["not_run"],
        "not_run_site_gone": gone,
        "error": counts["error"],
        "not_covered": sum(1 for r in ran if not r.get("covered", True)),
        "score": round(killed / scored, 4) if scored else None,
        "jobs": args.jobs, "budget_s": args.budget,
        "seconds": round(seconds, 1), "map_seconds": round(map_seconds, 1),
        "seconds_per_mutant_mean": round(sum(timed) / len(timed), 2) if timed else None,
        "seconds_per_mutant_median": round(sorted(timed)[len(timed) // 2], 2) if timed else None,
        "stale_equivalents": stale,
        "drifted_equivalents": list(drifted),
        "mutants": sorted(results, key=lambda r: (r["file"], r["line"], r["id"])),
    }


def markdown(rep: dict) -> str:
    lines = [
        "# Mutation testing",
        "",
        "Regenerate with `make mutation` (`python -m sim.verify.mutation`; method in "
        "[docs/testing.md](../testing.md#mutation-testing)). Mutants of `hdl/` run against the "
        "fast tier's tests that execute the mutated line. Times are wall-clock on a shared, "
        "loaded 2-core machine.",
        "",
        "| measure | value |",
        "|---|---|",
        f"| mutation sites in hdl/ | {rep['sites']} ("
        + ", ".join(f"{k} {rep['sites_by_operator'].get(k, 0)}" for k in OPERATORS) + ") |",
        f"| sample | {rep['sample'] if rep['sample'] is not None else 'all'} "
        f"(seed {rep['seed']}) |",
        f"| mutants run | {rep['total']} |",
        f"| killed (test failure + timeout) | {rep['killed']} "
        f"({rep['killed_by_failure']} + {rep['timeout']}) |",
        f"| survived | {rep['survived']} (of which not executed by any fast test: "
        f"{rep['not_covered']}) |",
        f"| equivalent (sim/verify/mutation_equivalent.toml) | {rep['equivalent']} |",
        f"| equivalent-table entries drifted (not applied) | "
        f"{', '.join(rep.get('drifted_equivalents') or []) or 'none'} |",
        f"| not run | {rep['not_run']} (budget: "
        f"{rep['not_run'] - rep.get('not_run_site_gone', 0)}; site no longer in hdl/: "
        f"{rep.get('not_run_site_gone', 0)}) |",
        f"| tool errors (pytest exit 4/5, not scored) | {rep['error']} |",
        f"| score killed / (run - equivalent - errors) | {rep['score']} |",
        f"| seconds per mutant, mean / median | {rep['seconds_per_mutant_mean']} / "
        f"{rep['seconds_per_mutant_median']} |",
        f"| run time (jobs) | {rep['seconds']:.0f} s ({rep['jobs']}), test map "
        f"{rep['map_seconds']:.0f} s (one pass, cached) |",
        "",
    ]
    interesting = [r for r in rep["mutants"] if r["result"] in ("survived", "equivalent")]
    if interesting:
        lines += ["## Survivors and equivalents", "",
                  "| id | site | operator | original → mutant | result | reason |",
                  "|---|---|---|---|---|---|"]
        for r in interesting:
            reason = r.get("reason") or ("no fast test executes it" if not r.get("covered", True)
                                         else "")
            lines.append(f"| `{r['id']}` | {r['file']}:{r['line']} | {r['operator']} | "
                         f"`{_cell(r['original'])}` → `{_cell(r['mutant'])}` | {r['result']} | "
                         f"{_cell(reason)} |")
        lines.append("")
    lines += ["## All mutants run", "",
              "| id | site | operator | original → mutant | result | killed by | s |",
              "|---|---|---|---|---|---|---|"]
    for r in rep["mutants"]:
        if r["result"] == "not_run":
            continue
        lines.append(f"| `{r['id']}` | {r['file']}:{r['line']} | {r['operator']} | "
                     f"`{_cell(r['original'])}` → `{_cell(r['mutant'])}` | {r['result']} | "
                     f"{_cell(r.get('killed_by') or '')} | {r['seconds']} |")
    return "\n".join(lines)


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("`", "'")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m sim.verify.mutation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sample", type=int, default=None, help="mutants drawn (default: all)")
    p.add_argument("--seed", type=int, default=1, help="seed of the sample")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds after which no new mutant starts")
    p.add_argument("--jobs", type=int, default=2, help="mutants run in parallel")
    p.add_argument("--timeout-base", type=float, default=60.0,
                   help="seconds added to each run's deadline")
    p.add_argument("--timeout-factor", type=float, default=4.0,
                   help="deadline = base + factor x the tests' traced seconds")
    p.add_argument("--test-budget", type=float, default=90.0,
                   help="a mutant runs the quickest tests executing its site whose traced "
                        "seconds add up to at most this (at least one test)")
    p.add_argument("--survivor-test-budget", type=float, default=300.0,
                   help="a survivor runs again with the quickest covering tests within this "
                        "many traced seconds")
    p.add_argument("--wide", action="store_true",
                   help="run a survivor again on the whole files of its tests")
    p.add_argument("--rerun", action="store_true",
                   help="run the survivors, equivalents and errors of the existing report "
                        "again (after adding tests) and update it in place")
    p.add_argument("--render", action="store_true",
                   help="rewrite the existing report with the equivalent table applied, "
                        "running nothing")
    p.add_argument("--only", default=None,
                   help="comma-separated mutant ids to run, in this order")
    p.add_argument("--list", action="store_true", help="print the mutation sites and exit")
    p.add_argument("--out", default="mutation", help="report name in docs/bench/")
    args = p.parse_args(argv)
    for name in ("sample", "jobs"):
        v = getattr(args, name)
        if v is not None and v < 1:
            p.error(f"--{name} must be >= 1, got {v}")
    if args.list:
        for m in all_mutants(ROOT):
            print(f"{m.id} {m.describe()}")
        return 0
    rep = render(args) if args.render else run(args)
    from sim.bench.common import write_json, write_markdown
    write_json(args.out, rep)
    write_markdown(args.out, markdown(rep))
    print(f"score {rep['score']}: {rep['killed']} killed ({rep['timeout']} by timeout), "
          f"{rep['survived']} survived, {rep['equivalent']} equivalent of {rep['total']} run "
          f"({rep['sites']} sites)")
    if rep["stale_equivalents"]:
        print(f"equivalent-table entries killed (remove them): {rep['stale_equivalents']}")
    if rep["drifted_equivalents"]:
        print(f"equivalent-table entries that name other code now (not applied; correct "
              f"them): {rep['drifted_equivalents']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
