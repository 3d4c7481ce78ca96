"""FedUmf (Li, Chen, Yu 2022, "Model Fusion from Unauthorized Clients in Federated Learning", sec. 3.2,
Algorithm 1 and the three cases in Lemma 2's proof).

Every round the server broadcasts theta_t to all n clients and authorises S_t (|S_t| = M). All clients
train K local epochs from their start point
    theta^i_{t,0} = theta_t + alpha (eta_t / eta_{t-1}) g^i_{t-1}   if i in S_t and i not in S_{t-1} (fusion)
    theta^i_{t,0} = theta_t                                          otherwise
and store g^i_t = theta^i_{t+1} - theta^i_{t,0}; the server averages the models of S_t only.
g^i_0 = 0 and S_0 is empty. Unselected clients' training is what FedUmf adds: n/M times FedAvg's work.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from fedcore import aggregators as A
from fedcore import params as P
from fedcore.algorithms import Algorithm
from fedcore.algorithms.fedavg import report


@dataclass(frozen=True)
class ServerState:
    params: P.Params  # theta_t
    buffers: P.Params
    stored: P.Params  # g^i_{t-1} for every client, stacked [n, ...]
    prev_selected: torch.Tensor  # bool [n]: membership of S_{t-1}


def fusion_starts(theta: P.Params, stored: P.Params, fuse: torch.Tensor, coef: float) -> P.Params:
    """theta_t + coef * g^i_{t-1} for clients with fuse[i], theta_t for the others; stacked [n, ...]."""
    mask = fuse.to(next(iter(theta.values())).dtype)
    return {k: theta[k] + coef * mask.view(-1, *[1] * theta[k].dim()) * stored[k] for k in theta}


@dataclass(frozen=True)
class FusedRound:
    """What one FedUmf round of local training produced (shared with FedUmf+FedDC)."""

    result: object  # CohortResult of all n clients
    starts: P.Params  # theta^i_{t,0}, stacked [n, ...]
    stored: P.Params  # g^i_t = theta^i_{t+1} - theta^i_{t,0}, every client
    selected: torch.Tensor  # bool [n]: S_t
    fuse: torch.Tensor  # bool [n]: S_t minus S_{t-1}
    ids: torch.Tensor  # the ids of S_t
    deltas: P.Params  # theta^i_{t+1} - theta_t of S_t (fusion and upload noise included)
    weights: torch.Tensor  # p_i over S_t


def fused_round(state, inputs, alpha: float, **train_kwargs) -> FusedRound:
    """Algorithm 1's client side: fusion starts for S_t minus S_{t-1}, all n clients train, everyone
    stores g^i_t; only S_t's models are uploaded. `train_kwargs` are a combined method's local objective."""
    n = inputs.num_clients
    everyone = torch.arange(n, device=state.prev_selected.device)
    selected = torch.zeros(n, dtype=torch.bool, device=everyone.device)
    selected[inputs.selected.to(everyone.device)] = True
    fuse = selected & ~state.prev_selected  # i in S_t \ S_{t-1}
    starts = fusion_starts(state.params, state.stored, fuse, alpha * inputs.lr / inputs.prev_lr)
    result = inputs.train(starts, P.broadcast(state.buffers, n), everyone, **train_kwargs)
    ids = everyone[selected]
    deltas = P.sub(inputs.perturb(P.select(result.params, ids)), state.params)
    p = A.aggregation_weights(result.num_examples[ids.cpu()], inputs.weighting)
    return FusedRound(result, starts, P.sub(result.params, starts), selected, fuse, ids, deltas, p)


def make(cfg) -> Algorithm:
    def init(params, buffers, num_clients):
        device = next(iter(params.values())).device
        return ServerState(params, buffers, P.zeros_like(P.broadcast(params, num_clients)),
                           torch.zeros(num_clients, dtype=torch.bool, device=device))

    def run_round(state: ServerState, inputs):
        r = fused_round(state, inputs, cfg.alpha)
        new = ServerState(A.fedavg(state.params, r.deltas, r.weights),
                          A.average_buffers(P.select(r.result.buffers, r.ids), r.weights), r.stored, r.selected)
        return new, report(r.result.train_loss[r.ids.cpu()], r.deltas, r.weights,
                           client_computations=inputs.num_clients, fused_clients=int(r.fuse.sum()))

    def eval_models(state: ServerState):
        return {"test": (state.params, state.buffers), "test_distributed": (state.params, state.buffers)}

    return Algorithm("fedumf", ServerState, init, run_round, eval_models)

