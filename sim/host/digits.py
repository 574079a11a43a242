"""The training run's data set: scikit-learn's bundled 8x8 handwritten digits (1,797 images,
10 classes, no download), with a fixed train/test split and per-epoch shuffles.

* Inputs are the 64 pixel intensities (0..16) divided by 16: float32 in ``[0, 1]``.
* The split is stratified and seeded (:data:`SPLIT_SEED`, 20 % test: 1,437 / 360 images), so
  every run, RTL or reference, trains and tests on the same images.
* :func:`epoch_batches` shuffles the training set with a generator seeded by ``(seed, epoch)``
  and drops the last partial batch: the batches of any epoch can be recomputed on resume.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Digits", "load_digits", "epoch_batches", "SPLIT_SEED", "TEST_FRACTION"]

SPLIT_SEED = 0
TEST_FRACTION = 0.2


@dataclass(frozen=True)
class Digits:
    x_train: np.ndarray     # (n, 64) float32 in [0, 1]
    y_train: np.ndarray     # (n,) int64 in 0..9
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def features(self) -> int:
        return self.x_train.shape[1]

    @property
    def classes(self) -> int:
        return 10


def load_digits() -> Digits:
    """The fixed split of scikit-learn's digits (stratified, :data:`SPLIT_SEED`)."""
    try:
        from sklearn.datasets import load_digits as _load
        from sklearn.model_selection import train_test_split
    except ImportError as e:     # pragma: no cover - make setup installs it
        raise RuntimeError("the training run needs scikit-learn: run `make setup`") from e
    d = _load()
    x = (d.data / 16.0).astype(np.float32)
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=TEST_FRACTION,
                                          random_state=SPLIT_SEED, stratify=y)
    return Digits(np.ascontiguousarray(xtr), np.ascontiguousarray(ytr),
                  np.ascontiguousarray(xte), np.ascontiguousarray(yte))


def epoch_batches(n: int, batch: int, seed: int, epoch: int) -> list[np.ndarray]:
    """Index arrays of the full batches of one epoch (``n // batch`` of them)."""
    if batch < 1 or batch > n:
        raise ValueError(f"batch must be in 1..{n} (the training set), not {batch}")
    perm = np.random.default_rng([seed, epoch]).permutation(n)
    return [perm[i * batch:(i + 1) * batch] for i in range(n // batch)]
