"""Pipeline-parallel training across golden-model cores (sim/host/pipeline.py) against one core
running the same micro-batches, the stage programs of sim/host/compiler.py, and the schedule
timeline's bubble against (p - 1) / (m + p - 1)."""
from fractions import Fraction

import numpy as np
import pytest

from hdl.core.config import CoreConfig
from hdl.core.isa import Acc, Op, check_program_for, decode
from sim.host.compiler import MLP, compile_mlp
from sim.host.optim import SGD, Adam, LossScale, Momentum
from sim.host.pipeline import (Pipeline, bubble_formula, even_bounds, stage_order, timeline)
from sim.model.core import CoreModel
from test_dataparallel import _init


def _bits(arrays):
    return [np.asarray(a, np.float32).view(np.uint32) for a in arrays]


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(u, v) for u, v in zip(_bits(a), _bits(b)))


@pytest.mark.parametrize("layers,stages,bounds,mb,opt,schedule", [
    ((64, 64, 10), 2, None, 4, Adam(), "gpipe"),
    ((64, 64, 10), 2, None, 2, Momentum(0.05, 0.9), "1f1b"),
    ((64, 32, 32, 10), 3, None, 4, SGD(0.1), "1f1b"),
    ((64, 32, 32, 10), 2, (0, 1, 3), 2, Adam(), "gpipe"),
])
def test_pipeline_equals_one_core(layers, stages, bounds, mb, opt, schedule):
    """Three steps: losses, parameters, gradients and optimizer state bit for bit equal to one
    core running the same micro-batches (nearest rounding)."""
    B = 16
    rng, W, b = _init(7, layers)
    desc = MLP(layers=layers, batch=B, micro_batches=mb, optimizer=opt)
    one, core = compile_mlp(desc), CoreModel(CoreConfig())
    core.apply(one.init_actions(W, b))
    pl = Pipeline(desc, stages=stages, bounds=bounds, schedule=schedule)
    pl.init(W, b)
    for t in (1, 2, 3):
        x = rng.random((B, layers[0])).astype(np.float32)
        y = rng.integers(0, layers[-1], B)
        r = core.apply(one.step_actions(x, y, t) + one.read_actions())
        want = one.decode_step(r)
        got = pl.step(x, y, t)
        assert not want["skipped"] and not got["skipped"]
        assert np.array_equal(want["losses"].view(np.uint32), got["losses"].view(np.uint32))
        state = pl.read()
        Ws, bs = one.decode_params(r)
        assert _same(Ws + bs, state["params"]["W"] + state["params"]["b"]), t
        g = one.decode_grads(r)
        assert _same(g["W"] + g["b"], state["grads"]["W"] + state["grads"]["b"]), t
        for key, e in one.decode_opt_state(r).items():
            assert _same(e["W"] + e["b"], state[key]["W"] + state[key]["b"]), (t, key)
    # every FP32 word of the activations forward and the gradients back went over a "link"
    bounds = pl.bounds
    per_mb = sum(2 * desc.rows * layers[c] for c in bounds[1:-1])
    assert pl.link_words == 3 * mb * per_mb
    want_peak = [mb] * stages if schedule == "gpipe" else [min(stages - s, mb)
                                                            for s in range(stages)]
    assert pl.peak_stash == want_peak
    assert pl.timeline()["peak_stash"] == want_peak


def test_stage_programs_and_options():
    cfg = CoreConfig()
    first = compile_mlp(MLP(layers=(64, 32), batch=8, head=False, one_pass=False), cfg)
    last = compile_mlp(MLP(layers=(32, 10), batch=8, input_grad=True, one_pass=False), cfg)
    for c in (first, last):
        progs = c.stage_programs()
        for name, prog in progs.items():
            assert check_program_for(prog, cfg)[0] == 0, name
        # forward + backward are the split step's backward program (same words)
        assert progs["forward"][:-1] + progs["backward"] == c.split_programs()[0]
        accs = [decode(w)[1]["acc"] for w in progs["backward_acc"]
                if decode(w)[0] in (Op.MATMUL, Op.REDUCE) and decode(w)[1].get("acc")]
        assert accs and set(accs) == {Acc.ON}
    ops = lambda c: [decode(w)[0] for w in c.program]      # noqa: E731
    assert Op.SOFTMAX_XENT not in ops(first) and Op.SOFTMAX_XENT in ops(last)
    assert first.stage_io()["dx"] is None and last.stage_io()["dx"] == \
        (last.stage_io()["dx"][0], 8, 32)
    assert "relu" in first.notes[1] and "relu" not in last.notes[1]
    with pytest.raises(ValueError, match="micro_batches"):
        MLP(head=False, micro_batches=2)
    with pytest.raises(ValueError, match="schedule"):
        MLP(input_grad=True, schedule="overlap")
    with pytest.raises(TypeError, match="head"):
        MLP(head=1)
    with pytest.raises(ValueError, match="micro_batches"):
        compile_mlp(MLP(micro_batches=2)).stage_programs()


