"""Helpers shared by several blocks. Nothing in this package imports a block package
(:mod:`hdl.grad`, :mod:`hdl.optim`, :mod:`hdl.core`, ...).

* :mod:`.memport` - memory-port interfaces (``LinePort``, ``WordPort``, ``WordToLine``).
* :mod:`.dataflow` - fixed-latency FP32 pipelines (``Dataflow``) and ``credit_fifo``.
* :mod:`.lanesum` - ``LaneSum``: streaming FP32 sum (of squares) in a fixed lane order.
* :mod:`.fp32bits` - tests on FP32 bit patterns (``is_nan``, ``gt_zero``, ``order_key``, ...).
* :mod:`.rotate` - ``rotate_lanes``: barrel rotation of lanes by a run-time amount.
* :mod:`.mustuse` - ``mark_used``: no "never used" warning for a deliberately unused block.
"""
