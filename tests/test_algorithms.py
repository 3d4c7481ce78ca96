"""The papers' algorithms as state machines, driven by a scripted 'local training' (no data), and end to
end on a real MNIST subset."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedcore import aggregators as A
from fedcore import algorithms, experiment
from fedcore import params as P
from fedcore.client import CohortResult
from fedcore.config import RunConfig, Runtime
from tests.helpers import needs_mnist

NUM_CLIENTS = 6


def _target(i: int) -> P.Params:
    g = torch.Generator().manual_seed(1000 + i)
    return {"w": torch.randn(3, 2, generator=g), "b": torch.randn(2, generator=g)}


class ScriptedTraining:
    """Each client moves halfway from its start to its own fixed target; every call is logged."""

    def __init__(self):
        self.calls = []

    def __call__(self, start, start_buffers, ids, anchor=None, grad_shift=None, prox_mu=0.0):
        self.calls.append({"ids": ids.clone(), "start": {k: v.clone() for k, v in start.items()}})
        targets = P.stack([_target(int(i)) for i in ids])
        m = len(ids)
        return CohortResult({k: start[k] + 0.5 * (targets[k] - start[k]) for k in start}, {},
                            torch.tensor([10 + int(i) for i in ids]), torch.zeros(m), torch.full((m,), 3))


def _inputs(t, selected, train, lr=0.1, prev_lr=0.1, weighting="samples"):
    return algorithms.RoundInputs(t, lr, prev_lr, torch.tensor(selected), NUM_CLIENTS, weighting, train,
                                  lambda stacked: stacked)


def _cfg(**kw) -> RunConfig:
    return RunConfig(**kw)


def _run_rounds(cfg, selections, lrs=None):
    algo = algorithms.make(cfg)
    state = algo.init({"w": torch.zeros(3, 2), "b": torch.zeros(2)}, {}, NUM_CLIENTS)
    train = ScriptedTraining()
    lrs = lrs or [0.1] * len(selections)
    for t, sel in enumerate(selections, start=1):
        state, _ = algo.run_round(state, _inputs(t, sel, train, lrs[t - 1], lrs[max(t - 2, 0)]))
    return algo, state, train


SELECTIONS = [[0, 1], [1, 2], [0, 2], [3, 4], [0, 5]]


def _equal(a: P.Params, b: P.Params) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def _close(a: P.Params, b: P.Params) -> bool:
    return all(torch.allclose(a[k], b[k], rtol=1e-6, atol=1e-7) for k in a)


# --- server-side update rules (FedNNNN) -------------------------------------------------------------

@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**31), m=st.integers(1, 10), beta=st.floats(0.1, 2.0))
def test_normnorm_step_has_norm_beta_times_E(seed, m, beta):
    g = torch.Generator().manual_seed(seed)
    deltas = {"w": torch.randn(m, 5, 3, generator=g, dtype=torch.float64)}
    p = A.aggregation_weights(torch.randint(1, 50, (m,), generator=g), "samples")
    N, E = A.nwda(deltas, p)
    step = A.normnorm_step(A.weighted_delta(deltas, p), N, E, beta)  # eq. 8
    assert torch.isclose(P.norm(step), beta * E, rtol=1e-9)  # eq. 9


def test_normnorm_leaves_the_model_unchanged_when_N_is_zero():
    deltas = {"w": torch.tensor([[1.0, -2.0], [-1.0, 2.0]])}  # opposite updates cancel: N = 0
    p = torch.tensor([0.5, 0.5], dtype=torch.float64)
    N, E = A.nwda(deltas, p)
    assert N == 0 and E > 0
    assert torch.equal(A.normnorm_step(A.weighted_delta(deltas, p), N, E, 1.0)["w"], torch.zeros(2))


def test_fednnnn_with_gamma_zero_equals_normnorm():
    _, a, _ = _run_rounds(_cfg(algorithm="fednnnn", beta=0.7, gamma=0.0), SELECTIONS)
    _, b, _ = _run_rounds(_cfg(algorithm="normnorm", beta=0.7), SELECTIONS)
    assert _equal(a.params, b.params)


def test_fednnnn_without_normalisation_equals_momentum(monkeypatch):
    _, want, _ = _run_rounds(_cfg(algorithm="momentum", gamma=0.6), SELECTIONS)
    monkeypatch.setattr(A, "normnorm_step", lambda avg_delta, N, E, beta: avg_delta)  # beta E/N -> 1
    _, got, _ = _run_rounds(_cfg(algorithm="fednnnn", beta=0.7, gamma=0.6), SELECTIONS)
    assert _equal(got.params, want.params)


def test_momentum_by_hand():
    # One client per round with weight 1: d_1 = Delta_1, d_2 = gamma d_1 + Delta_2 (eq. 10-11).
    algo, state, train = _run_rounds(_cfg(algorithm="momentum", gamma=0.5), [[0], [0]])
    w0 = {"w": torch.zeros(3, 2), "b": torch.zeros(2)}
    d1 = P.scale(_target(0), 0.5)
    w1 = P.add(w0, d1)
    d2 = P.add(P.scale(P.sub(_target(0), w1), 0.5), d1, 0.5)
    assert _close(state.params, P.add(w1, d2))
    # The evaluated model is the plain average w_1 + Delta_2, not w_2 (FedNNNN sec. 4.1).
    assert _close(algo.eval_models(state)["test"][0], P.add(w1, P.scale(P.sub(_target(0), w1), 0.5)))


def test_fedavg_family_agrees_when_it_should():
    _, fedavg, _ = _run_rounds(_cfg(algorithm="fedavg"), SELECTIONS)
    _, momentum0, _ = _run_rounds(_cfg(algorithm="momentum", gamma=0.0), SELECTIONS)
    _, fedprox0, _ = _run_rounds(_cfg(algorithm="fedprox", mu=0.0), SELECTIONS)
    _, fedumf0, _ = _run_rounds(_cfg(algorithm="fedumf", alpha=0.0), SELECTIONS)
    assert _equal(fedavg.params, momentum0.params)
    assert _equal(fedavg.params, fedprox0.params)
    assert _equal(fedavg.params, fedumf0.params)


# --- FedUmf bookkeeping --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["fedumf", "fedumf_feddc"])
def test_fedumf_fuses_stored_updates_of_newly_authorised_clients(name):
    lrs = [0.1, 0.05, 0.05]
    algo, state, train = _run_rounds(_cfg(algorithm=name, alpha=0.5), [[0, 1], [1, 2], [0, 2]], lrs)
    everyone = torch.arange(NUM_CLIENTS)
    assert all(torch.equal(c["ids"], everyone) for c in train.calls)  # all n clients train every round

    def stored_after(t):  # g^i_t = theta^i_{t+1} - theta^i_{t,0} = 0.5 (target_i - start_i)
        start = train.calls[t - 1]["start"]
        return {k: 0.5 * (P.stack([_target(i) for i in range(NUM_CLIENTS)])[k] - start[k]) for k in start}

    theta = [None]  # theta_t as each round broadcast it
    for c in train.calls:
        theta.append({k: v[3] for k, v in c["start"].items()})  # client 3 is never selected: plain theta_t
    # Round 1: S_0 is empty and g_0 = 0, so every start is theta_1.
    assert all(_equal(P.row(train.calls[0]["start"], i), theta[1]) for i in range(NUM_CLIENTS))
    # Round 2: client 2 is new in S_2 and fuses alpha (eta_2/eta_1) g^2_1; client 1 stayed; others plain.
    g1 = stored_after(1)
    start2 = train.calls[1]["start"]
    assert _close(P.row(start2, 2), P.add(theta[2], P.row(g1, 2), 0.5 * 0.05 / 0.1))
    for i in (0, 1, 3, 4, 5):
        assert _equal(P.row(start2, i), theta[2])
    # Round 3: client 0 is new again (it sat out round 2) and fuses its round-2 update with ratio 1.
    g2 = stored_after(2)
    start3 = train.calls[2]["start"]
    assert _close(P.row(start3, 0), P.add(theta[3], P.row(g2, 0), 0.5))
    for i in (1, 2, 3, 4, 5):
        assert _equal(P.row(start3, i), theta[3])
    # Every client's stored update was overwritten by round 3's.
    assert _close(state.stored, stored_after(3))
    assert state.prev_selected.tolist() == [True, False, True, False, False, False]


def test_fedumf_feddc_with_alpha_zero_is_feddc():
    # Without fusion the extra training of unselected clients must leave FedDC's state untouched.
    _, feddc, _ = _run_rounds(_cfg(algorithm="feddc"), SELECTIONS)
    _, combined, _ = _run_rounds(_cfg(algorithm="fedumf_feddc", alpha=0.0), SELECTIONS)
    for field in ("params", "drifts", "control", "client_controls"):
        assert _close(getattr(combined, field), getattr(feddc, field)), field


def test_fedumf_feddc_keeps_feddc_bookkeeping_for_authorised_clients_only():
    _, state, _ = _run_rounds(_cfg(algorithm="fedumf_feddc", alpha=1.0), [[0, 1], [1, 2]])
    for i in (3, 4, 5):  # never authorised: trained every round, but h_i and c_i were never sent
        assert all(torch.equal(v[i], torch.zeros_like(v[i])) for v in state.drifts.values())
        assert all(torch.equal(v[i], torch.zeros_like(v[i])) for v in state.client_controls.values())
        assert any(v[i].abs().sum() > 0 for v in state.stored.values())  # ...yet each stored its g^i


# --- end to end on real MNIST ---------------------------------------------------------------------------

SMOKE = dict(dataset="mnist", model="fednnnn_mnist", partition="shards", clients=10, fraction=0.3,
             local_epochs=1, batch_size=20, lr=0.05, rounds=3, train_subset=2000, test_subset=500,
             beta=0.7, gamma=0.5, mu=0.01)


@needs_mnist
@pytest.mark.parametrize("name", algorithms.NAMES)
def test_every_algorithm_learns_on_real_mnist(name, tmp_path):
    # IID, so that three rounds of any of them must show learning (on shards the first rounds swing).
    doc = experiment.run(RunConfig(**{**SMOKE, "algorithm": name, "partition": "iid"}),
                         Runtime(device="cpu", out=tmp_path / "r.json", progress=False))
    rounds = doc["rounds"]
    assert rounds[-1]["test_acc"] > rounds[0]["test_acc"] + 0.1
    for r in rounds[1:]:
        assert r["N"] <= r["E"] * (1 + 1e-9)
        assert set(r["layers"]) == {"conv1", "conv2", "fc1", "fc2"} and set(r["kinds"]) == {"conv", "fc"}
        assert r["server_step"] > 0 and r["test_acc_distributed"] is not None
    assert rounds[-1]["server_step_integral"] == pytest.approx(sum(r["server_step"] for r in rounds[1:]))
    computations = rounds[1]["client_computations"]
    assert computations == (10 if name.startswith("fedumf") else 3)


@needs_mnist
def test_fedumf_with_alpha_zero_and_fedprox_with_mu_zero_match_fedavg_on_mnist(tmp_path):
    def run(**kw):
        cfg = RunConfig(**{**SMOKE, "model": "mcmahan_2nn", "rounds": 3, **kw})
        return experiment.run(cfg, Runtime(device="cpu", out=tmp_path / f"{kw['algorithm']}.json", progress=False))

    fedavg = run(algorithm="fedavg")
    for other in (run(algorithm="fedprox", mu=0.0), run(algorithm="fedumf", alpha=0.0)):
        for a, b in zip(fedavg["rounds"], other["rounds"]):
            assert b["test_acc"] == pytest.approx(a["test_acc"], abs=2e-3)  # at most one of 500 flips
            if a["round"]:
                assert b["N"] == pytest.approx(a["N"], rel=1e-5)


@needs_mnist
def test_upload_noise_changes_the_run_and_is_seeded(tmp_path):
    def run(name, **kw):
        cfg = RunConfig(**{**SMOKE, "model": "mcmahan_2nn", "algorithm": "fedavg", **kw})
        return experiment.run(cfg, Runtime(device="cpu", out=tmp_path / name, progress=False))["rounds"]

    plain, noisy, again = run("a.json"), run("b.json", noise_std=0.01), run("c.json", noise_std=0.01)
    assert plain[-1]["N"] != noisy[-1]["N"]
    assert noisy[-1]["N"] == again[-1]["N"]
