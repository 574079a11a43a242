"""FAST in the training core (Amaranth simulator), bit-exact with the golden model: the
per-layer statistics the host reads, host PREC between steps, and the sequencer's ADAPT
raising widths from the statistics and the threshold table, all without reloading the program
(docs/fast.md)."""
import numpy as np
import pytest

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD
from hdl.core.isa import THRESH_NEVER, Status
from sim.host.compiler import MLP, OPERAND_TENSORS, compile_mlp
from sim.host.optim import Adam
from sim.model.core import CoreModel, adapt_raises
from sim.model.stats import StatState
from sim.tb.core_cases import fast_program, fast_step, fast_thresholds

from test_core import CFG, _run_core

DESC = MLP(layers=(4, 6, 3), batch=4, optimizer=Adam(lr=1e-2))


def _case():
    comp = compile_mlp(DESC, CFG)
    rng = np.random.default_rng(3)
    Ws = [rng.standard_normal((a, b)).astype(np.float32)
          for a, b in zip(DESC.layers[:-1], DESC.layers[1:])]
    bs = [rng.standard_normal(b).astype(np.float32) * 0.1 for b in DESC.layers[1:]]
    xs = [rng.standard_normal((4, 4)).astype(np.float32) for _ in range(3)]
    ys = [rng.integers(0, 3, 4) for _ in range(3)]
    return comp, Ws, bs, xs, ys


# about 50 s of the Amaranth simulator: ``make test-long``; ``make test`` runs the same scenario
# on the generated Verilog (tests/test_core_cocotb.py ``s4_fast_adapt``)
@pytest.mark.long
def test_adapt_and_prec_change_widths_without_reloading_the_program():
    comp, Ws, bs, xs, ys = _case()
    program = fast_program(comp)                          # ADAPT at the top of every step
    start = [("prec", layer, mode, 4, 4, 0) for layer in range(2)
             for mode in (FWD, BWD_DATA, BWD_WEIGHT)]
    # thresholds from the step-1 statistics of the golden model: below r (raise) for some,
    # above r (keep) for others, "never" for the rest
    probe = CoreModel(CFG)
    probe.apply(comp.init_actions(Ws, bs) + [("program", program)] + start
                + fast_step(comp, xs[0], ys[0], 1))
    seen = {k for k, s in probe.stat_states().items() if s.seen}
    assert seen == {(layer, mode, op) for layer in range(2)       # layer 0 has no dX pass
                      for mode in (FWD, BWD_DATA, BWD_WEIGHT) for op in (0, 1)
                      if (layer, mode) != (0, BWD_DATA)}
    raise_ = [(0, FWD, 1), (1, BWD_WEIGHT, 0), (1, FWD, 0)]
    keep = [(0, FWD, 0), (1, BWD_DATA, 1)]
    thresh = fast_thresholds(probe.stat_states(), raise_, keep)

    actions = (comp.init_actions(Ws, bs) + [("program", program)] + start
               + fast_step(comp, xs[0], ys[0], 1) + [("stats", "stats1")] + thresh
               + fast_step(comp, xs[1], ys[1], 2) + [("stats", "stats2")]
               + fast_step(comp, xs[2], ys[2], 3, prec=[(1, BWD_WEIGHT, 6, 2, 1)])
               + [("stats", "stats3")] + comp.read_actions())
    assert sum(a[0] == "program" for a in actions) == 1          # loaded once
    model = CoreModel(CFG)
    want = model.apply(actions)
    # ADAPT of step 2 raised exactly the widths whose r crossed the threshold; step 3's PREC
    # wrote (1, BWD_WEIGHT) and step 3's ADAPT raised nothing (thresholds as before, new r)
    assert model.prec[(0, FWD)][1] == 6 and model.prec[(1, FWD)][0] == 6
    assert model.prec[(0, FWD)][0] == 4 and model.prec[(1, BWD_DATA)][1] == 4
    # the widths matter: without the thresholds the weights come out different
    plain = CoreModel(CFG).apply([a for a in actions if a[0] != "thresh"])
    assert not np.array_equal(plain["params"], want["params"])

    got = _run_core(actions)
    assert got["run"] == want["run"] == [(Status.OK, 0)] * 3
    for key in ("params", "grads", "m", "v", "loss0", "stats1", "stats2", "stats3"):
        assert (np.array_equal(got[key], want[key]) if key not in ("stats1", "stats2", "stats3")
                else got[key] == want[key]), key
    for name in want["status"]:
        assert got["status"][name] == want["status"][name], name


def test_threshold_range_in_the_model():
    """The model's THRESH rejects mode 3 and layers past the table like the host port."""
    model = CoreModel(CFG)
    with pytest.raises(ValueError, match="threshold"):
        model.set_threshold(CFG.layers, 0, 0, 1)
    with pytest.raises(ValueError, match="threshold"):
        model.set_threshold(0, 3, 0, 1)
    with pytest.raises(ValueError, match="threshold value"):
        model.set_threshold(0, 0, 0, 1 << 32)
    assert model.thresholds[(0, 0, 0)] == THRESH_NEVER


def test_adapt_rule_in_the_model():
    """ADAPT raises by 2 only where ``num * 2**16 > t * den``, clamps at max_mantissa and
    clears every statistic."""
    assert adapt_raises(StatState(0, 1, 4, True), (1 << 14) - 1)
    assert not adapt_raises(StatState(0, 1, 4, True), 1 << 14)         # r == t: no
    assert not adapt_raises(StatState(0, 5, 0, False), 0)               # no statistic
    model = CoreModel(CFG)
    model.prec[(0, FWD)] = (6, 8, 0)
    for op in (0, 1):
        model.stats[(0, FWD)][op].state = StatState(0, 1, 4, True)
        model.set_threshold(0, FWD, op, 0)
    model.adapt()
    assert model.prec[(0, FWD)] == (8, 8, 0)
    assert not any(s.seen for s in model.stat_states().values())


def test_precision_by_tensor():
    """Weights, activations and gradients each get their own width, mapped onto the operands
    of every pass."""
    comp = compile_mlp(DESC, CFG)
    t = comp.precision_by_tensor(weights=[2, 4], activations=6, gradients=8, rounding=1)
    assert t[(0, FWD)] == (6, 2, 1) and t[(1, FWD)] == (6, 4, 1)
    assert t[(1, BWD_DATA)] == (8, 4, 1) and t[(0, BWD_WEIGHT)] == (6, 8, 1)
    assert OPERAND_TENSORS[BWD_WEIGHT] == ("activations", "gradients")
    with pytest.raises(ValueError, match="weights"):
        comp.precision_by_tensor(weights=[2, 4, 6])
    with pytest.raises(ValueError, match="width_a"):
        comp.precision_by_tensor(activations=5)
