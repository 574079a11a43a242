"""Host software of the training core: the MLP compiler (:mod:`sim.host.compiler`), the host
driver (:mod:`sim.host.driver`) and the optimizer's host side (:mod:`sim.host.optim`:
descriptions, per-step register values, command packing)."""
from .compiler import MLP, CompileError, Compiled, Tensor, compile_mlp

__all__ = ["MLP", "CompileError", "Compiled", "Tensor", "compile_mlp"]
