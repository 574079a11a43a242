"""Every configuration class refuses an invalid value with a clear error naming the parameter
(issue 13): one table, a row per (class, field, bad value, exception type, name the message
must contain). The hardware configs (``hdl/``) and the host-side descriptions (the training
run's ``TrainSpec``, the compiler's ``MLP``, the optimizer descriptions, width schedules)."""
import dataclasses
import math

import pytest

from hdl.array.config import ArrayConfig
from hdl.config import BFPConfig, FMACConfig
from hdl.core.config import CoreConfig
from hdl.edge_converter import EdgeConfig
from hdl.fp32.config import FP32Config
from hdl.fp32.divsqrt_config import FP32DivSqrtConfig
from hdl.fp32.log_config import FP32LogConfig
from hdl.grad.config import GradConfig
from hdl.multi.config import CollectiveConfig, LinkConfig, RingConfig
from hdl.multi.cores import TrainingRingConfig
from hdl.optim.config import OptimConfig
from sim.host.compiler import MLP
from sim.host.optim import SGD, Adam, Clip, LossScale, Momentum
from sim.host.schedule import WidthSchedule
from sim.host.train import TrainSpec
from sim.model.compress import TopK

V, T = ValueError, TypeError

#: (class, field, bad value, exception, text the message must contain)
ROWS = [
    (BFPConfig, "group_size", 0, V, "BFPConfig.group_size"),
    (BFPConfig, "group_size", 65, V, "BFPConfig.group_size"),
    (BFPConfig, "group_size", 4.0, T, "BFPConfig.group_size"),
    (BFPConfig, "max_mantissa", 5, V, "BFPConfig.max_mantissa"),
    (BFPConfig, "max_mantissa", True, T, "BFPConfig.max_mantissa"),
    (BFPConfig, "exp_bits", 8, V, "BFPConfig.exp_bits"),
    (BFPConfig, "noise_bits", 0, V, "BFPConfig.noise_bits"),
    (BFPConfig, "noise_bits", 17, V, "BFPConfig.noise_bits"),
    (BFPConfig, "lfsr_seed", 0, V, "BFPConfig.lfsr_seed"),
    (BFPConfig, "lfsr_seed", 2**32, V, "BFPConfig.lfsr_seed"),
    (FMACConfig, "max_mantissa", 10, V, "FMACConfig.max_mantissa"),
    (FMACConfig, "lanes", 3, V, "FMACConfig.lanes"),
    (FMACConfig, "lanes", 32, V, "FMACConfig.lanes"),
    (FMACConfig, "acc_bits", 17, V, "FMACConfig.acc_bits"),
    (FMACConfig, "acc_bits", 65, V, "FMACConfig.acc_bits"),
    (FMACConfig, "acc_bits", "32", T, "FMACConfig.acc_bits"),
    (ArrayConfig, "size", 3, V, "ArrayConfig.size"),
    (ArrayConfig, "size", None, T, "ArrayConfig.size"),
    (ArrayConfig, "max_mantissa", 7, V, "ArrayConfig.max_mantissa"),
    (ArrayConfig, "lanes", 0, V, "ArrayConfig.lanes"),
    (ArrayConfig, "lanes", 3, V, "ArrayConfig.lanes"),
    (ArrayConfig, "exp_bits", 9, V, "ArrayConfig.exp_bits"),
    (ArrayConfig, "noise_bits", 0, V, "ArrayConfig.noise_bits"),
    (ArrayConfig, "lfsr_seed", 0, V, "ArrayConfig.lfsr_seed"),
    (ArrayConfig, "mem_depth", 3, V, "ArrayConfig.mem_depth"),
    (ArrayConfig, "mem_depth", 100, V, "ArrayConfig.mem_depth"),
    (ArrayConfig, "mem_depth", 1 << 17, V, "ArrayConfig.mem_depth"),
    (ArrayConfig, "dim_bits", 0, V, "ArrayConfig.dim_bits"),
    (ArrayConfig, "dim_bits", 1.5, T, "ArrayConfig.dim_bits"),
    (ArrayConfig, "req_reg", 1, T, "ArrayConfig.req_reg"),
    (ArrayConfig, "cmd_reg", None, T, "ArrayConfig.cmd_reg"),
    (ArrayConfig, "out_skid", "yes", T, "ArrayConfig.out_skid"),
    (ArrayConfig, "out_magnitude", 1, T, "ArrayConfig.out_magnitude"),
    (ArrayConfig, "shared_converter", 1, T, "ArrayConfig.shared_converter"),
    (ArrayConfig, "role_ports", 0, T, "ArrayConfig.role_ports"),
    (ArrayConfig, "acc_lanes", 3, V, "ArrayConfig.acc_lanes"),
    (ArrayConfig, "acc_lanes", 1.0, T, "ArrayConfig.acc_lanes"),
    (ArrayConfig, "mem_latency", 4, V, "ArrayConfig.mem_latency"),
    (ArrayConfig, "mem_latency", 2, V, "ArrayConfig.mem_latency"),   # role_ports = False
    (ArrayConfig, "mem_latency", 3, V, "ArrayConfig.mem_latency"),   # role_ports = False
    (ArrayConfig, "mem_latency", 2.0, T, "ArrayConfig.mem_latency"),
    (FP32Config, "add_stages", 0, V, "FP32Config.add_stages"),
    (FP32Config, "add_stages", 8, V, "FP32Config.add_stages"),
    (FP32Config, "mul_stages", 7, V, "FP32Config.mul_stages"),
    (FP32Config, "cmp_stages", 3, V, "FP32Config.cmp_stages"),
    (FP32Config, "itof_stages", 5, V, "FP32Config.itof_stages"),
    (FP32Config, "ftoi_stages", 0, V, "FP32Config.ftoi_stages"),
    (FP32Config, "ftoi_stages", "1", T, "FP32Config.ftoi_stages"),
    (FP32Config, "cmp_zero_order", "c", V, "FP32Config.cmp_zero_order"),
    (FP32Config, "cmp_zero_order", 0, T, "FP32Config.cmp_zero_order"),
    (FP32DivSqrtConfig, "div_bits_per_stage", 0, V, "FP32DivSqrtConfig.div_bits_per_stage"),
    (FP32DivSqrtConfig, "div_bits_per_stage", 100, V, "FP32DivSqrtConfig.div_bits_per_stage"),
    (FP32DivSqrtConfig, "sqrt_bits_per_stage", 0, V, "FP32DivSqrtConfig.sqrt_bits_per_stage"),
    (FP32DivSqrtConfig, "exp_table_bits", 3, V, "FP32DivSqrtConfig.exp_table_bits"),
    (FP32DivSqrtConfig, "exp_table_bits", 9, V, "FP32DivSqrtConfig.exp_table_bits"),
    (FP32DivSqrtConfig, "lzc_stage", 1, T, "FP32DivSqrtConfig.lzc_stage"),
    (FP32LogConfig, "table_bits", 3, V, "FP32LogConfig.table_bits"),
    (FP32LogConfig, "table_bits", 9, V, "FP32LogConfig.table_bits"),
    (FP32LogConfig, "table_bits", None, T, "FP32LogConfig.table_bits"),
    (EdgeConfig, "int_bits", 1, V, "EdgeConfig.int_bits"),
    (EdgeConfig, "int_bits", 65, V, "EdgeConfig.int_bits"),
    (EdgeConfig, "exp_bits", 1, V, "EdgeConfig.exp_bits"),
    (EdgeConfig, "exp_bits", 17, V, "EdgeConfig.exp_bits"),
    (GradConfig, "lanes", 1, V, "GradConfig.lanes"),
    (GradConfig, "lanes", 6, V, "GradConfig.lanes"),
    (GradConfig, "max_cols", 1, V, "GradConfig.max_cols"),
    (GradConfig, "max_classes", 65537, V, "GradConfig.max_classes"),
    (OptimConfig, "depth", 8, V, "OptimConfig.depth"),
    (OptimConfig, "depth", 100, V, "OptimConfig.depth"),
    (OptimConfig, "depth", 1 << 17, V, "OptimConfig.depth"),
    (OptimConfig, "reduce_lanes", 1, V, "OptimConfig.reduce_lanes"),
    (OptimConfig, "reduce_lanes", 6, V, "OptimConfig.reduce_lanes"),
    (OptimConfig, "rd_fifo_depth", 1, V, "OptimConfig.rd_fifo_depth"),
    (OptimConfig, "ii", 0, V, "OptimConfig.ii"),
    (OptimConfig, "ii", 9, V, "OptimConfig.ii"),
    (OptimConfig, "ii", 2.0, T, "OptimConfig.ii"),
    (LinkConfig, "word_bits", 0, V, "LinkConfig.word_bits"),
    (LinkConfig, "width", 12, V, "LinkConfig.width"),          # does not divide 32
    (LinkConfig, "width", 64, V, "LinkConfig.width"),
    (LinkConfig, "latency", -1, V, "LinkConfig.latency"),
    (LinkConfig, "latency", 65, V, "LinkConfig.latency"),
    (LinkConfig, "fifo_depth", 0, V, "LinkConfig.fifo_depth"),
    (LinkConfig, "fifo_depth", 2.0, T, "LinkConfig.fifo_depth"),
    (CollectiveConfig, "ranks", 1, V, "CollectiveConfig.ranks"),
    (CollectiveConfig, "ranks", 17, V, "CollectiveConfig.ranks"),
    (CollectiveConfig, "ranks", True, T, "CollectiveConfig.ranks"),
    (CollectiveConfig, "depth", 1, V, "CollectiveConfig.depth"),
    (CollectiveConfig, "timeout_bits", 3, V, "CollectiveConfig.timeout_bits"),
    (CollectiveConfig, "tx_fifo_depth", 1, V, "CollectiveConfig.tx_fifo_depth"),
    (CollectiveConfig, "mem_latency", 0, V, "CollectiveConfig.mem_latency"),
    (CollectiveConfig, "mem_latency", 5, V, "CollectiveConfig.mem_latency"),
    (CollectiveConfig, "mem_latency", 2.0, T, "CollectiveConfig.mem_latency"),
    (CollectiveConfig, "cmd_reg", 1, T, "CollectiveConfig.cmd_reg"),
    (CollectiveConfig, "rx_reg", "no", T, "CollectiveConfig.rx_reg"),
    (CollectiveConfig, "bfp", FMACConfig(), T, "CollectiveConfig.bfp"),
    (CollectiveConfig, "bfp", BFPConfig(group_size=12), V, "CollectiveConfig.bfp.group_size"),
    (CollectiveConfig, "topk", (8, 2), T, "CollectiveConfig.topk"),
    (CollectiveConfig, "reverse", "yes", T, "CollectiveConfig.reverse"),
    (CollectiveConfig, "topk", TopK(seg=12, k=2), V, "CollectiveConfig.topk.seg"),
    (CollectiveConfig, "topk", TopK(seg=1, k=1), V, "CollectiveConfig.topk.seg"),
    (CollectiveConfig, "topk", TopK(seg=2048, k=2), V, "CollectiveConfig.topk.seg"),
    (CollectiveConfig, "topk", TopK(seg=256, k=65), V, "CollectiveConfig.topk.k"),
    (RingConfig, "collective", LinkConfig(), T, "RingConfig.collective"),
    (RingConfig, "link", CollectiveConfig(), T, "RingConfig.link"),
    (RingConfig, "link", LinkConfig(word_bits=16, width=16), V, "RingConfig.link.word_bits"),
    (CoreConfig, "size", 5, V, "ArrayConfig.size"),
    (CoreConfig, "size", "8", T, "CoreConfig.size"),
    (CoreConfig, "banks", 2, V, "CoreConfig.banks"),
    (CoreConfig, "banks", 32, V, "CoreConfig.banks"),
    (CoreConfig, "bank_depth", 8, V, "CoreConfig.bank_depth"),
    (CoreConfig, "bank_depth", 1000, V, "CoreConfig.bank_depth"),
    (CoreConfig, "bank_depth", 1 << 14, V, "CoreConfig.banks * bank_depth"),
    (CoreConfig, "prog_depth", 8, V, "CoreConfig.prog_depth"),
    (CoreConfig, "prog_depth", 100, V, "CoreConfig.prog_depth"),
    (CoreConfig, "prog_depth", 8192, V, "CoreConfig.prog_depth"),
    (CoreConfig, "layers", 0, V, "CoreConfig.layers"),
    (CoreConfig, "layers", 17, V, "CoreConfig.layers"),
    (CoreConfig, "dim_bits", None, T, "CoreConfig.dim_bits"),
    (CoreConfig, "max_classes", 1, V, "CoreConfig.max_classes"),
    (CoreConfig, "max_classes", 4096, V, "CoreConfig.max_classes"),
    (CoreConfig, "vector_lanes", 3, V, "CoreConfig.vector_lanes"),
    (CoreConfig, "vector_lanes", -1, V, "CoreConfig.vector_lanes"),
    (CoreConfig, "lfsr_seed", 0, V, "ArrayConfig.lfsr_seed"),
    (CoreConfig, "lfsr_seed", 1.0, T, "CoreConfig.lfsr_seed"),
    (CoreConfig, "ranks", 0, V, "CoreConfig.ranks"),
    (CoreConfig, "ranks", 17, V, "CoreConfig.ranks"),
    (CoreConfig, "link_width", 12, V, "CoreConfig.link_width"),
    (CoreConfig, "link_width", 64, V, "CoreConfig.link_width"),
    (CoreConfig, "vector_sumsq", 1, T, "CoreConfig.vector_sumsq"),
    (CoreConfig, "reverse_links", 1, T, "CoreConfig.reverse_links"),
    (CoreConfig, "reverse_links", True, V, "CoreConfig.reverse_links"),   # ranks = 1
    (CoreConfig, "decode_stages", 1, V, "CoreConfig.decode_stages"),
    (CoreConfig, "decode_stages", 2.0, T, "CoreConfig.decode_stages"),
    (CoreConfig, "vector_read_reg", 1, T, "CoreConfig.vector_read_reg"),
    (CoreConfig, "spad_reg", 1, T, "CoreConfig.spad_reg"),
    (CoreConfig, "spad_reg", True, V, "CoreConfig.spad_reg"),  # no read_reg
    (CoreConfig, "spad_out_reg", 1, T, "CoreConfig.spad_out_reg"),
    (CoreConfig, "spad_out_reg", True, V, "CoreConfig.spad_out_reg"),  # no spad_reg
    (CoreConfig, "vector_shared_units", 1, T, "CoreConfig.vector_shared_units"),
    (CoreConfig, "optim_shared_units", 1, T, "CoreConfig.optim_shared_units"),
    (CoreConfig, "optim_shared_units", True, V, "CoreConfig.optim_shared_units"),  # no vector_
    (CoreConfig, "optim_one_port", "no", T, "CoreConfig.optim_one_port"),
    (CoreConfig, "serial_log", 1, T, "CoreConfig.serial_log"),
    (CoreConfig, "matmul_regs", "yes", T, "CoreConfig.matmul_regs"),
    (CoreConfig, "coll_regs", 1, T, "CoreConfig.coll_regs"),
    (CoreConfig, "acc_lanes", 3, V, "CoreConfig.acc_lanes"),
    (TrainingRingConfig, "core", CoreConfig(), V, "TrainingRingConfig.core.ranks"),
    (TrainingRingConfig, "core", LinkConfig(), T, "TrainingRingConfig.core"),
    (TrainingRingConfig, "link", LinkConfig(width=8), V, "TrainingRingConfig.link.width"),
    (TrainingRingConfig, "link", CoreConfig(), T, "TrainingRingConfig.link"),
    (CoreConfig, "max_mantissa", 3, V, "ArrayConfig.max_mantissa"),
    (CoreConfig, "max_mantissa", "8", T, "CoreConfig.max_mantissa"),
    (CoreConfig, "lanes", 3, V, "ArrayConfig.lanes"),
    (CoreConfig, "exp_bits", 9, V, "ArrayConfig.exp_bits"),
    (CoreConfig, "noise_bits", 0, V, "ArrayConfig.noise_bits"),
    (TrainSpec, "size", 16, V, "TrainSpec.size"),
    (TrainSpec, "layers", (32, 10), V, "TrainSpec.layers"),
    (TrainSpec, "layers", 64, T, "TrainSpec.layers"),
    (TrainSpec, "layers", (64, "x", 10), T, "TrainSpec.layers"),
    (TrainSpec, "batch", 0, V, "TrainSpec.batch"),
    (TrainSpec, "batch", 2.0, T, "TrainSpec.batch"),
    (TrainSpec, "micro_batches", 5, V, "micro_batches"),
    (TrainSpec, "optimizer", "rmsprop", V, "TrainSpec.optimizer"),
    (TrainSpec, "lr", 0.0, V, "TrainSpec.lr"),
    (TrainSpec, "lr", "0.1", V, "TrainSpec.lr"),
    (TrainSpec, "checkpoint", (5,), V, "checkpoint"),
    (TrainSpec, "checkpoint", 1, T, "TrainSpec.checkpoint"),
    (TrainSpec, "checkpoint", ("a", 1), T, "TrainSpec.checkpoint"),
    (TrainSpec, "widths", "3", V, "widths"),
    (TrainSpec, "widths", "4,x", V, "widths"),
    (TrainSpec, "epochs", 0, V, "TrainSpec.epochs"),
    (TrainSpec, "seed", -1, V, "TrainSpec.seed"),
    (TrainSpec, "steps_per_epoch", -1, V, "TrainSpec.steps_per_epoch"),
    (TrainSpec, "check_every", True, T, "TrainSpec.check_every"),
    (MLP, "layers", (8,), V, "MLP.layers"),
    (MLP, "layers", "8,10", T, "MLP.layers"),
    (MLP, "layers", (8, 0, 10), V, "MLP.layers[1]"),
    (MLP, "layers", (8, 1), V, "MLP.layers[-1]"),
    (MLP, "layers", (8, 2.5, 10), T, "MLP.layers[1]"),
    (MLP, "batch", 0, V, "MLP.batch"),
    (MLP, "micro_batches", 0, V, "MLP.micro_batches"),
    (MLP, "micro_batches", 5, V, "MLP.micro_batches"),
    (MLP, "optimizer", "adam", T, "MLP.optimizer"),
    (MLP, "loss_scale", 16, T, "MLP.loss_scale"),
    (MLP, "clip", 1.0, T, "MLP.clip"),
    (MLP, "checkpoint", (2,), V, "MLP.checkpoint"),
    (MLP, "checkpoint", "1", T, "MLP.checkpoint"),
    (MLP, "checkpoint", (1.0,), T, "MLP.checkpoint"),
    (MLP, "schedule", "fast", V, "MLP.schedule"),
    (MLP, "one_pass", 1, T, "MLP.one_pass"),
    (MLP, "mean_rows", -1, V, "MLP.mean_rows"),
    (MLP, "mean_rows", 1.5, T, "MLP.mean_rows"),
    (MLP, "head", 1, T, "MLP.head"),
    (MLP, "input_grad", "yes", T, "MLP.input_grad"),
    (TopK, "seg", 0, V, "TopK.seg"),
    (TopK, "k", 0, V, "TopK.k"),
    (TopK, "k", 257, V, "TopK.k"),
    (TopK, "k", 2.0, T, "TopK.k"),
    (WidthSchedule, "stages", (), V, "WidthSchedule.stages"),
    (WidthSchedule, "stages", [8], V, "WidthSchedule.stages"),
    (WidthSchedule, "stages", (3,), V, "WidthSchedule.stages"),
    (WidthSchedule, "stages", (10,), V, "WidthSchedule.stages"),
    (WidthSchedule, "kind", "linear", V, "WidthSchedule.kind"),
    (WidthSchedule, "per", "iteration", V, "WidthSchedule.per"),
    (WidthSchedule, "grad_rounding", 2, V, "WidthSchedule.grad_rounding"),
    (WidthSchedule, "alpha", math.nan, V, "WidthSchedule.alpha"),
    (WidthSchedule, "alpha", "0.25", V, "WidthSchedule.alpha"),
    (WidthSchedule, "beta", True, V, "WidthSchedule.beta"),
    (SGD, "lr", 0.0, V, "SGD.lr"),
    (SGD, "lr", math.inf, V, "SGD.lr"),
    (SGD, "lr", "0.1", T, "SGD.lr"),
    (SGD, "lr", 1e39, V, "SGD.lr"),
    (Momentum, "lr", -0.1, V, "Momentum.lr"),
    (Momentum, "momentum", 1.0, V, "Momentum.momentum"),
    (Momentum, "momentum", -0.1, V, "Momentum.momentum"),
    (Adam, "lr", -1.0, V, "Adam.lr"),
    (Adam, "beta1", 1.0, V, "Adam.beta1"),
    (Adam, "beta2", math.nan, V, "Adam.beta2"),
    (Adam, "eps", 0.0, V, "Adam.eps"),
    (Adam, "eps", 1e-50, V, "Adam.eps"),
    (Adam, "weight_decay", 0.1, V, "Adam.weight_decay"),
    (Adam, "weight_decay", -0.1, V, "Adam.weight_decay"),
    (Adam, "name", "Adamax", V, "Adam.name"),
    (LossScale, "init_exp", 127, V, "LossScale.init_exp"),
    (LossScale, "init_exp", -1, V, "LossScale.init_exp"),
    (LossScale, "growth_interval", 0, V, "LossScale.growth_interval"),
    (LossScale, "growth_interval", 1 << 16, V, "LossScale.growth_interval"),
    (LossScale, "growth_interval", 2.0, T, "LossScale.growth_interval"),
    (LossScale, "dynamic", "yes", T, "LossScale.dynamic"),
    (LossScale, "dynamic", None, T, "LossScale.dynamic"),
    (Clip, "max_norm", 0.0, V, "Clip.max_norm"),
    (Clip, "eps", -1e-6, V, "Clip.eps"),
]

