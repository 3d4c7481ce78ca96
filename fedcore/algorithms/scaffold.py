"""SCAFFOLD (Karimireddy et al. 2020, "SCAFFOLD: Stochastic Controlled Averaging for Federated Learning",
Algorithm 1, option II, global step size eta_g = 1).

Clients correct every local gradient by (c - c_i): y <- y - eta (g(y) + c - c_i), the linear term
<c - c_i, y> in the local objective. Then c_i+ = c_i - c + (x - y_i)/(K eta) and the server takes
x <- x + sum p_i (y_i - x), c <- c + (1/N) sum_{i in S} (c_i+ - c_i).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedcore import aggregators as A
from fedcore import params as P
from fedcore.algorithms import Algorithm
from fedcore.algorithms.fedavg import report


@dataclass(frozen=True)
class ServerState:
    params: P.Params  # x
    buffers: P.Params
    control: P.Params  # c
    client_controls: P.Params  # c_i for every client, stacked [N, ...]


def make(cfg) -> Algorithm:
    def init(params, buffers, num_clients):
        return ServerState(params, buffers, P.zeros_like(params), P.zeros_like(P.broadcast(params, num_clients)))

    def run_round(state: ServerState, inputs):
        ids, m = inputs.selected, len(inputs.selected)
        c_i = P.select(state.client_controls, ids.to(state.params[next(iter(state.params))].device))
        shift = P.sub(P.broadcast(state.control, m), c_i)  # c - c_i
        result = inputs.train(P.broadcast(state.params, m), P.broadcast(state.buffers, m), ids, grad_shift=shift)
        deltas = P.sub(inputs.perturb(result.params), state.params)
        p = A.aggregation_weights(result.num_examples, inputs.weighting)
        new_c_i = A.control_variate_update(c_i, state.control, deltas, result.steps, inputs.lr)
        delta_c = P.weighted_sum(P.sub(new_c_i, c_i), P.ones_weights(m) / inputs.num_clients)
        client_controls = P.scatter_rows(state.client_controls, ids, new_c_i)
        new = ServerState(A.fedavg(state.params, deltas, p), A.average_buffers(result.buffers, p),
                          P.add(state.control, delta_c), client_controls)
        return new, report(result.train_loss, deltas, p)

    def eval_models(state: ServerState):
        return {"test": (state.params, state.buffers), "test_distributed": (state.params, state.buffers)}

    return Algorithm("scaffold", ServerState, init, run_round, eval_models)
