"""The training core: shared banked scratchpads, a sequencer running a small ISA, and the
matmul, vector and optimizer engines reaching memory through memory-port interfaces
(docs/core.md, docs/isa.md)."""
