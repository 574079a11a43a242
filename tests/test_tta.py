"""FAST in the time-to-accuracy sweep (sim/bench/tta.py) on the golden model, no Verilator: the
statistics a step reads are that step's alone, the per-tensor decision on real statistics, a
run whose widths follow the rule, and the cycles filled in afterwards for tables measured late.
The RTL side (golden == Verilated core with FAST) is tests/test_tta_verilated.py."""
import numpy as np
import pytest

from sim.bench.tta import SweepSpec, _Engine, _table_key, _table_of_key, attach_cycles, run_one
from sim.host.schedule import KINDS, OPERAND_KINDS, fast_threshold, fast_update, tensor_stats
from sim.model.stats import ratio

SPEC = SweepSpec(size=8, epochs=1, steps_per_epoch=4, eval_every=2)
L = 2
ROWS = [np.arange(32), np.arange(32, 64)]


def _engine(schedule):
    eng = _Engine("golden", SPEC.train_spec(schedule, 0))
    eng.start()
    return eng


def _slot_ratios(states, layer, kind):
    return [ratio(st) for (l, mode, op), st in states.items()
            if l == layer and mode in OPERAND_KINDS and OPERAND_KINDS[mode][op] == kind
            and st.seen and st.den]


def test_a_steps_statistics_are_its_own():
    """FAST's program starts with ADAPT (thresholds at reset: it raises nothing, it clears):
    the statistics read after step 2 equal those of step 2 alone, not of steps 1 and 2."""
    fast = _engine("fast")
    table = fast.sched.table(fast.sched.widths(L, epoch=0, epochs=1), L)
    _, cycles, st1 = fast.step(ROWS[0], table)
    assert cycles is None and any(s.seen for s in st1.values())
    _, _, st2 = fast.step(ROWS[1], table)
    # the same two steps, statistics cleared by hand before step 2, no ADAPT in the program
    alone = _engine("fast")
    alone.step(ROWS[0], table)
    alone.model.apply([("program", list(alone.comp.program))])
    alone.model.clear_stats()
    alone.step(ROWS[1], table)
    assert alone.model.stat_states() == st2
    # without the clear both steps accumulate: a different (larger) statistic
    both = _engine("fast")
    both.model.apply([("program", list(both.comp.program))])
    both.step(ROWS[0], table)
    both.step(ROWS[1], table)
    acc = both.model.stat_states()
    assert acc != st2
    assert all(ratio(acc[k]) != ratio(st2[k]) for k in st2 if st2[k].seen)


def test_fast_decision_on_real_statistics():
    eng = _engine("fast")
    s = eng.sched
    w2 = s.widths(L, epoch=0, epochs=1)
    _, _, st2 = eng.step(ROWS[0], s.table(w2, L))
    r2 = tensor_stats(st2)
    assert set(r2) == {(l, k) for l in range(L) for k in KINDS}
    for (l, k), r in r2.items():
        slots = _slot_ratios(st2, l, k)
        assert 1 <= len(slots) <= 2 and min(slots) <= r <= max(slots)
        assert 0.02 < r < 1.0, (l, k, r)
    # a threshold between the measured values: exactly the tensors above it move to 4 bits
    vals = sorted(r2.values())
    alpha = (vals[2] + vals[3]) / 2
    new = fast_update(r2, w2, i=0, iterations=4, layers=L, alpha=alpha, beta=0.0)
    assert {k for k, w in new.items() if w == 4} == {k for k, r in r2.items() if r > alpha}
    assert sum(w == 4 for w in new.values()) == 3 and set(new.values()) == {2, 4}
    # FAST's own thresholds on the same statistics: the rule with eps(l, i)
    got = s.advance(w2, r2, step=0, steps=4, layers=L)
    for (l, k), w in got.items():
        eps = fast_threshold(l, L, 0, 4, s.alpha, s.beta)
        assert w == (4 if r2[(l, k)] > eps else 2), (l, k)
    # two more bits shrink the statistic about 4x (it measures what 2 more bits change);
    # at the top width there is none
    w4 = {k: 4 for k in w2}
    _, _, st4 = eng.step(ROWS[1], s.table(w4, L))
    r4 = tensor_stats(st4)
    for k in r2:
        assert r2[k] / 8 < r4[k] < r2[k] / 2, (k, r2[k], r4[k])
    _, _, st8 = eng.step(ROWS[0], s.table({k: 8 for k in w2}, L))
    assert tensor_stats(st8) == {}


