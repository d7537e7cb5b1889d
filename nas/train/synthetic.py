"""A generated image-classification task of CIFAR's shape, for tests and benchmarks where no real images are
at hand: uint8 RGB images, each class a smooth colour layout plus an oriented grating, randomly shifted, with
pixel noise, so that convolutions matter and a network must learn texture and colour together.

>>> x, y = synthetic_images(8, classes=4, size=32, seed=0)
>>> x.dtype, x.shape, sorted(set(y.tolist()))
(dtype('uint8'), (8, 3, 32, 32), [0, 1, 2, 3])
"""

from __future__ import annotations

import numpy as np


def synthetic_images(n: int, *, classes: int = 10, size: int = 32, seed: int = 0, noise: float = 70.0,
                     colour: float = 3.0, texture: float = 20.0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` images ``(n, 3, size, size)`` uint8 and their labels (every class present once n >= classes).
    ``colour``: spread of the classes' colour layouts around mid-grey; ``texture``: grating amplitude;
    ``noise``: pixel noise std (all in pixel units). The defaults make a task a few epochs do not saturate."""
    rng = np.random.default_rng(seed)
    task = np.random.default_rng(12345)  # the classes are the same task whatever the seed of the sample
    coarse = 128 + task.uniform(-colour, colour, size=(classes, 3, 4, 4))
    layout = coarse.repeat(size // 4 + 1, axis=2).repeat(size // 4 + 1, axis=3)[:, :, :size, :size]
    angle = task.uniform(0, np.pi, classes)
    freq = task.uniform(0.25, 0.9, classes)
    yy, xx = np.mgrid[0:size, 0:size]
    grating = np.sin(freq[:, None, None] * (np.cos(angle)[:, None, None] * xx + np.sin(angle)[:, None, None] * yy))
    y = np.concatenate([np.arange(min(n, classes)), rng.integers(classes, size=max(0, n - classes))])
    rng.shuffle(y)
    shifts = rng.integers(-size // 8, size // 8 + 1, size=(n, 2))
    x = np.empty((n, 3, size, size), np.float32)
    for i, (label, (dy, dx)) in enumerate(zip(y, shifts)):
        img = layout[label] + texture * grating[label][None]
        x[i] = np.roll(img, (int(dy), int(dx)), axis=(1, 2))
    x += rng.normal(scale=noise, size=x.shape).astype(np.float32)
    return np.clip(x, 0, 255).astype(np.uint8), y.astype(np.int64)
