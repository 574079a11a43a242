"""The time-to-accuracy sweep (sim/bench/tta.py) on the Verilated S = 4 core: the golden model
with the step-cycle table equals the RTL word for word and cycle for cycle on schedules that
change the widths between steps (the condition for it to stand in for the RTL in the sweep),
FAST included (the widths decided from the statistics each engine reports), and the
``--quick`` sweep (with a FAST row) runs end to end on Dask, writes its report and resumes."""
import json

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from sim.bench import tta
from sim.bench.tta import StepCycles, SweepSpec, run_one, schedule_tables
from sim.verilated.build import TEST_CXX_OPT
from sim.verilated.core import VerilatedCore


@pytest.fixture(scope="module")
def core():
    c = VerilatedCore(CoreConfig.preset("tiny"), build_log=lambda *a: None,
                      cxx_opt=TEST_CXX_OPT)
    yield c
    c.close()


@pytest.mark.parametrize("schedule, epochs, steps", [
    ("4,2,6@step+sr", 2, 3),      # widths change every two steps, inside and across epochs
    ("xwg:2,6,4", 1, 2),          # a different width per operand of every pass
    # FAST: each engine's own statistics decide its widths (make test-long: FAST runs in
    # make test in tests/test_train_verilated.py, stochastic rounding in the first case)
    pytest.param("fast:0.2,0.1+sr", 2, 3, marks=pytest.mark.long),
])
def test_golden_with_step_cycles_equals_the_rtl(core, schedule, epochs, steps):
    spec = SweepSpec(size=4, epochs=epochs, steps_per_epoch=steps, eval_every=2)
    cyc = StepCycles(spec, core=core)            # no file: measured here
    tables = schedule_tables(spec, schedule)
    assert cyc.measure(tables) == len(tables) and cyc.measure(tables) == 0
    rtl = run_one(spec, schedule, 1, engine="rtl", core=core)
    gold = run_one(spec, schedule, 1, engine="golden", cycles=cyc)
    widths = {w for step in rtl["widths"] for layer in step for w in layer}
    assert len(widths) >= 3 or len(rtl["tables"]) >= 3, "the schedule must change widths"
    assert gold["missing_tables"] == [] and rtl["tables"] == gold["tables"]
    # FAST: the statistics read from the core equal the golden model's at every step, so the
    # widths (and everything after them) are the same
    assert rtl["r"] == gold["r"] and rtl["widths"] == gold["widths"]
    assert (rtl["r"] is not None) == schedule.startswith("fast")
    assert rtl["losses"] == gold["losses"]
    assert [p["accuracy"] for p in rtl["curve"]] == [p["accuracy"] for p in gold["curve"]]
    assert rtl["final_words"].keys() == gold["final_words"].keys() >= {"params", "grads"}
    for key, words in rtl["final_words"].items():
        assert np.array_equal(words, gold["final_words"][key]), key
    # the core's timing depends on the precision table only: every RTL step (other batches,
    # other step counts t) took exactly the cycles measured once per table
    assert rtl["step_cycles"] == gold["step_cycles"]
    assert rtl["total_cycles"] == gold["total_cycles"]
    assert len(set(rtl["step_cycles"])) == len(rtl["tables"])
    assert rtl["curve"][-1]["cycles"] == sum(rtl["step_cycles"])


# about 45 s: ``make test-long`` (``make bench-tta-quick`` runs the same sweep); ``make test``
# keeps the RTL-equals-golden checks above, which the sweep's figures rest on
@pytest.mark.long
def test_quick_sweep_writes_its_report_and_resumes(tmp_path, capsys):
    assert tta.main(["--quick", "--workers", "1", "--no-progress", "--cache",
                     str(tmp_path)]) == 0
    first = capsys.readouterr().out
    assert "0 run(s) cached, 4 to run" in first
    d = json.loads((tmp_path / "tta.json").read_text())
    assert set(d["schedules"]) == {"8", "4,8@step+sr", "layer-hl", "fast"}
    assert "pending" not in d
    fast = d["schedules"]["fast"]["fast"]
    assert fast["distinct_tables"]["0"] >= 1 and set(fast["raised_at_step"]["0"]) == {
        f"L{l} {k}" for l in range(2) for k in ("x", "w", "g")}
    # the FAST run's tables were measured on the core after the run came back
    cycles = json.loads((tmp_path / "step_cycles.json").read_text())
    keys = [k for by_spec in cycles.values() for t in by_spec.values() for k in t]
    assert sum(k.startswith("fast|") for k in keys) == fast["distinct_tables"]["0"]
    for s, row in d["schedules"].items():
        assert set(row["cycles_to_target"]["per_seed"]) == {"0"}
        assert 0 <= row["final_accuracy"]["mean"] <= 1
        assert row["total_cycles"] > 0
    # a cheaper schedule's run costs fewer cycles than fixed 8-bit over the same steps
    assert d["schedules"]["4,8@step+sr"]["total_cycles"] < d["schedules"]["8"]["total_cycles"]
    md = (tmp_path / "tta.md").read_text()
    assert "| `layer-hl` |" in md and "| `fast` | 0 |" in md and "pending" not in md
    for name in ("accuracy.png", "widths.png", "fast_r.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert len(list((tmp_path / "runs").glob("*.json"))) == 4
    # resumed: nothing is run again, the report is the same
    assert tta.main(["--quick", "--workers", "1", "--no-progress", "--cache",
                     str(tmp_path)]) == 0
    assert "4 run(s) cached, 0 to run" in capsys.readouterr().out
    again = json.loads((tmp_path / "tta.json").read_text())
    assert again["schedules"] == d["schedules"]
    # the report alone, from the cache
    (tmp_path / "tta.json").unlink()
    assert tta.main(["--quick", "--report-only", "--cache", str(tmp_path)]) == 0
    assert json.loads((tmp_path / "tta.json").read_text())["schedules"] == d["schedules"]
    assert tta.main(["--quick", "--report-only", "--cache", str(tmp_path / "none")]) == 1


def test_bad_options(capsys):
    assert tta.main(["--workers", "0"]) == 2
    assert tta.main(["--schedules", "7"]) == 2
    assert "error" in capsys.readouterr().err
