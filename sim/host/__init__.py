"""Host software of the training core: the MLP compiler (:mod:`sim.host.compiler`)."""
from .compiler import MLP, CompileError, Compiled, Tensor, compile_mlp

__all__ = ["MLP", "CompileError", "Compiled", "Tensor", "compile_mlp"]
