"""The training run on the Verilated S = 4 core (``sim/verilated``): bit-exact with the golden
model, the check catches a wrong word, interrupt and resume equal an uninterrupted run, the
bare C++ loop replays the same work, and a hang is a TimeoutError."""
import json
import subprocess

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from hdl.core.host import HostOp
from sim.host.compiler import compile_mlp
from sim.host.driver import CoreDriver, pack_cmd
from sim.host.train import CheckFailed, TrainSpec, train
from sim.verilated.build import TEST_CXX_OPT
from sim.verilated.core import Recorder, VerilatedCore, run_sync

# builds the training core and its C++ loop in Verilator: minutes under load
pytestmark = pytest.mark.timeout(3600)

SPEC = TrainSpec(size=4, widths="2", epochs=2, steps_per_epoch=2, check_every=1)


@pytest.fixture(scope="module")
def core():
    c = VerilatedCore(CoreConfig.preset("tiny"), build_log=lambda *a: None,
                      cxx_opt=TEST_CXX_OPT)
    yield c
    c.close()


def _fresh(core):
    """The run re-initialises every region it uses, so one model serves every test."""
    core.reset()
    return core


def test_short_run_is_bit_exact_and_writes_its_outputs(core, tmp_path):
    _fresh(core)
    core.recorder = Recorder()
    c0 = core.cycles
    res = train(SPEC, tmp_path, progress=False, log=lambda *a: None, core=core)
    rec, core.recorder = core.recorder, None
    s = res.summary
    assert s["status"] == "done" and s["golden_checked"]
    # initialisation + 4 steps with memories + the final memory compare
    assert s["golden_checks"] == 1 + 2 * 4 + 1
    for name in ("run.json", "steps.json", "epochs.json", "weights.npz", "checkpoint.npz",
                 "loss.png", "accuracy.png", "cycles.png"):
        assert (tmp_path / name).stat().st_size > 0, name
    w = np.load(tmp_path / "weights.npz")
    assert sorted(w.files) == ["W0", "W1", "b0", "b1"]
    assert np.array_equal(w["W1"].view(np.uint32), res.weights[1].view(np.uint32))
    epochs = json.loads((tmp_path / "epochs.json").read_text())
    assert [e["epoch"] for e in epochs] == [0, 1]
    steps = json.loads((tmp_path / "steps.json").read_text())
    assert len(steps) == 4 and all(st["step_cycles"] > st["run_cycles"] > 0 for st in steps)
    assert all(st["width"] == 2 and st["mac_bound_cycles"] > 0 for st in steps)
    # the bare C++ loop replays the same commands in the same number of cycles
    path = tmp_path / "cmds.bin"
    rec.save(path)
    out = subprocess.run([str(core.build_dir / "tessera_core_bare"), str(path)],
                         capture_output=True, text=True, check=True, timeout=300)
    assert json.loads(out.stdout)["cycles"] == core.cycles - c0


def test_check_stops_at_a_corrupted_word(core, tmp_path):
    comp = compile_mlp(SPEC.mlp, SPEC.config)
    line = comp.regions["params"][0] + 3

    def corrupt(epoch, step, c):
        if (epoch, step) == (0, 1):
            drv = CoreDriver(c.config, c)
            old = run_sync(drv.read_lines(line, 1))
            old[0, 2] ^= 1 << 20
            run_sync(drv.write_lines(line, old))

    # the hook runs after step 2's memory compare was sent: the next one finds the word (pixel
    # 0 of the digits is always 0, so W0 row 0 changes no loss: only the memory check sees it)
    with pytest.raises(CheckFailed, match=r"epoch 2 step 1 memory: first differing word: "
                                          r"line \d+ lane 2 of 'params' = params\.W0\[0, \d+\]: "
                                          r"RTL 0x[0-9a-f]{8} \(.*\), golden 0x[0-9a-f]{8}"):
        train(SPEC, tmp_path, progress=False, plots=False, log=lambda *a: None,
              core=_fresh(core), on_step=corrupt)


# a fixed width's resume in make test-long: the FAST run resumes the same way, and its widths
# and statistics are part of the resumed state
@pytest.mark.parametrize("widths", [pytest.param("2", marks=pytest.mark.long), "fast:0.2,0.1"])
def test_interrupt_and_resume_equal_an_uninterrupted_run(core, tmp_path, widths):
    """Also FAST in ``tessera train``: the widths rise from the statistics read after each
    step (compared with the golden model's every step), and a resumed run continues from the
    widths it had reached."""
    spec = TrainSpec(size=4, widths=widths, epochs=3, steps_per_epoch=2, check_every=2)
    whole = train(spec, tmp_path / "a", progress=False, plots=False, log=lambda *a: None,
                  core=_fresh(core))
    steps = json.loads((tmp_path / "a" / "steps.json").read_text())
    if widths.startswith("fast"):
        assert steps[0]["widths"] == [[2, 2, 2], [2, 2, 2]]
        assert len({str(s["widths"]) for s in steps}) >= 2, "FAST must raise a width here"
        assert all(s["width"] is None and s["mac_bound_cycles"] is None for s in steps)
        for s in steps:                  # r per layer [x, w, g]; none at 8 bits
            assert all((r is None) == (w == 8) for rl, wl in zip(s["r"], s["widths"])
                       for r, w in zip(rl, wl))

    def stop(epoch, step, c):
        if (epoch, step) == (1, 0):
            raise KeyboardInterrupt

    part = train(spec, tmp_path / "b", progress=False, plots=False, log=lambda *a: None,
                 core=_fresh(core), on_step=stop)
    assert part.interrupted and part.summary["epochs_done"] == 1
    assert json.loads((tmp_path / "b" / "run.json").read_text())["status"] == "interrupted"
    resumed = train(spec, tmp_path / "b", resume=True, progress=False, plots=False,
                    log=lambda *a: None, core=_fresh(core))
    assert resumed.summary["golden_checked"] and len(resumed.epochs) == 3
    again = json.loads((tmp_path / "b" / "steps.json").read_text())
    assert [s["widths"] for s in again] == [s["widths"] for s in steps]
    for a, b in zip(whole.weights + whole.biases, resumed.weights + resumed.biases):
        assert np.array_equal(a.view(np.uint32), b.view(np.uint32))
    with pytest.raises(ValueError, match="different run"):
        train(TrainSpec(size=4, widths="4", epochs=3, steps_per_epoch=2), tmp_path / "b",
              resume=True, progress=False, core=_fresh(core))


def test_a_run_that_does_not_finish_is_a_timeout(core):
    _fresh(core)
    cfg = core.config
    # START with an empty program memory answers at once; a READ stream with a deadline of one
    # cycle cannot finish
    with pytest.raises(TimeoutError, match="responses within 1 cycles"):
        core.transact_sync([pack_cmd(cfg, HostOp.READ, i) for i in range(8)], 1)



def test_unknown_cxx_opt_is_rejected():
    from sim.verilated.build import build_core
    with pytest.raises(ValueError, match=r"cxx_opt.*'-O9'"):
        build_core("tiny", cxx_opt="-O9")
