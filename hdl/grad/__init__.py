"""FP32 gradient datapaths: elementwise ops, reductions, softmax + cross-entropy
(see docs/datapaths.md)."""
