"""Shared test fixtures' building blocks: a small real-MNIST subset, loaded once per session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from fedcore import data

MNIST_ROOT = Path(os.environ.get("FEDCORE_DATA", "data"))
needs_mnist = pytest.mark.skipif(not (MNIST_ROOT / "MNIST" / "raw").is_dir(),
                                 reason=f"real MNIST not found under FEDCORE_DATA={MNIST_ROOT}")


def mnist_subset(train: int, test: int, seed: int = 0) -> data.Dataset:
    return data.subset(data.load("mnist", MNIST_ROOT), train, test, torch.Generator().manual_seed(seed))
