"""Plots of a training run (matplotlib, no display needed): loss and accuracy curves and the
cycle breakdown of a step at each width the run used."""
from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = ["plot_run", "BREAKDOWN"]

#: Cycle breakdown of a step: (label, key of a step record).
BREAKDOWN = (("array", "array_busy"), ("vector", "vector_busy"),
             ("optimizer", "optim_busy"), ("idle / control", "idle"),
             ("host I/O", "host_io_cycles"))


def _finish(plt, fig, ax, xlabel: str, ylabel: str, path: Path) -> Path:
    """Label, legend, grid, save and close one figure."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_run(out: Path, epochs: list, steps: list) -> list[Path]:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = Path(out)
    written = []
    # loss per step, RTL vs float32 reference
    fig, ax = plt.subplots(figsize=(7, 4))
    n = np.arange(1, len(steps) + 1)
    ax.plot(n, [s["loss"] for s in steps], label="RTL (BFP core)", lw=1)
    ax.plot(n, [s["ref_loss"] for s in steps], label="float32 reference", lw=1, alpha=0.8)
    ax.set_yscale("log")
    written.append(_finish(plt, fig, ax, "training step", "cross-entropy loss (batch mean)",
                           out / "loss.png"))

    fig, ax = plt.subplots(figsize=(7, 4))
    e = [ep["epoch"] + 1 for ep in epochs]
    ax.plot(e, [100 * ep["test_accuracy"] for ep in epochs], "o-", label="RTL weights")
    ax.plot(e, [100 * ep["reference_accuracy"] for ep in epochs], "s--",
            label="float32 reference")
    for ep in epochs:
        ax.annotate(f"w{ep['width'] or '*'}", (ep["epoch"] + 1, 100 * ep["test_accuracy"]),
                    textcoords="offset points", xytext=(0, -12), ha="center", fontsize=7)
    written.append(_finish(plt, fig, ax, "epoch", "test accuracy (%)", out / "accuracy.png"))

    # mean cycle breakdown of a step per width (busy counts overlap; shown as stacked bars
    # beside the measured step and the MAC bound)
    # (steps of a non-uniform schedule, width None, are one group "per tensor")
    widths = sorted({s["width"] for s in steps}, key=lambda w: (w is None, w or 0))
    fig, ax = plt.subplots(figsize=(7, 4))
    x = np.arange(len(widths))
    bottom = np.zeros(len(widths))
    for label, key in BREAKDOWN:
        v = np.array([np.mean([s[key] for s in steps if s["width"] == w]) for w in widths])
        ax.bar(x - 0.2, v, 0.4, bottom=bottom, label=label)
        bottom += v
    ax.bar(x + 0.2, [np.mean([s["step_cycles"] for s in steps if s["width"] == w])
                     for w in widths], 0.2, color="k", label="measured step")
    ax.bar(x + 0.4, [np.mean([s["mac_bound_cycles"] for s in steps if s["width"] == w])
                     if w is not None else 0 for w in widths], 0.2, color="grey",
           label="MAC bound")
    ax.set_xticks(x, [f"{w}-bit" if w else "per tensor" for w in widths])
    ax.set_ylabel("cycles per training step")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    fig.savefig(out / "cycles.png", dpi=110)
    plt.close(fig)
    written.append(out / "cycles.png")
    return written
