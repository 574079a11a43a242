"""The training core as a Verilated C++ model driven from Python at step boundaries
(docs/train.md): :mod:`~sim.verilated.build` builds it, :mod:`~sim.verilated.core` runs it."""
