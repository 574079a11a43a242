"""The time-to-accuracy sweep (sim/bench/tta.py) on the Verilated S = 4 core: the golden model
with the step-cycle table equals the RTL word for word and cycle for cycle on schedules that
change the widths between steps (the condition for it to stand in for the RTL in the sweep),
and the ``--quick`` sweep runs end to end on Dask, writes its report and resumes."""
import json

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from sim.bench import tta
from sim.bench.tta import StepCycles, SweepSpec, run_one, schedule_tables
from sim.verilated.core import VerilatedCore


@pytest.fixture(scope="module")
def core():
    c = VerilatedCore(CoreConfig.preset("tiny"), build_log=lambda *a: None)
    yield c
    c.close()


@pytest.mark.parametrize("schedule, epochs, steps", [
    ("4,2,6@step+sr", 2, 3),      # widths change every two steps, inside and across epochs
    ("xwg:2,6,4", 1, 2),          # a different width per operand of every pass
])
def test_golden_with_step_cycles_equals_the_rtl(core, schedule, epochs, steps):
    spec = SweepSpec(size=4, epochs=epochs, steps_per_epoch=steps, eval_every=2)
    cyc = StepCycles(spec, core=core)            # no file: measured here
    tables = schedule_tables(spec, schedule)
    assert cyc.measure(tables) == len(tables) and cyc.measure(tables) == 0
    rtl = run_one(spec, schedule, 1, engine="rtl", core=core)
    gold = run_one(spec, schedule, 1, engine="golden", cycles=cyc)
    widths = {w for step in rtl["widths"] for layer in step for w in layer}
    assert len(widths) >= 3, "the schedule must change widths"
    assert rtl["losses"] == gold["losses"]
    assert [p["accuracy"] for p in rtl["curve"]] == [p["accuracy"] for p in gold["curve"]]
    assert rtl["final_words"].keys() == gold["final_words"].keys() >= {"params", "grads"}
    for key, words in rtl["final_words"].items():
        assert np.array_equal(words, gold["final_words"][key]), key
    # the core's timing depends on the precision table only: every RTL step (other batches,
    # other step counts t) took exactly the cycles measured once per table
    assert rtl["step_cycles"] == gold["step_cycles"]
    assert rtl["total_cycles"] == gold["total_cycles"]
    assert len(set(rtl["step_cycles"])) == len(schedule_tables(spec, schedule))
    assert rtl["curve"][-1]["cycles"] == sum(rtl["step_cycles"])


def test_golden_needs_the_cycle_table():
    with pytest.raises(ValueError, match="step-cycle table"):
        run_one(SweepSpec(size=4, epochs=1, steps_per_epoch=1), "8", 0, engine="golden")
    with pytest.raises(ValueError, match="statistics"):
        run_one(SweepSpec(size=4, epochs=1, steps_per_epoch=1), "fast", 0, engine="golden",
                cycles={})


def test_quick_sweep_writes_its_report_and_resumes(tmp_path, capsys):
    assert tta.main(["--quick", "--workers", "1", "--no-progress", "--cache",
                     str(tmp_path)]) == 0
    first = capsys.readouterr().out
    assert "0 run(s) cached, 3 to run" in first
    d = json.loads((tmp_path / "tta.json").read_text())
    assert set(d["schedules"]) == {"8", "4,8@step+sr", "layer-hl"}
    assert [p["schedule"] for p in d["pending"]] == ["fast"]
    for s, row in d["schedules"].items():
        assert set(row["cycles_to_target"]["per_seed"]) == {"0"}
        assert 0 <= row["final_accuracy"]["mean"] <= 1
        assert row["total_cycles"] > 0
    # a cheaper schedule's run costs fewer cycles than fixed 8-bit over the same steps
    assert d["schedules"]["4,8@step+sr"]["total_cycles"] < d["schedules"]["8"]["total_cycles"]
    md = (tmp_path / "tta.md").read_text()
    assert "| `layer-hl` |" in md and "pending" in md
    for name in ("accuracy.png", "widths.png"):
        assert (tmp_path / name).stat().st_size > 0
    assert len(list((tmp_path / "runs").glob("*.json"))) == 3
    # resumed: nothing is run again, the report is the same
    assert tta.main(["--quick", "--workers", "1", "--no-progress", "--cache",
                     str(tmp_path)]) == 0
    assert "3 run(s) cached, 0 to run" in capsys.readouterr().out
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
