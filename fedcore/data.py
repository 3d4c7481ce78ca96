"""Datasets held as whole uint8 tensors on the chosen device, normalised on the fly.

No per-client DataLoader: a client's minibatch is an index gather from one tensor, which is what lets the
engine train a whole cohort in one batched call.
"""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from fedcore.errors import ConfigError

# Per-channel mean and std of each training set (pixel values scaled to [0, 1]).
STATS = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
}
DATASET_NAMES = tuple(STATS)
TRAIN_SIZES = {"mnist": 60_000, "fashion_mnist": 60_000, "cifar10": 50_000}  # n, known before loading
INPUT_SCALINGS = ("standardized", "unit")

_EXPECTED_FILES = {
    "mnist": "MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte",
    "fashion_mnist": "FashionMNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte",
    "cifar10": "cifar-10-batches-py/{data_batch_1..5,test_batch,batches.meta}",
}


@dataclass(frozen=True)
class Dataset:
    """Train and test images as uint8 [N, C, H, W] and labels as int64 [N], on one device."""

    name: str
    train_x: torch.Tensor
    train_y: torch.Tensor
    test_x: torch.Tensor
    test_y: torch.Tensor
    mean: torch.Tensor  # [1, C, 1, 1], float32, same device
    std: torch.Tensor

    @property
    def num_classes(self) -> int:
        return 10

    @property
    def input_shape(self) -> tuple[int, int, int]:
        return tuple(self.train_x.shape[1:])

    def normalize(self, x_uint8: torch.Tensor) -> torch.Tensor:
        """uint8 images (any leading dims) -> floats of mean's dtype, in [0, 1], standardised per channel."""
        return (x_uint8.to(self.mean.dtype) / 255.0 - self.mean) / self.std

    def to(self, device: torch.device | str) -> "Dataset":
        return Dataset(self.name, *(t.to(device) for t in (self.train_x, self.train_y, self.test_x,
                                                          self.test_y, self.mean, self.std)))


def data_root() -> Path:
    """`FEDCORE_DATA` if set, else ./data."""
    return Path(os.environ.get("FEDCORE_DATA", "data"))


def available(name: str, root: Path | str | None = None) -> bool:
    """Whether `name`'s files are on disk under the data root (no download attempted)."""
    root = Path(root) if root is not None else data_root()
    first_file = {"mnist": "MNIST/raw/train-images-idx3-ubyte",
                  "fashion_mnist": "FashionMNIST/raw/train-images-idx3-ubyte",
                  "cifar10": "cifar-10-batches-py/data_batch_1"}[name]
    return (root / first_file).exists()


def _torchvision_split(name: str, root: Path, train: bool, download: bool):
    import torchvision.datasets as tvd

    cls = {"mnist": tvd.MNIST, "fashion_mnist": tvd.FashionMNIST, "cifar10": tvd.CIFAR10}[name]
    return cls(str(root), train=train, download=download)


def _open_split(name: str, root: Path, train: bool):
    try:
        return _torchvision_split(name, root, train, download=False)
    except RuntimeError:
        pass  # not on disk: try torchvision's normal download, which works when online
    try:
        return _torchvision_split(name, root, train, download=True)
    except Exception as exc:  # no network, or a partial/corrupt download
        raise ConfigError(
            f"dataset {name!r} not found in {root.resolve()} and could not be downloaded ({type(exc).__name__}); "
            f"expected files {root / _EXPECTED_FILES[name]}. Set FEDCORE_DATA to the folder that holds them."
        ) from None


def _as_uint8_nchw(split) -> tuple[torch.Tensor, torch.Tensor]:
    x = split.data
    x = torch.as_tensor(np.asarray(x)) if not isinstance(x, torch.Tensor) else x
    x = x.unsqueeze(1) if x.dim() == 3 else x.permute(0, 3, 1, 2)  # MNIST: NHW; CIFAR: NHWC
    return x.contiguous().to(torch.uint8), torch.as_tensor(split.targets, dtype=torch.int64)


def load(name: str, root: Path | str | None = None, device: torch.device | str = "cpu") -> Dataset:
    """Load `name` ('mnist', 'fashion_mnist' or 'cifar10') from `root` (default: `data_root()`)."""
    if name not in STATS:
        raise ConfigError(f"--dataset must be one of {', '.join(DATASET_NAMES)}; got {name!r}")
    root = Path(root) if root is not None else data_root()
    return _load_cpu(name, root.resolve()).to(device)


@functools.lru_cache(maxsize=4)
def _load_cpu(name: str, root: Path) -> Dataset:
    """Parsed once per process: notebooks and tests load the same dataset many times. Never mutated."""
    train_x, train_y = _as_uint8_nchw(_open_split(name, root, train=True))
    test_x, test_y = _as_uint8_nchw(_open_split(name, root, train=False))
    mean, std = (torch.tensor(s, dtype=torch.float32).view(1, -1, 1, 1) for s in STATS[name])
    return Dataset(name, train_x, train_y, test_x, test_y, mean, std)


def scaled(ds: Dataset, inputs: str) -> Dataset:
    """`ds` with the input scaling `inputs` (see INPUT_SCALINGS): "standardized" as loaded, "unit" leaves
    pixels in [0, 1] (no paper here states its scaling; the 2NN's speed depends on it, see the FedAvg page)."""
    if inputs not in INPUT_SCALINGS:
        raise ConfigError(f"--inputs must be one of {', '.join(INPUT_SCALINGS)}; got {inputs!r}")
    if inputs == "standardized":
        return ds
    return Dataset(ds.name, ds.train_x, ds.train_y, ds.test_x, ds.test_y, torch.zeros_like(ds.mean),
                   torch.ones_like(ds.std))


def subset(ds: Dataset, train_size: int, test_size: int, generator: torch.Generator) -> Dataset:
    """A random subset (0 keeps a split whole), for smoke runs on real data."""

    def pick(x, y, size, flag):
        if size == 0:
            return x, y
        if not 0 < size <= len(y):
            raise ConfigError(f"{flag} must be in [0, {len(y)}] for {ds.name}; got {size}")
        idx = torch.randperm(len(y), generator=generator)[:size].sort().values.to(y.device)
        return x[idx], y[idx]

    train_x, train_y = pick(ds.train_x, ds.train_y, train_size, "--train-subset")
    test_x, test_y = pick(ds.test_x, ds.test_y, test_size, "--test-subset")
    return Dataset(ds.name, train_x, train_y, test_x, test_y, ds.mean, ds.std)
