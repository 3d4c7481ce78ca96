"""FedAvg (McMahan et al. 2017, Algorithm 1; v4 erratum: weights n_k / sum of n_k over the round's clients).

With E=1 and B=0 (full batch) this is FedSGD; `--weighting uniform` gives the unweighted average that the
replication poster (sec. 2.2) compares with n_k/n weights on unbalanced data; `--noise-std` adds the
poster's Gaussian noise N(0, sigma^2) to every uploaded client model (sec. 2.4).
"""

from __future__ import annotations

from dataclasses import dataclass

from fedcore import aggregators as A
from fedcore import params as P
from fedcore.algorithms import Algorithm, RoundReport


@dataclass(frozen=True)
class ServerState:
    params: P.Params  # w_t
    buffers: P.Params  # BatchNorm running statistics of the global model


def train_selected(params: P.Params, buffers: P.Params, inputs, **train_kwargs):
    """Broadcast w_t to S_t, train, add upload noise; (result, deltas Delta_k, weights p_k)."""
    m = len(inputs.selected)
    result = inputs.train(P.broadcast(params, m), P.broadcast(buffers, m), inputs.selected, **train_kwargs)
    uploaded = inputs.perturb(result.params)
    deltas = P.sub(uploaded, params)  # Delta_k = w^k_{t+1} - w_t
    return result, deltas, A.aggregation_weights(result.num_examples, inputs.weighting)


def report(train_loss, deltas, p, client_computations: int | None = None, **extra) -> RoundReport:
    """A RoundReport; train_loss is the aggregated clients' local losses [m], weighted by p."""
    computations = len(p) if client_computations is None else client_computations
    return RoundReport(deltas, p, float((p * train_loss.double()).sum()), computations, extra)


def make(cfg, name: str = "fedavg", **train_kwargs) -> Algorithm:
    """FedAvg; `train_kwargs` change only the clients' local objective (FedProx's prox_mu)."""

    def init(params, buffers, num_clients):
        return ServerState(params, buffers)

    def run_round(state: ServerState, inputs):
        result, deltas, p = train_selected(state.params, state.buffers, inputs, **train_kwargs)
        new = ServerState(A.fedavg(state.params, deltas, p), A.average_buffers(result.buffers, p))
        return new, report(result.train_loss, deltas, p)

    def eval_models(state: ServerState):
        return {"test": (state.params, state.buffers), "test_distributed": (state.params, state.buffers)}

    return Algorithm(name, ServerState, init, run_round, eval_models)
