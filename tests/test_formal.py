"""The formal proofs cannot rot: every proof's wrapper elaborates (the small ones to RTLIL with
their Assert/Assume/Cover cells), the broken variant's mutation still applies, the proof
records and the report validate. The proofs themselves run in ``make formal`` (docs/formal.md);
the last test runs one small proof end to end when SymbiYosys and yices are installed."""
import json
import shutil
import sys
from pathlib import Path

import pytest
from amaranth.hdl import Fragment

from formal.common import Proof, Result, internal_signals, run_sby, to_rtlil
from formal.fmac import FMACProduct, FMACSteps, mutate_chunk_table
from formal.run import ALL_PROOFS, main, write_report

#: wrappers around a whole engine take minutes to convert; they are elaborated only
BIG = {"stream_matmul_engine", "stream_optim_engine", "stream_vector_unit"}


def test_proof_names_unique_and_every_task_covered():
    names = [p.name for p in ALL_PROOFS]
    assert len(names) == len(set(names))
    for prefix in ("fmac_", "bfp_", "stream_", "hazard_"):
        assert any(n.startswith(prefix) for n in names), prefix
    assert any(p.expect == "fail" for p in ALL_PROOFS), "no broken variant"
    by_name = {p.name: p for p in ALL_PROOFS}
    for p in ALL_PROOFS:
        if p.expect == "pass":
            witness = by_name[p.covered_by] if p.covered_by else p
            assert "cover" in witness.modes, p.name


@pytest.mark.parametrize("proof", [p for p in ALL_PROOFS if p.name not in BIG],
                         ids=lambda p: p.name)
def test_wrapper_converts_to_rtlil(proof):
    text = to_rtlil(proof.build())
    for cell in ("$check", "$anyseq"):
        assert cell in text, (proof.name, cell)
    if proof.mutate is not None:
        assert proof.mutate(text) != text


@pytest.mark.parametrize("proof", [p for p in ALL_PROOFS if p.name in BIG],
                         ids=lambda p: p.name)
def test_big_wrapper_elaborates(proof):
    Fragment.get(proof.build(), None)


def test_mutation_refuses_a_changed_dut():
    with pytest.raises(ValueError, match="mutate_chunk_table"):
        mutate_chunk_table("module top\nend\n")


def test_invalid_arguments():
    ok = dict(name="x", block="b", prop="p", build=lambda: None, depth=3)
    with pytest.raises(ValueError, match="Proof.name"):
        Proof(**{**ok, "name": "Bad Name"})
    with pytest.raises(ValueError, match="Proof.depth"):
        Proof(**{**ok, "depth": 0})
    with pytest.raises(ValueError, match="Proof.modes"):
        Proof(**{**ok, "modes": ("induct",)})
    with pytest.raises(ValueError, match="Proof.modes"):
        Proof(**{**ok, "modes": ("bmc",)})          # no cover: could be vacuous
    with pytest.raises(ValueError, match="Proof.expect"):
        Proof(**{**ok, "expect": "maybe"})
    from hdl.config import FMACConfig
    with pytest.raises(TypeError, match="FMACProduct.config must be a FMACConfig"):
        FMACProduct(None)
    with pytest.raises(ValueError, match="FMACProduct.widths"):
        FMACProduct(FMACConfig(), widths=(3,))
    with pytest.raises(TypeError, match="FMACSteps.config must be a FMACConfig"):
        FMACSteps(None)
    with pytest.raises(ValueError, match="FMACSteps.widths"):
        FMACSteps(FMACConfig(), widths=(10,))
    from amaranth.hdl import Module, Signal
    m = Module()
    m._MustUse__silence = True          # only searched, never elaborated
    m.d.sync += Signal(name="present").eq(1)
    with pytest.raises(KeyError, match="absent"):
        internal_signals(m, ("present", "absent"))
    assert set(internal_signals(m, ("present",))) == {"present"}
    with pytest.raises(SystemExit):
        main(["--only", "no_such_proof"])


def test_report(tmp_path):
    rows = [Result("a", "blk", "prop", "bmc", 5, 1.23, "pass"),
            Result("a", "blk", "prop", "cover", 5, 2.0, "fail",
                   covers={"reached": 1, "unreached": 1}),
            Result("m", "blk", "prop", "bmc", 5, 0.5, "fail", expect="fail")]
    write_report(rows, tmp_path, keep_others=False)
    data = json.loads((tmp_path / "formal.json").read_text())
    assert [r["ok"] for r in data["proofs"]] == [True, False, True]
    assert data["all_ok"] is False
    assert "**NO**" in (tmp_path / "formal.md").read_text()


_BIN = str(Path(sys.executable).parent)     # formal.common.tool_env puts it first on PATH


@pytest.mark.skipif(shutil.which("yowasp-sby", path=_BIN) is None
                    or shutil.which("yices-smt2", path=_BIN) is None,
                    reason="make setup-formal installs SymbiYosys (yowasp) and yices")
def test_one_proof_end_to_end(tmp_path):
    """The smallest proof passes through the real tools (a few seconds)."""
    by_name = {p.name: p for p in ALL_PROOFS}
    assert run_sby(by_name["stream_vector_line_reader"], "bmc", tmp_path).result == "pass"
