"""Image augmentation on the device, on whole minibatches, in plain torch ops; and per-channel normalisation.

Every op works on a batch ``(n, C, H, W)`` at once with per-sample randomness drawn from torch's generator
(seeded per trial by the trainer), so it runs where the data already is (GPU or CPU) with no per-image
Python loop and no host round trip:

- :func:`random_crop`: pad by ``padding`` zeros on each border, then crop back to H x W at a random offset
  per image (the CIFAR recipe of He et al. 2016, Sec. 4.2; NAS-Bench-201, Dong & Yang 2020, Table 1);
- :func:`hflip`: mirror each image left-right with probability 1/2;
- :func:`cutout`: zero one ``size`` x ``size`` square per image at a random centre, the square clipped at the
  border (DeVries & Taylor 2017, "Improved Regularization of CNNs with Cutout", Sec. 3), after normalisation
  as in the paper's code, so the erased pixels are the mean.

Why not torchvision's transforms v2: torchvision 0.28.0 (the build that declares torch==2.13.0) does not
load against our pinned CPU torch 2.13.0 build (its compiled ops do not match: ``import torchvision`` fails),
so it cannot even be measured here; these ops are the few lines torchvision's batched tensor kernels
amount to for these three transforms.

>>> import torch
>>> _ = torch.manual_seed(0)
>>> x = torch.arange(2 * 3 * 4 * 4, dtype=torch.uint8).reshape(2, 3, 4, 4)
>>> aug = Augment(crop_padding=1, flip=True, cutout=2)
>>> aug.uint8_ops(x).shape, aug.uint8_ops(x).dtype
(torch.Size([2, 3, 4, 4]), torch.uint8)
>>> aug.float_ops(torch.ones(2, 3, 4, 4)).sum() < 96  # cutout zeroed some pixels
tensor(True)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch


@dataclasses.dataclass(frozen=True)
class Augment:
    """Which ops run: crop with ``crop_padding`` pixels of padding (0: off), horizontal ``flip``, ``cutout``
    squares of that side (0: off)."""

    crop_padding: int = 0
    flip: bool = False
    cutout: int = 0

    @property
    def active(self) -> bool:
        return bool(self.crop_padding or self.flip or self.cutout)

    def uint8_ops(self, x: torch.Tensor) -> torch.Tensor:
        """The geometric ops, done on the raw (uint8) batch: 4x fewer bytes moved than on floats."""
        if self.crop_padding:
            x = random_crop(x, self.crop_padding)
        if self.flip:
            x = hflip(x)
        return x

    def float_ops(self, x: torch.Tensor) -> torch.Tensor:
        """The ops done after normalisation (cutout erases to the mean, i.e. to 0)."""
        return cutout(x, self.cutout) if self.cutout else x

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """All ops on an already normalised float batch (float32 datasets)."""
        return self.float_ops(self.uint8_ops(x))


def random_crop(x: torch.Tensor, padding: int) -> torch.Tensor:
    """Zero-pad each border by ``padding`` and crop H x W at an independent random offset per image."""
    n, _, h, w = x.shape
    padded = torch.nn.functional.pad(x, (padding, padding, padding, padding))
    dy = torch.randint(0, 2 * padding + 1, (n, 1), device=x.device)
    dx = torch.randint(0, 2 * padding + 1, (n, 1), device=x.device)
    rows = (dy + torch.arange(h, device=x.device))[:, :, None]  # (n, h, 1)
    cols = (dx + torch.arange(w, device=x.device))[:, None, :]  # (n, 1, w)
    batch = torch.arange(n, device=x.device)[:, None, None]
    # advanced indices around a slice: the result is (n, h, w, C); back to (n, C, h, w) as a view
    return padded[batch, :, rows, cols].permute(0, 3, 1, 2)


def hflip(x: torch.Tensor) -> torch.Tensor:
    """Mirror each image left-right with probability 1/2."""
    flip = torch.rand(x.shape[0], device=x.device) < 0.5
    return torch.where(flip[:, None, None, None], x.flip(3), x)


def cutout(x: torch.Tensor, size: int) -> torch.Tensor:
    """Zero one ``size`` x ``size`` square per image, centred anywhere in the image (clipped at borders)."""
    n, _, h, w = x.shape
    cy = torch.randint(0, h, (n, 1, 1), device=x.device)
    cx = torch.randint(0, w, (n, 1, 1), device=x.device)
    ys = torch.arange(h, device=x.device)[None, :, None]
    xs = torch.arange(w, device=x.device)[None, None, :]
    lo = size // 2
    keep = ~(((ys - cy) >= -lo) & ((ys - cy) < size - lo) & ((xs - cx) >= -lo) & ((xs - cx) < size - lo))
    return x * keep[:, None, :, :].to(x.dtype)


def channel_stats(x: np.ndarray, chunk: int = 4096) -> tuple[np.ndarray, np.ndarray]:
    """Per-channel mean and std of uint8 images ``(n, C, H, W)``, in pixel units (0..255), float64
    accumulated in chunks (no float copy of the whole set)."""
    c = x.shape[1]
    total, total_sq, count = np.zeros(c), np.zeros(c), 0
    for i in range(0, len(x), chunk):
        part = x[i : i + chunk].astype(np.float64)
        total += part.sum(axis=(0, 2, 3))
        total_sq += np.square(part).sum(axis=(0, 2, 3))
        count += part.shape[0] * part.shape[2] * part.shape[3]
    mean = total / count
    std = np.sqrt(np.maximum(total_sq / count - mean**2, 0.0))
    return mean, np.where(std > 1e-6, std, 1.0)


class Normalize:
    """uint8 -> float ``(x - mean) / std`` per channel, as one fused multiply-add on the device.

    >>> import numpy as np, torch
    >>> norm = Normalize(np.array([100.0]), np.array([50.0]), torch.device("cpu"))
    >>> round(norm(torch.tensor([[[[150]]]], dtype=torch.uint8)).item(), 4)
    1.0
    """

    def __init__(self, mean: np.ndarray, std: np.ndarray, device: torch.device) -> None:
        self.mean, self.std = [float(v) for v in mean], [float(v) for v in std]
        self.scale = torch.tensor(1.0 / np.asarray(std), dtype=torch.float32, device=device).view(1, -1, 1, 1)
        self.shift = torch.tensor(-np.asarray(mean) / np.asarray(std), dtype=torch.float32,
                                  device=device).view(1, -1, 1, 1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return torch.addcmul(self.shift, x.float(), self.scale)
