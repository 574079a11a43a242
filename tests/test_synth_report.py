"""boards.synth's bookkeeping without running yosys: a target whose synthesis stops is recorded
as a row saying why (the other targets still run, ``make synth`` exits non-zero), and the
reason is the last ``ERROR:`` line of its yosys log."""
import json

from boards import synth


def test_a_yosys_failure_is_a_row_and_the_run_fails(tmp_path, monkeypatch):
    monkeypatch.setattr(synth, "ROOT", tmp_path)
    monkeypatch.setattr(synth, "WORK", tmp_path / "build" / "synth")
    monkeypatch.setattr(synth, "_tool_versions", lambda: "test")

    def fake_resources(block, preset, work):
        work.mkdir(parents=True, exist_ok=True)
        if block == "bad":
            (work / "yosys.log").write_text("...\nERROR: first\nmore\nERROR: Assert `wire' "
                                            "failed in abc_ops_reintegrate.cc:513.\n")
            raise synth.SynthFailed(synth._yosys_error(work / "yosys.log", 1))
        return {"LUT4": 10, "CARRY (CCU2C)": 1, "FF": 5, "DSP (MULT18X18D)": 0,
                "BRAM (DP16KD)": 0, "LUTRAM (TRELLIS_DPR16X4)": 0, "cells": 16,
                "synth_seconds": 0.1}

    monkeypatch.setattr(synth, "synth_resources", fake_resources)
    assert synth.main(["--only", "bad:tiny,good:tiny", "--no-pnr"]) == 1
    bad = json.loads((tmp_path / "build/synth/bad-tiny/result.json").read_text())
    assert bad["synth_error"] == ("yosys stopped: `Assert `wire' failed in "
                                  "abc_ops_reintegrate.cc:513.`")
    good = json.loads((tmp_path / "build/synth/good-tiny/result.json").read_text())
    assert good["logic_cells"] == 12 and "synth_error" not in good
    md = (tmp_path / "docs/bench/synth.md").read_text()
    assert "| bad | tiny | n/a | n/a |" in md and "| good | tiny | 10 | 1 |" in md
    assert "bad tiny: no resources: yosys stopped: `Assert" in md
    assert synth._yosys_error(tmp_path / "missing.log", 3) == "yosys exit status 3"