#: a valid instance of each class (the base a row replaces one field of)
VALID = {SGD: SGD(lr=0.1), Momentum: Momentum(lr=0.1, momentum=0.9), Clip: Clip(max_norm=1.0),
         WidthSchedule: WidthSchedule((8,))}


def _ids(row):
    cls, field, value, exc, _ = row
    return f"{cls.__name__}.{field}={value!r}"


@pytest.mark.parametrize("row", ROWS, ids=[_ids(r) for r in ROWS])
def test_invalid_value_raises_naming_parameter(row):
    cls, field, value, exc, name = row
    base = VALID.get(cls) or cls()
    dataclasses.replace(base, **{field: getattr(base, field)})     # the base itself is valid
    with pytest.raises(exc) as info:
        dataclasses.replace(base, **{field: value})
    assert type(info.value) is exc or issubclass(type(info.value), exc)
    assert name in str(info.value), f"message {str(info.value)!r} does not name {name!r}"


def test_every_field_of_every_class_has_a_row():
    """The table covers every field of every class it lists (a new field needs a row)."""
    missing = [f"{cls.__name__}.{f.name}" for cls in {r[0] for r in ROWS}
               for f in dataclasses.fields(cls)
               if f.name not in {r[1] for r in ROWS if r[0] is cls}]
    assert not missing, missing


def test_every_config_class_is_in_the_table():
    """Every ``*Config`` dataclass of ``hdl/`` has rows."""
    import hdl.array.config, hdl.config, hdl.core.config, hdl.edge_converter     # noqa: E401
    import hdl.fp32.config, hdl.fp32.divsqrt_config, hdl.fp32.log_config      # noqa: E401
    import hdl.grad.config, hdl.multi.config, hdl.multi.cores, hdl.optim.config  # noqa: E401
    mods = (hdl.array.config, hdl.config, hdl.core.config, hdl.edge_converter, hdl.fp32.config,
            hdl.fp32.divsqrt_config, hdl.fp32.log_config, hdl.grad.config, hdl.multi.config,
            hdl.multi.cores, hdl.optim.config)
    found = {obj for m in mods for name, obj in vars(m).items()
             if name.endswith("Config") and dataclasses.is_dataclass(obj)}
    assert found <= {r[0] for r in ROWS}, found - {r[0] for r in ROWS}
