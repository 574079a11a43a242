"""Tessera hardware: Amaranth components (one level of hierarchy per file)."""
