"""FedDyn (Acar et al. 2021, "Federated Learning Based on Dynamic Regularization", Algorithm 1).

Client k in P_t minimises L_k(theta) - <grad L_k(theta_k^{t-1}), theta> + (alpha/2) ||theta - theta^{t-1}||^2,
then grad L_k(theta_k^t) = grad L_k(theta_k^{t-1}) - alpha (theta_k^t - theta^{t-1}). The server keeps
h^t = h^{t-1} - alpha (1/m) sum_{k in P_t} (theta_k^t - theta^{t-1}) (m = all clients) and sends
theta^t = mean_{k in P_t} theta_k^t - h^t / alpha. Departure: the authors' code divides alpha by each
client's relative data size; we use one alpha, as the paper's equations do (equal for balanced splits).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedcore import aggregators as A
from fedcore import params as P
from fedcore.algorithms import Algorithm
from fedcore.algorithms.fedavg import report


@dataclass(frozen=True)
class ServerState:
    params: P.Params  # theta^t
    buffers: P.Params
    h: P.Params  # h^t, h^0 = 0
    client_grads: P.Params  # grad L_k(theta_k^{t-1}) for every client, stacked [m, ...], 0 at start


def make(cfg) -> Algorithm:
    alpha = cfg.feddyn_alpha

    def init(params, buffers, num_clients):
        return ServerState(params, buffers, P.zeros_like(params), P.zeros_like(P.broadcast(params, num_clients)))

    def run_round(state: ServerState, inputs):
        ids, m = inputs.selected, len(inputs.selected)
        grads = P.select(state.client_grads, ids.to(next(iter(state.params.values())).device))
        result = inputs.train(P.broadcast(state.params, m), P.broadcast(state.buffers, m), ids,
                              grad_shift=P.scale(grads, -1.0), prox_mu=alpha)
        deltas = P.sub(inputs.perturb(result.params), state.params)  # theta_k^t - theta^{t-1}
        p = A.aggregation_weights(result.num_examples, inputs.weighting)
        client_grads = P.scatter_rows(state.client_grads, ids, P.add(grads, deltas, -alpha))
        h = P.add(state.h, P.weighted_sum(deltas, P.ones_weights(m) / inputs.num_clients), -alpha)
        new = ServerState(P.add(A.fedavg(state.params, deltas, p), h, -1.0 / alpha),
                          A.average_buffers(result.buffers, p), h, client_grads)
        return new, report(result.train_loss, deltas, p)

    def eval_models(state: ServerState):
        return {"test": (state.params, state.buffers), "test_distributed": (state.params, state.buffers)}

    return Algorithm("feddyn", ServerState, init, run_round, eval_models)
