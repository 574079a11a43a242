"""Verification tools beside the test suite: Verilator coverage of the cocotb tier
(``python -m sim.verify.coverage``, ``make coverage``) and mutation testing
(``python -m sim.verify.mutation``, ``make mutation``)."""
