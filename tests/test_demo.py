"""`make demo` must keep working: it runs the hardware and fails on any golden-model mismatch."""
from sim import demo


def test_demo_runs_and_matches_golden(capsys):
    assert demo.main(["--blocks-only"]) == 0
    out = capsys.readouterr().out
    assert "MISMATCH" not in out
    assert "every hardware result matched" in out
