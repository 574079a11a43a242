"""In-place transposed systolic array (docs/array.md) and the matmul engine around it.

* :mod:`.config` - :class:`ArrayConfig` (size ``S``, widths, memories) with presets.
* :mod:`.pe` - :class:`PE`, one processing element on a chunked :class:`hdl.fmac_step.FMACDatapath`
  (one :class:`hdl.fmac_step.FMACSchedule` per PE row drives them).
* :mod:`.array` - :class:`SystolicArray`, ``S x S`` PEs, three run-time dataflows.
* :mod:`.engine` - :class:`MatmulEngine`: BFP converters + tiling + FP32 accumulation + host
  command stream; it reaches its matrices through three line ports ``a``, ``b``, ``c``
  (:class:`hdl.lib.memport.LinePort`), joining :mod:`.control` (host protocol, passes,
  counters), :mod:`.opgen` and :mod:`.rowgen` (operand and weight-tile line generators),
  :mod:`.wload`, :mod:`.beats`, :mod:`.results` and :mod:`.ports` (who drives the ports).
* :mod:`.standalone` - :class:`MatmulEngineWithMemories`, the engine with three private
  scratchpads: the registered ``matmul_engine`` block.

See ``docs/array.md``.
"""
