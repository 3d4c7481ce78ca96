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


def make(cfg) -> Algorithm:
    alpha = cfg.feddc_alpha

    def init(params, buffers, num_clients):
        per_client = P.zeros_like(P.broadcast(params, num_clients))
        return ServerState(params, buffers, per_client, P.zeros_like(params), dict(per_client))

    def run_round(state: ServerState, inputs):
        ids, m = inputs.selected, len(inputs.selected)
        dev_ids = ids.to(next(iter(state.params.values())).device)
        h_i, c_i = P.select(state.drifts, dev_ids), P.select(state.client_controls, dev_ids)
        start = P.broadcast(state.params, m)
        result = inputs.train(start, P.broadcast(state.buffers, m), ids, anchor=P.sub(start, h_i),
                              grad_shift=P.sub(P.broadcast(state.control, m), c_i), prox_mu=alpha)
        deltas = P.sub(inputs.perturb(result.params), state.params)  # theta_i - theta
        p = A.aggregation_weights(result.num_examples, inputs.weighting)
        drifts = P.scatter_rows(state.drifts, ids, P.add(h_i, deltas))
        new_c_i = A.control_variate_update(c_i, state.control, deltas, result.steps, inputs.lr)
        delta_c = P.weighted_sum(P.sub(new_c_i, c_i), P.ones_weights(m) / inputs.num_clients)
        mean_drift = P.weighted_sum(drifts, P.ones_weights(inputs.num_clients) / inputs.num_clients)
        new = ServerState(P.add(A.fedavg(state.params, deltas, p), mean_drift),
                          A.average_buffers(result.buffers, p), drifts, P.add(state.control, delta_c),
                          P.scatter_rows(state.client_controls, ids, new_c_i))
        return new, report(result.train_loss, deltas, p)

    def eval_models(state: ServerState):
        return {"test": (state.params, state.buffers), "test_distributed": (state.params, state.buffers)}

    return Algorithm("feddc", ServerState, init, run_round, eval_models)
