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
    norms = P.client_norms(deltas)
    E = (weights.to(norms.device, torch.float64) * norms).sum()
    return N, E


def normnorm_step(avg_delta: P.Params, N: torch.Tensor, E: torch.Tensor, beta: float,
                  eps: float = 1e-12) -> P.Params:
    """beta (E/N) sum_k p_k Delta_k (FedNNNN eq. 8); zero when N is (near) zero, as the paper says."""
    if N <= eps:
        return P.zeros_like(avg_delta)
    return P.scale(avg_delta, float(beta * E / N))


def momentum(d: P.Params, step: P.Params, gamma: float) -> P.Params:
    """d_{t+1} = gamma d_t + step (FedNNNN eq. 10 and 12)."""
    return P.add(step, d, gamma)


def control_variate_update(c_i: P.Params, c: P.Params, deltas: P.Params, steps: torch.Tensor,
                           lr: float) -> P.Params:
    """SCAFFOLD's new client control variates, option II (Karimireddy et al. 2020, Algorithm 1 line 12):
    c_i+ = c_i - c + (x - y_i) / (K_i eta) = c_i - c - Delta_i / (K_i eta), stacked over clients."""
    inv = (1.0 / (steps.double() * lr)).float()
    return {k: c_i[k] - c[k] - inv.to(deltas[k].device).view(-1, *[1] * (deltas[k].dim() - 1)) * deltas[k]
            for k in c_i}


def nwda_by_group(deltas: P.Params, weights: torch.Tensor, server_step: P.Params,
                  groups: dict[str, tuple[str, str]]) -> dict:
    """N, E and the server step ||w_{t+1} - w_t|| per layer and per layer kind (FedNNNN Figs. 8-33).

    `groups` maps a parameter name to (layer label, kind), as fedcore.models.layer_groups returns.
    """
    out: dict[str, dict] = {"layers": {}, "kinds": {}}
    for level, pick in (("layers", 0), ("kinds", 1)):
        for label in dict.fromkeys(g[pick] for g in groups.values()):
            names = [k for k, g in groups.items() if g[pick] == label]
            N, E = nwda({k: deltas[k] for k in names}, weights)
            out[level][label] = {"N": float(N), "E": float(E),
                                 "step": float(P.norm({k: server_step[k] for k in names}))}
    return out