def test_fast_run_follows_the_rule_and_gets_its_cycles_later():
    spec = SweepSpec(size=8, epochs=1, steps_per_epoch=4, eval_every=2)
    rec = run_one(spec, "fast:0.15,0.1+sr", 0, engine="golden", cycles={})
    n = spec.steps_per_epoch
    assert len(rec["r"]) == len(rec["widths"]) == n
    # every step's widths are the rule applied to the previous step's statistics
    for i in range(n - 1):
        w = {(l, k): rec["widths"][i][l][j] for l in range(L) for j, k in enumerate(KINDS)}
        r = {(l, k): v for l in range(L) for j, k in enumerate(KINDS)
             if (v := rec["r"][i][l][j]) is not None}
        want = fast_update(r, w, i=i, iterations=n, layers=L, alpha=0.15, beta=0.1)
        assert [[want[(l, k)] for k in KINDS] for l in range(L)] == rec["widths"][i + 1]
    assert len(rec["tables"]) >= 2, "the widths must change in this run"
    # its tables were never measured: the run comes back without cycles ...
    assert rec["missing_tables"] == rec["tables"] and rec["step_cycles"] is None
    assert rec["cycles_to_target"] is None and rec["curve"][-1]["cycles"] is None
    for key in rec["tables"]:
        table, fast = _table_of_key(key)
        assert fast and _table_key(table, True) == key
        assert all(rnd == (l_m[1] != 0) for l_m, (_, _, rnd) in table.items())   # +sr
    # ... and gets them once they are measured (here: made-up cycles per table)
    known = {k: 1000 * (j + 1) for j, k in enumerate(rec["tables"])}
    attach_cycles(rec, known)
    assert rec["missing_tables"] == []
    assert rec["step_cycles"] == [known[rec["tables"][j]] for j in rec["step_tables"]]
    assert rec["total_cycles"] == sum(rec["step_cycles"])
    for p in rec["curve"]:
        assert p["cycles"] == sum(rec["step_cycles"][:p["step"]])
    hit = [p for p in rec["curve"] if p["accuracy"] >= rec["target"]]
    assert rec["cycles_to_target"] == (hit[0]["cycles"] if hit else None)


def test_golden_needs_the_cycle_table():
    with pytest.raises(ValueError, match="step-cycle table"):
        run_one(SweepSpec(size=8, epochs=1, steps_per_epoch=1), "fast", 0, engine="golden")


def test_merge_previous_keeps_missing_rows_marked():
    from sim.bench.tta import merge_previous

    def row(median):
        return {"cycles_to_target": {"median": median}, "vs_fixed8": None}
    spec = SweepSpec().to_dict()
    summary = {"spec": spec, "seeds": [0, 1, 2], "schedules": {"8": row(20.0),
                                                                "fast": row(5.0)}}
    previous = {"spec": spec, "seeds": [0, 1, 2], "commit": "abc1234",
                "schedules": {"8": row(22.0), "4": row(7.0), "2": row(None)}}
    assert merge_previous(summary, previous, ("8", "4", "2", "fast")) == ["4", "2"]
    rows = summary["schedules"]
    assert list(rows) == ["8", "4", "2", "fast"]
    assert rows["8"]["cycles_to_target"]["median"] == 20.0 and "measured_on" not in rows["8"]
    assert rows["4"]["measured_on"] == "abc1234" and rows["4"]["vs_fixed8"] == 7.0 / 20.0
    assert rows["2"]["vs_fixed8"] is None and rows["fast"]["vs_fixed8"] == 0.25
    with pytest.raises(ValueError, match="spec or seeds"):
        merge_previous(summary, {**previous, "seeds": [0]}, ("8",))


def test_fmax_is_the_slowest_engine_not_a_core(tmp_path, monkeypatch):
    """The sweep's time uses the lowest routed Fmax among the engines of synth.json: a slower
    whole-core row (an S = 4 core, a ring node) is another core's figure and is left out, and
    rows without an Fmax do not count."""
    import json

    import sim.bench.tta as tta
    rows = [{"block": "optim_engine", "preset": "default", "fmax_mhz": 83.0},
            {"block": "fp32_log", "preset": "default", "fmax_mhz": 62.5},
            {"block": "training_core_fpga", "preset": "tiny", "fmax_mhz": 50.0},
            {"block": "training_ring_node_fpga", "preset": "tiny", "fmax_mhz": 40.0},
            {"block": "training_core_fpga", "preset": "default", "fmax_mhz": None}]
    (tmp_path / "synth.json").write_text(json.dumps({"results": rows}))
    monkeypatch.setattr(tta, "DOCS_BENCH", tmp_path)
    assert tta.fmax_mhz() == (62.5, "fp32_log (default)")
