"""FedNNNN and its two halves (Nagura, Bian, Sato: "FedNNNN: Norm-Normalized Neural Network Aggregation").

    normnorm  w_{t+1} = w_t + beta (E/N) sum_k p_k Delta_k                          (eq. 8)
    momentum  d_{t+1} = gamma d_t + sum_k p_k Delta_k;        w_{t+1} = w_t + d_{t+1} (eq. 10-11)
    fednnnn   d_{t+1} = gamma d_t + beta (E/N) sum p_k Delta_k; w_{t+1} = w_t + d_{t+1} (eq. 12-13, Alg. 3)

N and E are over all trainable parameters as one vector (Algorithm 3, lines 9-10). The model the paper
evaluates is the plain average w_t + sum p_k Delta_k (sec. 4.1, step 5); w_{t+1} is only distributed.
BatchNorm running statistics are averaged, never normalised or given momentum.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedcore import aggregators as A
from fedcore import params as P
from fedcore.algorithms import Algorithm
from fedcore.algorithms.fedavg import report, train_selected


@dataclass(frozen=True)
class ServerState:
    params: P.Params  # w_t, the distributed model
    buffers: P.Params
    momentum: P.Params  # d_t, d_0 = 0
    evaluated: P.Params  # the plain average of the last round's client models (sec. 4.1)


def make(cfg) -> Algorithm:
    normalize = cfg.algorithm in ("normnorm", "fednnnn")
    gamma = cfg.gamma if cfg.algorithm in ("momentum", "fednnnn") else 0.0

    def init(params, buffers, num_clients):
        return ServerState(params, buffers, P.zeros_like(params), params)

    def run_round(state: ServerState, inputs):
        result, deltas, p = train_selected(state.params, state.buffers, inputs)
        avg_delta = A.weighted_delta(deltas, p)
        N, E = A.nwda(deltas, p)
        step = A.normnorm_step(avg_delta, N, E, cfg.beta) if normalize else avg_delta
        d = A.momentum(state.momentum, step, gamma)
        new = ServerState(P.add(state.params, d), A.average_buffers(result.buffers, p), d,
                          P.add(state.params, avg_delta))
        return new, report(result.train_loss, deltas, p)

    def eval_models(state: ServerState):
        return {"test": (state.evaluated, state.buffers), "test_distributed": (state.params, state.buffers)}

    return Algorithm(cfg.algorithm, ServerState, init, run_round, eval_models)