@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
@pytest.mark.parametrize("p", [2, 3, 4])
@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_equal_stages_bubble_is_the_formula(schedule, p, m):
    f, b = 300, 600
    tl = timeline([f] * p, [b] * p, m, schedule=schedule)
    assert tl["makespan"] == (m + p - 1) * (f + b)
    p_busy = Fraction(sum(tl["busy"]), p * tl["makespan"])
    assert 1 - p_busy == Fraction(p - 1, m + p - 1)
    assert tl["bubble"] == pytest.approx(bubble_formula(p, m), rel=1e-12)
    # link latency: the forward and backward chains each wait (p - 1) times more
    # (1F1B waits on round trips in its steady state: at least as long)
    lat = timeline([f] * p, [b] * p, m, schedule=schedule, latency=40)
    gpipe = (m + p - 1) * (f + b) + 2 * (p - 1) * 40
    if schedule == "gpipe":
        assert lat["makespan"] == gpipe
    else:
        assert lat["makespan"] >= gpipe
    # every op: after its input and in its stage's order, stages never run two ops at once
    for s in range(p):
        spans = [tl["ops"][(s, k, j)] for k, j in stage_order(schedule, p, m, s)]
        assert all(e0 <= s1 for (_, e0), (s1, _) in zip(spans, spans[1:]))
        for j in range(m):
            if s:
                assert tl["ops"][(s, "F", j)][0] >= tl["ops"][(s - 1, "F", j)][1]
                assert tl["ops"][(s - 1, "B", j)][0] >= tl["ops"][(s, "B", j)][1]


def test_unequal_stages_bubble_exceeds_the_formula():
    """The slowest stage sets the pace: the others idle, beyond (p - 1) / (m + p - 1)."""
    for m in (2, 4, 8):
        tl = timeline([512, 128], [512, 256], m)
        assert tl["bubble"] > bubble_formula(2, m)
    # one micro-batch runs the stages one after the other: 1 - 1/p whatever the durations
    assert timeline([512, 128], [512, 256], 1)["bubble"] == pytest.approx(0.5, rel=1e-12)
    # GPipe and 1F1B have the same makespan for equal stages; 1F1B stashes fewer
    g = timeline([5] * 4, [9] * 4, 8, schedule="gpipe")
    o = timeline([5] * 4, [9] * 4, 8, schedule="1f1b")
    assert g["makespan"] == o["makespan"] and g["peak_stash"] == [8] * 4
    assert o["peak_stash"] == [4, 3, 2, 1]


def test_errors():
    desc = MLP(layers=(64, 64, 10), batch=16, micro_batches=2)
    with pytest.raises(ValueError, match="stages"):
        Pipeline(desc, stages=3)
    with pytest.raises(ValueError, match="bounds"):
        Pipeline(desc, stages=2, bounds=(0, 2, 2))
    with pytest.raises(ValueError, match="schedule"):
        Pipeline(desc, schedule="zigzag")
    with pytest.raises(ValueError, match="loss_scale"):
        Pipeline(desc.replace(loss_scale=LossScale()))
    with pytest.raises(TypeError, match="desc"):
        Pipeline((64, 10))
    with pytest.raises(ValueError, match="latency"):
        timeline([1, 1], [1, 1], 2, latency=-1)
    with pytest.raises(ValueError, match="durations"):
        timeline([1, 0], [1, 1], 2)
    with pytest.raises(ValueError, match="micro_batches"):
        bubble_formula(2, 0)
    with pytest.raises(ValueError, match="stages"):
        even_bounds(2, 3)
    assert even_bounds(5, 3) == (0, 2, 4, 5)
    pl = Pipeline(desc)
    with pytest.raises(ValueError, match="step first"):
        pl.timeline()
    with pytest.raises(ValueError, match="shapes"):
        pl.step(np.zeros((8, 64), np.float32), np.zeros(8, int), 1)
