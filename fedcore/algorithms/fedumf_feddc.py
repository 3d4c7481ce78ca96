"""FedUmf combined with FedDC (FedUmf paper, appendix A: "combining FedUmf with the state-of-the-art
algorithm (FedDC)"; the paper gives no further detail, so the combination is the one that falls out).

FedUmf's client side is unchanged (fedumf.fused_round: fusion starts, all n clients train, everyone stores
g^i_t), but every client trains on FedDC's local objective (drift penalty and gradient correction), and
the server's side is FedDC's (feddc.server_update) over S_t. Only S_t's drifts h_i and control variates
c_i change: unselected clients' training is private to them, as in FedUmf. The control variates are
measured from each client's own gradient steps g^i_t, not from the fused start.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from fedcore import params as P
from fedcore.algorithms import Algorithm, feddc, fedumf
from fedcore.algorithms.fedavg import report


@dataclass(frozen=True)
class ServerState(feddc.ServerState):
    stored: P.Params  # g^i_{t-1} for every client, stacked [n, ...]
    prev_selected: torch.Tensor  # bool [n]: membership of S_{t-1}


def make(cfg) -> Algorithm:
    def init(params, buffers, num_clients):
        device = next(iter(params.values())).device
        return ServerState(**feddc.init_fields(params, buffers, num_clients),
                           stored=P.zeros_like(P.broadcast(params, num_clients)),
                           prev_selected=torch.zeros(num_clients, dtype=torch.bool, device=device))

    def run_round(state: ServerState, inputs):
        everyone = torch.arange(inputs.num_clients)
        r = fedumf.fused_round(state, inputs, cfg.alpha, prox_mu=cfg.feddc_alpha,
                               **feddc.local_terms(state, everyone))
        new = feddc.server_update(state, r.ids, r.deltas, P.select(r.stored, r.ids),
                                  r.result.steps[r.ids.cpu()], r.weights,
                                  P.select(r.result.buffers, r.ids), inputs)
        new = dataclasses.replace(new, stored=r.stored, prev_selected=r.selected)
        return new, report(r.result.train_loss[r.ids.cpu()], r.deltas, r.weights,
                           client_computations=inputs.num_clients, fused_clients=int(r.fuse.sum()))

    def eval_models(state: ServerState):
        return {"test": (state.params, state.buffers), "test_distributed": (state.params, state.buffers)}

    return Algorithm("fedumf_feddc", ServerState, init, run_round, eval_models)
