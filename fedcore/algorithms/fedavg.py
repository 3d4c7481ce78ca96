"""FedAvg (McMahan et al. 2017, Algorithm 1; v4 erratum: weights n_k / sum over the round's clients).

With E=1 and B=0 (full batch) this is FedSGD; `--weighting uniform` gives the unweighted average that the
replication poster (sec. 2.2) compares against n_k/n weights on unbalanced data.
"""

from __future__ import annotations

from dataclasses import dataclass

from fedcore import aggregators as A
from fedcore import params as P


@dataclass(frozen=True)
class ServerState:
    params: P.Params  # w_t
    buffers: P.Params  # BatchNorm running statistics of the global model


def init(params: P.Params, buffers: P.Params, cfg, num_clients: int) -> ServerState:
    return ServerState(params, buffers)


def run_round(state: ServerState, inputs) -> tuple[ServerState, dict]:
    m = len(inputs.selected)
    result = inputs.train(P.broadcast(state.params, m), P.broadcast(state.buffers, m), inputs.selected)
    deltas = P.sub(result.params, state.params)  # Delta_k = w^k_{t+1} - w_t
    p = A.aggregation_weights(result.num_examples, inputs.weighting)
    new_state = ServerState(A.fedavg(state.params, deltas, p), A.average_buffers(result.buffers, p))
    N, E = A.nwda(deltas, p)
    metrics = {"train_loss": float((p * result.train_loss.double()).sum()), "N": float(N), "E": float(E),
               "client_computations": m}
    return new_state, metrics


def eval_models(state: ServerState) -> dict:
    return {"test": (state.params, state.buffers)}
