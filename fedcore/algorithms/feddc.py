"""FedDC (Gao et al. 2022, "FedDC: Federated Learning with Non-IID Data via Local Drift Decoupling and
Correction", Algorithm 1).

Each client keeps a local drift h_i and trains on
    L_i(theta_i) + (alpha/2) ||theta_i + h_i - theta||^2 + <theta_i, c - c_i>
where the last term is the gradient correction with SCAFFOLD-style control variates
(c_i+ = c_i - c - Delta_i/(K eta), c <- c + (1/N) sum_{i in S} (c_i+ - c_i)). After training
h_i <- h_i + (theta_i - theta), and the server sends theta = mean_{i in S} theta_i + mean_{all i} h_i.
Departure: as with FedDyn, one alpha for every client (the authors' code divides it by relative data size).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from fedcore import aggregators as A
from fedcore import params as P
from fedcore.algorithms import Algorithm
from fedcore.algorithms.fedavg import report


@dataclass(frozen=True)
class ServerState:
    params: P.Params  # theta
    buffers: P.Params
    drifts: P.Params  # h_i for every client, stacked [N, ...]
    control: P.Params  # c
    client_controls: P.Params  # c_i, stacked [N, ...]


def init_fields(params, buffers, num_clients) -> dict:
    per_client = P.zeros_like(P.broadcast(params, num_clients))
    return dict(params=params, buffers=buffers, drifts=per_client, control=P.zeros_like(params),
                client_controls=dict(per_client))


def local_terms(state: ServerState, ids) -> dict:
    """The train() keywords of FedDC's local objective for clients `ids`: the anchor theta - h_i of the
    drift penalty and the gradient correction c - c_i."""
    dev_ids = ids.to(next(iter(state.params.values())).device)
    m = len(ids)
    return dict(anchor=P.sub(P.broadcast(state.params, m), P.select(state.drifts, dev_ids)),
                grad_shift=P.sub(P.broadcast(state.control, m), P.select(state.client_controls, dev_ids)))


def server_update(state: ServerState, ids, deltas: P.Params, gradient_steps: P.Params, steps, p, buffers,
                  inputs) -> ServerState:
    """FedDC's bookkeeping after the clients `ids` trained: deltas = theta_i - theta update the drifts,
    gradient_steps (the clients' own training, end - start) the control variates; then the new theta."""
    dev_ids = ids.to(next(iter(state.params.values())).device)
    h_i, c_i = P.select(state.drifts, dev_ids), P.select(state.client_controls, dev_ids)
    drifts = P.scatter_rows(state.drifts, ids, P.add(h_i, deltas))  # h_i <- h_i + (theta_i - theta)
    new_c_i = A.control_variate_update(c_i, state.control, gradient_steps, steps, inputs.lr)
    delta_c = P.weighted_sum(P.sub(new_c_i, c_i), P.ones_weights(len(ids)) / inputs.num_clients)
    mean_drift = P.weighted_sum(drifts, P.ones_weights(inputs.num_clients) / inputs.num_clients)
    return dataclasses.replace(  # replace() keeps subclasses' own fields (FedUmf+FedDC)
        state, params=P.add(A.fedavg(state.params, deltas, p), mean_drift),
        buffers=A.average_buffers(buffers, p), drifts=drifts, control=P.add(state.control, delta_c),
        client_controls=P.scatter_rows(state.client_controls, ids, new_c_i))


def make(cfg) -> Algorithm:
    def init(params, buffers, num_clients):
        return ServerState(**init_fields(params, buffers, num_clients))

    def run_round(state: ServerState, inputs):
        ids, m = inputs.selected, len(inputs.selected)
        result = inputs.train(P.broadcast(state.params, m), P.broadcast(state.buffers, m), ids,
                              prox_mu=cfg.feddc_alpha, **local_terms(state, ids))
        deltas = P.sub(inputs.perturb(result.params), state.params)  # theta_i - theta
        p = A.aggregation_weights(result.num_examples, inputs.weighting)
        new = server_update(state, ids, deltas, deltas, result.steps, p, result.buffers, inputs)
        return new, report(result.train_loss, deltas, p)

    def eval_models(state: ServerState):
        return {"test": (state.params, state.buffers), "test_distributed": (state.params, state.buffers)}

    return Algorithm("feddc", ServerState, init, run_round, eval_models)
