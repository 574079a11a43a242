"""Tessera simulation: numpy golden models (no Amaranth import) and cocotb verification parts."""
