"""One module per federated algorithm, each a small state machine:

    init(params, buffers, cfg, num_clients) -> state
    run_round(state, inputs: RoundInputs) -> (state, metrics dict)
    eval_models(state) -> {"test": (params, buffers), ...}   the models whose accuracy is recorded

States are frozen dataclasses of tensors and Params dicts, so checkpoints can save and restore them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from fedcore.algorithms import fedavg

REGISTRY = {"fedavg": fedavg}


@dataclass(frozen=True)
class RoundInputs:
    """What the run loop hands an algorithm for round t."""

    round: int  # t, from 1
    lr: float  # eta_t
    selected: torch.Tensor  # S_t: ids of the clients whose updates the server aggregates
    weighting: str  # "samples" (n_k/n) or "uniform" (1/m)
    train: Callable  # train(start, start_buffers, client_ids, anchor=None, grad_shift=None) -> CohortResult
