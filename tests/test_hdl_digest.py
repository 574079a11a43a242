"""sim.verilated.toolchain.hdl_digest: builds are stamped with the hdl/ sources this process
imported, not with files edited since (a stale build must never pass for a current one)."""
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
