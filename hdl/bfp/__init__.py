"""FAST block floating point: FP32 -> BFP (:class:`BFPConverter`) and back (:class:`BFPToFP32`).

Golden model: :mod:`sim.model.bfp`. Format, payload layouts, rounding modes and policies:
``docs/bfp.md``.
"""
from .converter import (E_ZERO, BFPConverter, Rounding, bfp_stream_layout, fp32_stream_layout,
                        width_shape)
from .lfsr import LFSR_TAPS, LFSR_WIDTH, BFPNoise, lfsr_lane_seed
from .to_fp32 import BFPToFP32, fp32_out_layout

__all__ = ["E_ZERO", "Rounding", "BFPConverter", "BFPToFP32", "BFPNoise", "LFSR_TAPS",
           "LFSR_WIDTH", "lfsr_lane_seed", "bfp_stream_layout", "fp32_stream_layout",
           "fp32_out_layout", "width_shape"]
