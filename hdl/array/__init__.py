"""In-place transposed systolic array (DESIGN-NOTES §3) and the matmul engine around it.

* :mod:`.config` - :class:`ArrayConfig` (size ``S``, widths, memories) with presets.
* :mod:`.pe` - :class:`PE`, one processing element on a chunked :class:`hdl.fmac.FMACCore`.
* :mod:`.array` - :class:`SystolicArray`, ``S x S`` PEs, three run-time dataflows.
* :mod:`.engine` - :class:`MatmulEngine`, scratchpads + BFP converters + tiling + FP32
  accumulation + host command stream.

See ``docs/array.md``.
"""
