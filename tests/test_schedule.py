"""Precision schedules (sim/host/schedule.py): the widths of every tensor per layer and step,
the precision tables they make, the FAST rule's decision, and the errors."""
import pytest

from hdl.array.config import BWD_DATA, BWD_WEIGHT, FWD
from sim.host.schedule import (KINDS, NAMED, StatisticsMissing, WidthSchedule, fast_threshold,
                               fast_update, tensor_stats)


def widths_over(spec, layers=2, epochs=3, steps=6):
    s = WidthSchedule.parse(spec)
    spe = steps // epochs
    return [s.widths(layers, epoch=i // spe, epochs=epochs, step=i, steps=steps)
            for i in range(steps)]


@pytest.mark.parametrize("w", [2, 4, 6, 8])
def test_fixed(w):
    for ws in widths_over(str(w)):
        assert set(ws.values()) == {w} and len(ws) == 2 * len(KINDS)


def test_temporal_over_epochs_and_steps():
    # 3 stages over 4 epochs: the first stage gets the extra epoch
    s = WidthSchedule.parse("temporal-hl")
    assert s.stages == (8, 6, 4)
    assert [s.width(e, 4) for e in range(4)] == [8, 8, 6, 4]
    assert [s.width(e, 4) for e in range(4)] == [8, 8, 6, 4]
    assert [WidthSchedule.parse("temporal-lh").width(e, 3) for e in range(3)] == [4, 6, 8]
    assert [WidthSchedule.parse("mixed").width(e, 3) for e in range(3)] == [2, 4, 8]
    # per step: changes inside an epoch
    st = WidthSchedule.parse("8,2@step")
    assert [st.width(0, 1, i, 4) for i in range(4)] == [8, 8, 2, 2]
    assert [ws[(1, "g")] for ws in widths_over("8,6,4@step", epochs=1)] == [8, 8, 6, 6, 4, 4]


def test_layerwise():
    hl = widths_over("layer-hl", layers=3)[0]
    assert [hl[(l, "x")] for l in range(3)] == [8, 6, 4]
    lh = widths_over("layer-lh", layers=2)[0]
    assert [lh[(l, "w")] for l in range(2)] == [4, 8]
    # odd interpolations round down to an even width
    w = WidthSchedule.parse("layer:8,2").widths(4, epoch=0, epochs=1)
    assert [w[(l, "g")] for l in range(4)] == [8, 6, 4, 2]
    w = WidthSchedule.parse("layer:8,4").widths(4, epoch=0, epochs=1)
    assert [w[(l, "g")] for l in range(4)] == [8, 6, 4, 4]   # 8, 6.67, 5.33, 4


def test_table_operands_and_rounding():
    s = WidthSchedule.parse("xwg:4,8,6+sr")
    t = s.precision(2, epoch=0, epochs=1)
    for l in range(2):
        assert t[(l, FWD)] == (4, 8, 0)          # x, w; forward always nearest
        assert t[(l, BWD_DATA)] == (6, 8, 1)     # g, w
        assert t[(l, BWD_WEIGHT)] == (4, 6, 1)   # x, g
    assert WidthSchedule.parse("8").precision(1, epoch=0, epochs=1)[(0, BWD_DATA)] == (8, 8, 0)


def test_table_is_accepted_by_the_compiler():
    from hdl.core.config import CoreConfig
    from sim.host.compiler import MLP, compile_mlp
    from sim.host.optim import Adam
    comp = compile_mlp(MLP(layers=(64, 64, 10), batch=32, optimizer=Adam(lr=3e-3)),
                       CoreConfig.preset("tiny"))
    t = WidthSchedule.parse("layer-hl+sr").precision(2, epoch=0, epochs=1)
    assert comp.precision_table(t) == t


@pytest.mark.parametrize("spec", ["8", "4,8", "8,6,4@step", "layer:8,4", "xwg:4,8,6",
                                  "4+sr", "fast:0.3,0.1", "fast+sr"])
def test_string_round_trip(spec):
    s = WidthSchedule.parse(spec)
    assert WidthSchedule.parse(str(s)) == s


def test_named():
    for name, text in NAMED.items():
        assert WidthSchedule.parse(name) == WidthSchedule.parse(text)


@pytest.mark.parametrize("spec, match", [
    ("3", "2, 4, 6 or 8"), ("10", "2, 4, 6 or 8"), ("8,x", "comma-separated"),
    ("layer:8", "takes 2"), ("xwg:4,8", "takes 3"), ("bogus:4", "unknown schedule kind"),
    ("fast:1", "two numbers"), ("", "comma-separated")])
def test_bad_strings(spec, match):
    with pytest.raises(ValueError, match=match):
        WidthSchedule.parse(spec)


def test_bad_fields():
    with pytest.raises(TypeError, match="widths must be a string"):
        WidthSchedule.parse(8.0)
    with pytest.raises(ValueError, match="kind"):
        WidthSchedule((8,), kind="other")
    with pytest.raises(ValueError, match="per"):
        WidthSchedule((8,), per="minute")
    with pytest.raises(ValueError, match="grad_rounding"):
        WidthSchedule((8,), grad_rounding=2)
    with pytest.raises(ValueError, match="alpha"):
        WidthSchedule((2,), kind="fast", alpha=float("nan"))
    with pytest.raises(ValueError, match="not the core's widths"):
        WidthSchedule.parse("6").check((2, 4, 8))


# -- FAST --------------------------------------------------------------------------------------
def test_fast_threshold_falls_with_depth_and_iteration():
    e = [[fast_threshold(l, 4, i, 100, 0.25, 0.1) for i in (0, 50, 99)] for l in range(4)]
    assert e[0][0] == pytest.approx(0.25)
    assert e[3][2] == pytest.approx(0.25 - 0.1 * 99 / 100 - 0.1 * 3 / 4)
    for l in range(4):
        assert e[l][0] > e[l][1] > e[l][2]
    for i in range(3):
        assert e[0][i] > e[1][i] > e[2][i] > e[3][i]


def test_fast_update_decisions():
    widths = {(0, "x"): 2, (0, "w"): 2, (1, "x"): 4, (1, "g"): 8, (1, "w"): 6}
    # layer 0 at i = 0: eps = alpha = 0.25; layer 1 (of 2): eps = 0.25 - 0.05 = 0.20
    stats = {(0, "x"): 0.30, (0, "w"): 0.20, (1, "x"): 0.21, (1, "g"): 0.9, (1, "w"): 0.19}
    got = fast_update(stats, widths, i=0, iterations=10, layers=2, alpha=0.25, beta=0.1)
    assert got == {(0, "x"): 4,      # above its threshold: one width up
                   (0, "w"): 2,      # below: stays
                   (1, "x"): 6,      # above the deeper layer's lower threshold
                   (1, "g"): 8,      # already the widest
                   (1, "w"): 6}      # below
    assert widths[(0, "x")] == 2     # pure: the input is not changed
    # later iterations lower the threshold: the same r now raises (0, "w")
    late = fast_update(stats, widths, i=9, iterations=10, layers=2, alpha=0.25, beta=0.1)
    assert late[(0, "w")] == 4
    # a tensor without a statistic keeps its width; widths never fall
    assert fast_update({}, widths, i=0, iterations=10, layers=2) == widths
    assert fast_update({k: -1.0 for k in widths}, widths, i=0, iterations=10,
                       layers=2) == widths


def test_fast_update_errors():
    with pytest.raises(TypeError, match="dicts"):
        fast_update([], {}, i=0, iterations=1, layers=1)
    with pytest.raises(ValueError, match="iterations"):
        fast_update({}, {}, i=0, iterations=0, layers=1)
    with pytest.raises(ValueError, match="i must be"):
        fast_update({}, {}, i=5, iterations=5, layers=1)
    with pytest.raises(ValueError, match="kind"):
        fast_update({}, {(0, "q"): 2}, i=0, iterations=1, layers=1)
    with pytest.raises(ValueError, match="not one of"):
        fast_update({}, {(0, "x"): 3}, i=0, iterations=1, layers=1)


def test_fast_schedule_state_and_missing_statistics():
    s = WidthSchedule.parse("fast")
    assert s.needs_statistics and s.per == "step" and not s.uniform
    cur = s.widths(2, epoch=0, epochs=1)
    assert set(cur.values()) == {2}
    with pytest.raises(StatisticsMissing, match="statistics"):
        s.advance(cur, None, step=0, steps=10, layers=2)
    nxt = s.advance(cur, {(1, "g"): 1.0}, step=0, steps=10, layers=2)
    assert nxt[(1, "g")] == 4 and s.widths(2, epoch=0, epochs=1, current=nxt) == nxt
    # the table of FAST's per-tensor widths: every pass's operands, backward rounding
    t = WidthSchedule.parse("fast+sr").table(nxt, 2)
    assert t[(1, FWD)] == (2, 2, 0) and t[(1, BWD_DATA)] == (4, 2, 1)
    assert t[(1, BWD_WEIGHT)] == (2, 4, 1)
    # FAST's program clears the statistics at the top of every step; others are unchanged
    from hdl.core.isa import Op, encode
    assert s.program([5, 6]) == [encode(Op.ADAPT), 5, 6]
    assert WidthSchedule.parse("8").program([5, 6]) == [5, 6]
    # a training run takes it (the host reads the statistics between steps)
    from sim.host.train import TrainSpec
    assert TrainSpec(widths="fast:0.2,0.1+sr").schedule == WidthSchedule(
        (2,), kind="fast", per="step", grad_rounding=1, alpha=0.2, beta=0.1)


def test_tensor_stats_pools_both_passes_of_a_tensor():
    from fractions import Fraction

    from sim.model.stats import StatState
    a = StatState(exp=-3, num=5, den=40, seen=True)        # (0, FWD, 0): x of layer 0
    b = StatState(exp=-1, num=3, den=7, seen=True)         # (0, BWD_WEIGHT, 0): x again
    c = StatState(exp=2, num=1, den=9, seen=True)          # (0, FWD, 1): w, alone
    states = {(0, FWD, 0): a, (0, BWD_WEIGHT, 0): b, (0, FWD, 1): c,
              (0, BWD_DATA, 0): StatState(),               # nothing seen: no statistic
              (0, BWD_DATA, 1): StatState(exp=5, num=0, den=0, seen=True),
              (0, 3, 0): StatState(exp=0, num=1, den=1, seen=True)}   # mode 3: no pass
    r = tensor_stats(states)
    assert set(r) == {(0, "x"), (0, "w")}
    want = Fraction(5 * 2 ** -3 + 3 * 2 ** -1) / Fraction(40 * 2 ** -3 + 7 * 2 ** -1)
    assert r[(0, "x")] == float(want)
    assert min(5 / 40, 3 / 7) < r[(0, "x")] < max(5 / 40, 3 / 7)
    assert r[(0, "w")] == 1 / 9
    with pytest.raises(TypeError, match="states"):
        tensor_stats([a])
