"""FP32 optimizer engine: SGD, momentum, Adam, AdamW with loss scaling, clipping and gradient
accumulation over scratchpad memories (see docs/datapaths.md)."""
