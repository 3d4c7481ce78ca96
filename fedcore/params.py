"""Flat-vector arithmetic on parameter dicts, so the papers' equations read as a few lines.

A `Params` is a dict name -> tensor. A *stacked* Params has a leading client dimension [m, ...].
Functions return new tensors and never modify their inputs.
"""

from __future__ import annotations

import torch
from torch import nn

Params = dict[str, torch.Tensor]


def trainable(model: nn.Module) -> Params:
    return {k: v.detach().clone() for k, v in model.named_parameters()}


def buffers(model: nn.Module) -> Params:
    return {k: v.detach().clone() for k, v in model.named_buffers()}


def stack(items: list[Params]) -> Params:
    return {k: torch.stack([p[k] for p in items]) for k in items[0]}


def row(stacked: Params, i: int) -> Params:
    """Client i's Params out of a stacked Params."""
    return {k: v[i] for k, v in stacked.items()}


def broadcast(params: Params, m: int) -> Params:
    """Params repeated for m clients, as a stacked Params (a copy, safe to update in place)."""
    return {k: v.unsqueeze(0).repeat(m, *([1] * v.dim())) for k, v in params.items()}


def select(stacked: Params, idx: torch.Tensor) -> Params:
    return {k: v[idx] for k, v in stacked.items()}


def sub(a: Params, b: Params) -> Params:
    """a - b (b may be unstacked while a is stacked: it broadcasts)."""
    return {k: a[k] - b[k] for k in a}


def add(a: Params, b: Params, scale: float | torch.Tensor = 1.0) -> Params:
    """a + scale * b."""
    return {k: a[k] + scale * b[k] for k in a}


def scale(a: Params, s: float | torch.Tensor) -> Params:
    return {k: s * v for k, v in a.items()}


def zeros_like(a: Params) -> Params:
    return {k: torch.zeros_like(v) for k, v in a.items()}


def weighted_sum(stacked: Params, weights: torch.Tensor) -> Params:
    """sum_k weights[k] * stacked[k] over the leading client dimension."""
    return {k: torch.tensordot(weights.to(v.device, v.dtype), v, dims=1) for k, v in stacked.items()}


def norm(params: Params) -> torch.Tensor:
    """L2 norm of all tensors taken as one vector."""
    return torch.sqrt(sum((v.double() ** 2).sum() for v in params.values()))


def client_norms(stacked: Params) -> torch.Tensor:
    """[m] L2 norm of each client's Params taken as one vector."""
    return torch.sqrt(sum((v.double() ** 2).reshape(v.shape[0], -1).sum(1) for v in stacked.values()))


def ones_weights(m: int) -> torch.Tensor:
    """[m] float64 ones: with a scale, the weights of a plain (unweighted) sum over clients."""
    return torch.ones(m, dtype=torch.float64)


def scatter_rows(stacked: Params, idx: torch.Tensor, rows: Params) -> Params:
    """A copy of `stacked` with rows idx replaced by `rows`."""
    return {k: v.index_copy(0, idx.to(v.device), rows[k]) for k, v in stacked.items()}
