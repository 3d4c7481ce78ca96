"""One module per federated algorithm, each a small explicit state machine built from the run config:

    algo = make(cfg)
    state = algo.init(params, buffers, num_clients)
    state, report = algo.run_round(state, inputs)      # inputs: RoundInputs, report: RoundReport
    algo.eval_models(state) -> {"test": (params, buffers), "test_distributed": (params, buffers)}

`state.params` is always the model the server distributes next (w_{t+1}); "test" is the model whose
accuracy the paper reports (FedNNNN sec. 4.1 separates the two; for the other algorithms they coincide).
States are frozen dataclasses of tensors and Params dicts, so checkpoints save and restore them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from fedcore import params as P


@dataclass(frozen=True)
class RoundInputs:
    """What the run loop hands an algorithm for round t."""

    round: int  # t, from 1
    lr: float  # eta_t
    prev_lr: float  # eta_{t-1} (FedUmf's fusion ratio); equals lr in round 1
    selected: torch.Tensor  # S_t: ids of the clients whose updates the server aggregates
    num_clients: int  # K (McMahan) / n (FedUmf)
    weighting: str  # "samples" (n_k / sum n_k) or "uniform" (1/m)
    train: Callable  # train(start, start_buffers, client_ids, anchor=None, grad_shift=None, prox_mu=0) -> CohortResult
    perturb: Callable  # perturb(stacked params) -> params with the upload noise of --noise-std added


@dataclass
class RoundReport:
    """What a round measured; the run loop turns it into the NWDA metrics and the round record."""

    deltas: P.Params  # Delta_k = w^k_{t+1} - w_t of the aggregated clients, stacked
    weights: torch.Tensor  # p_k
    train_loss: float  # p-weighted mean local training loss of the aggregated clients
    client_computations: int  # clients that ran local training this round
    extra: dict = field(default_factory=dict)  # algorithm-specific scalars


@dataclass(frozen=True)
class Algorithm:
    name: str
    state_type: type
    init: Callable
    run_round: Callable
    eval_models: Callable


def make(cfg) -> Algorithm:
    from fedcore.algorithms import feddc, feddyn, fedavg, fednnnn, fedprox, fedumf, fedumf_feddc, scaffold

    factories = {
        "fedavg": fedavg.make, "fedprox": fedprox.make,
        "normnorm": fednnnn.make, "momentum": fednnnn.make, "fednnnn": fednnnn.make,
        "fedumf": fedumf.make, "scaffold": scaffold.make, "feddyn": feddyn.make, "feddc": feddc.make,
        "fedumf_feddc": fedumf_feddc.make,
    }
    return factories[cfg.algorithm](cfg)


NAMES = ("fedavg", "fedprox", "normnorm", "momentum", "fednnnn", "fedumf", "scaffold", "feddyn", "feddc",
         "fedumf_feddc")
