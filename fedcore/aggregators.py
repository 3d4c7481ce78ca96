"""Server-side aggregation as pure functions over explicit (delta, weight) pairs.

Delta_k = w^k_{t+1} - w_t is client k's update, stacked on a leading client dimension; p_k are the
aggregation weights (n_k / sum of n_k over the round's clients, or 1/m). New tensors out, inputs untouched.
"""

from __future__ import annotations

import torch

from fedcore import params as P


def aggregation_weights(num_examples: torch.Tensor, weighting: str) -> torch.Tensor:
    """p_k: n_k / sum_{k in S_t} n_k (McMahan et al. Algorithm 1 as corrected in v4), or uniform 1/m."""
    n = num_examples.double()
    return n / n.sum() if weighting == "samples" else torch.full_like(n, 1.0 / len(n))


def weighted_delta(deltas: P.Params, weights: torch.Tensor) -> P.Params:
    """sum_k p_k Delta_k."""
    return P.weighted_sum(deltas, weights)


def fedavg(global_params: P.Params, deltas: P.Params, weights: torch.Tensor) -> P.Params:
    """w_{t+1} = w_t + sum_k p_k Delta_k  (McMahan et al. Algorithm 1)."""
    return P.add(global_params, weighted_delta(deltas, weights))


def average_buffers(client_buffers: P.Params, weights: torch.Tensor) -> P.Params:
    """BatchNorm running statistics are averaged like weights; integer counters take the largest."""
    return {k: P.weighted_sum({k: v}, weights)[k] if v.is_floating_point() else v.max(0).values
            for k, v in client_buffers.items()}


def nwda(deltas: P.Params, weights: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FedNNNN's norm analysis: N = ||sum_k p_k Delta_k||, E = sum_k p_k ||Delta_k||  (eq. 4-5)."""
    N = P.norm(weighted_delta(deltas, weights))
    E = (weights.double() * P.client_norms(deltas)).sum()
    return N, E
