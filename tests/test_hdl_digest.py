"""sim.verilated.toolchain.hdl_digest and generate_cached: builds are stamped with the hdl/
sources this process imported, not with files edited since (a stale build must never pass
for a current one)."""
from pathlib import Path

from sim.verilated import toolchain


def test_digest_reads_no_file_after_import(monkeypatch):
    before = toolchain.hdl_digest("block", "tiny")

    def no_reads(self):
        raise AssertionError(f"hdl_digest read {self} after import")
    monkeypatch.setattr(Path, "read_bytes", no_reads)
    assert toolchain.hdl_digest("block", "tiny") == before


def test_digest_follows_the_import_time_sources_and_the_extras(monkeypatch):
    before = toolchain.hdl_digest("block", "tiny")
    assert toolchain.hdl_digest("block", "default") != before
    assert toolchain._HDL_AT_IMPORT == toolchain._hdl_sources_digest()   # nothing edited here
    monkeypatch.setattr(toolchain, "_HDL_AT_IMPORT", "0" * 64)            # other sources
    assert toolchain.hdl_digest("block", "tiny") != before


def test_generate_cached_converts_once_per_digest(monkeypatch, tmp_path):
    """``generate_cached`` writes what ``generate_one`` writes, converts a variant once for
    every build of the same sources, and again when the sources differ."""
    import hdl.cli

    monkeypatch.setattr(toolchain, "VERILOG_CACHE", tmp_path / "cache")
    calls = []
    real = hdl.cli.generate_one

    def counting(block, preset, out):
        calls.append((block, preset))
        real(block, preset, out)
    monkeypatch.setattr(hdl.cli, "generate_one", counting)
    want = tmp_path / "want.v"
    real("fp32_compare", "default", want)
    for name in ("a", "b"):
        toolchain.generate_cached("fp32_compare", "default", tmp_path / name / "x.v")
        assert (tmp_path / name / "x.v").read_text() == want.read_text()
        assert (tmp_path / name / "x.json").read_text() == want.with_suffix(".json").read_text()
    assert calls == [("fp32_compare", "default")]
    monkeypatch.setattr(toolchain, "_HDL_AT_IMPORT", "0" * 64)            # other sources
    toolchain.generate_cached("fp32_compare", "default", tmp_path / "c" / "x.v")
    assert len(calls) == 2
