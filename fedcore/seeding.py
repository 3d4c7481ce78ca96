"""Randomness split by purpose: every random choice draws from its own seeded torch.Generator.

Nothing in fedcore touches the global RNG, so a run is reproducible from (seed, purpose, ids) alone and
a resumed run draws exactly what the uninterrupted run would have drawn.
"""

from __future__ import annotations

import contextlib
import zlib

import numpy as np
import torch

PURPOSES = ("partition", "subset", "model_init", "client_sampling", "client_batches", "noise")


def derive_seed(seed: int, purpose: str, *ids: int) -> int:
    """A 63-bit seed for `purpose` (one of PURPOSES) and integer ids such as (round, client)."""
    assert purpose in PURPOSES, purpose
    words = [seed, zlib.crc32(purpose.encode()), *ids]
    return int(np.random.SeedSequence(words).generate_state(2, np.uint64)[0] >> np.uint64(1))


def generator(seed: int, purpose: str, *ids: int, device: str | torch.device = "cpu") -> torch.Generator:
    return torch.Generator(device=device).manual_seed(derive_seed(seed, purpose, *ids))


@contextlib.contextmanager
def seeded_global_rng(seed: int):
    """torch.nn layer constructors draw from the global RNG; fork it so model init is seeded and isolated."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield
