"""FedProx (Li et al. 2020, "Federated Optimization in Heterogeneous Networks", eq. 2): each client
minimises its loss + (mu/2) ||w - w_t||^2; the server averages as FedAvg does."""

from __future__ import annotations

from fedcore.algorithms import Algorithm, fedavg


def make(cfg) -> Algorithm:
    return fedavg.make(cfg, "fedprox", prox_mu=cfg.mu)
