"""Golden models, pure numpy and bit-exact with the hardware: every block (BFP, fMAC, edge
converter, systolic array, FP32 units, gradient datapaths, optimizer engine), the vector unit and
the training core; the float64 MLP reference and the golden ``train_step``. They import no
Amaranth simulator and no cocotb (only ``hdl`` configs and layouts)."""
