"""The training run's host side without Verilator: options, schedules, data, the float32
reference, the command line's errors."""
import numpy as np
import pytest

from sim.host.digits import epoch_batches, load_digits
from sim.host.schedule import MIXED, WidthSchedule
from sim.host.train import TrainSpec
from sim.model.reference import reference_step
from sim.host.optim import Adam


@pytest.mark.parametrize("field,value,err", [
    ("size", 16, ValueError), ("size", "8", ValueError), ("batch", 0, ValueError),
    ("batch", 2.0, TypeError), ("epochs", 0, ValueError), ("optimizer", "lamb", ValueError),
    ("lr", 0.0, ValueError), ("lr", 2.0, ValueError), ("layers", (64, 10, 5), ValueError),
    ("layers", (32, 10), ValueError), ("widths", "3", ValueError), ("widths", "8,x", ValueError),
    ("widths", 8.0, TypeError), ("micro_batches", 5, ValueError), ("check_every", -1, ValueError),
    ("steps_per_epoch", -2, ValueError), ("seed", True, TypeError),
    ("checkpoint", (3,), ValueError),
])
def test_spec_rejects_bad_fields(field, value, err):
    with pytest.raises(err, match=field.split("_")[0] if field != "widths" else "widths|stages"):
        TrainSpec(**{field: value})


def test_spec_round_trips_through_dict():
    spec = TrainSpec(size=4, layers=(64, 32, 10), widths="4,8", checkpoint=(1,), epochs=3)
    assert TrainSpec.from_dict(spec.to_dict()) == spec
    assert spec.config.size == 4 and spec.mlp.checkpoint == frozenset({1})


def test_width_schedule_stages():
    s = WidthSchedule.parse("2,4,8")
    assert [s.width(e, 10) for e in range(10)] == [2] * 4 + [4] * 3 + [8] * 3
    assert WidthSchedule.parse("mixed") == WidthSchedule.parse(MIXED)
    assert [WidthSchedule.parse("8").width(e, 3) for e in range(3)] == [8, 8, 8]
    assert [WidthSchedule.parse("4,8").width(e, 1) for e in range(1)] == [4]
    with pytest.raises(ValueError, match="not the core's widths"):
        WidthSchedule.parse("6").check((2, 4, 8))


def test_digits_split_and_batches_are_fixed():
    d = load_digits()
    assert d.x_train.shape == (1437, 64) and d.x_test.shape == (360, 64)
    assert d.x_train.dtype == np.float32 and 0 <= d.x_train.min() and d.x_train.max() <= 1
    assert np.array_equal(np.bincount(d.y_test), np.bincount(load_digits().y_test))
    a, b = epoch_batches(1437, 32, 0, 3), epoch_batches(1437, 32, 0, 3)
    assert len(a) == 44 and all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not np.array_equal(a[0], epoch_batches(1437, 32, 0, 4)[0])
    assert len(np.unique(np.concatenate(a))) == 44 * 32
    with pytest.raises(ValueError, match="batch"):
        epoch_batches(10, 11, 0, 0)


def test_float32_reference_is_float32_and_tracks_float64():
    rng = np.random.default_rng(3)
    W = [rng.standard_normal((64, 16)) * 0.2, rng.standard_normal((16, 10)) * 0.2]
    b = [np.zeros(16), np.zeros(10)]
    x, y = rng.random((32, 64)), rng.integers(0, 10, 32)
    r32 = reference_step([64, 16, 10], W, b, None, x, y, Adam(lr=1e-3), 1, dtype=np.float32)
    r64 = reference_step([64, 16, 10], W, b, None, x, y, Adam(lr=1e-3), 1)
    assert all(w.dtype == np.float32 for w in r32["weights"] + r32["opt_state"]["m"]["W"])
    for a, c in zip(r32["weights"], r64["weights"]):
        np.testing.assert_allclose(a, c, rtol=0, atol=1e-5)   # float32 rounding of one step


def test_cli_rejects_bad_options(capsys):
    from hdl.cli import main
    assert main(["train", "--widths", "5"]) == 2
    assert "widths" in capsys.readouterr().err
    assert main(["train", "--layers", "64,x"]) == 2
    assert main(["train", "--checkpoint", "a"]) == 2
    assert main(["train", "--layers", "64,64,64,10", "--checkpoint", "7"]) == 2
    assert "checkpoint" in capsys.readouterr().err
