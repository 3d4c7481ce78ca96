"""Checks of fedcore.theory: FedUmf's Lemmas 1-2 and Theorems 1-2, Remark 2, FedNNNN's Proposition 1 and eq. 9.

Tolerances are never tuned to pass:
- exact identities (enumeration, linear algebra) use the a priori float64 summation bound
  (terms * eps * magnitude, ``theory.summation_tolerance``);
- Monte Carlo comparisons allow theory.MC_SIGMAS = 5 standard errors computed from the samples themselves
  (a one-sided 5-sigma excursion has probability 2.9e-7 per comparison, so a curve of ~10^3 rounds still
  fails by chance with probability < 1e-3; all seeds are fixed, so the suite is deterministic anyway).
Tests that pin a failure of the paper (Lemma 1 for FedUmf, Lemma 2 for small M/n) require the violation to
exceed the same tolerances, so they cannot pass by rounding or sampling noise.
"""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from fedcore import theory as th

K = th.MC_SIGMAS
# Zero or magnitudes in [1e-100, 1e3]: squares of smaller numbers underflow into subnormals, whose norms float64
# cannot carry to relative precision, so no relative tolerance could apply to them.
finite = st.one_of(st.just(0.0), st.floats(1e-100, 1e3), st.floats(-1e3, -1e-100))


@pytest.fixture(scope="module")
def quadratic():
    return th.quadratic_problem(rng=np.random.default_rng(0))


@pytest.fixture(scope="module")
def runs(quadratic):
    """FedUmf and FedAvg on common random numbers at M/n = 0.1 and 0.8 (~1 s each)."""
    return {M: th.run_fedumf_quadratic(quadratic, M, T=300, seeds=400, rng=np.random.default_rng(M))
            for M in (1, 8)}


# ---------------------------------------------------------------------------------------------------------
# The simulator against a plain, one-client-at-a-time reading of Algorithm 1
# ---------------------------------------------------------------------------------------------------------

def _algorithm1_by_hand(problem, subsets, noise, step_sizes, alpha):
    """Algorithm 1 (K = 1) written out client by client, for one run."""
    n = problem.n
    theta = problem.theta_init.copy()
    stored = [np.zeros(problem.d) for _ in range(n)]
    previous = set()
    for t, (subset, eta) in enumerate(zip(subsets, step_sizes)):
        ratio = eta / step_sizes[t - 1] if t else 1.0
        local = []
        for i in range(n):
            start = theta.copy()
            if i in subset and i not in previous:
                start = start + alpha * ratio * stored[i]
            gradient = problem.hessians[i] @ (start - problem.centers[i]) + noise[t, i]
            local.append(start - eta * gradient)
            stored[i] = local[i] - start
        theta = np.mean([local[i] for i in subset], axis=0)
        previous = set(subset)
    return theta


@pytest.mark.parametrize("alpha", [1.0, 0.5, 0.0])
def test_vectorised_round_matches_algorithm1_by_hand(alpha):
    problem = th.quadratic_problem(n=5, d=3, radius=np.inf, rng=np.random.default_rng(3))
    rng = np.random.default_rng(4)
    rounds, M = 6, 2
    masks = th.random_subset_masks(rng, rounds, problem.n, M)
    noise = rng.standard_normal((rounds, problem.n, problem.d))
    step_sizes = 1.0 / np.arange(1, rounds + 1)
    theta = problem.theta_init
    stored = np.zeros((problem.n, problem.d))
    previous = np.zeros(problem.n, dtype=bool)
    for t in range(rounds):
        ratio = step_sizes[t] / step_sizes[t - 1] if t else 1.0
        out = th.fedumf_round(problem, theta, stored, previous, masks[t], step_sizes[t], ratio, alpha, noise[t])
        theta, stored, previous = out.server_model, out.stored_updates, masks[t]
    expected = _algorithm1_by_hand(problem, [set(np.flatnonzero(m)) for m in masks], noise, step_sizes, alpha)
    assert np.allclose(theta, expected, rtol=0, atol=th.summation_tolerance(100, np.abs(expected).sum() + 10))


def test_random_subsets_have_size_M_and_uniform_inclusion():
    n, M, batch = 9, 4, 20000
    masks = th.random_subset_masks(np.random.default_rng(0), batch, n, M)
    assert (masks.sum(1) == M).all()
    p = M / n
    se = math.sqrt(p * (1 - p) / batch)  # binomial standard error of an inclusion frequency
    assert np.abs(masks.mean(0) - p).max() <= K * se


def test_projection_moves_only_outside_points_onto_the_sphere(quadratic):
    rng = np.random.default_rng(0)
    points = quadratic.theta_star + rng.standard_normal((1000, quadratic.d)) * quadratic.radius
    projected, moved = quadratic.project(points)
    assert np.array_equal(projected[~moved], points[~moved])
    distance = np.linalg.norm(projected[moved] - quadratic.theta_star, axis=1)
    assert np.allclose(distance, quadratic.radius, rtol=8 * th.EPS, atol=0)
    assert moved.any() and (~moved).any()


# ---------------------------------------------------------------------------------------------------------
# Lemma 2's sampling identity
# ---------------------------------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None)
@given(data=st.data(), n=st.integers(2, 8), d=st.integers(1, 4))
def test_sampling_identity_exact_by_enumeration(data, n, d):
    M = data.draw(st.integers(1, n))
    x = data.draw(hnp.arrays(np.float64, (n, d), elements=finite))
    exact, formula = th.sampling_variance_exact(x, M), th.sampling_variance_formula(x, M)
    terms = math.comb(n, M) * d * (M + n)
    scale = ((x - x.mean(0)) ** 2).sum() + (x ** 2).sum()  # rounding is relative to the raw magnitudes
    assert abs(exact - formula) <= th.summation_tolerance(terms, scale)


def test_sampling_identity_monte_carlo_large_n():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((60, 4)) * rng.uniform(0.1, 3.0, (60, 1))
    estimate = th.sampling_variance_monte_carlo(x, 12, samples=40000, rng=rng)
    assert abs(estimate.mean - th.sampling_variance_formula(x, 12)) <= K * estimate.standard_error


# ---------------------------------------------------------------------------------------------------------
# Lemma 1
# ---------------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lemma1():
    problem = th.quadratic_problem(n=5, d=2, radius=np.inf, rng=np.random.default_rng(1))
    return th.lemma1_decomposition(problem, M=2, rounds=3, rng=np.random.default_rng(2))


@pytest.mark.parametrize("reading", ["fedavg", "fedumf (would-be mean)"])
def test_lemma1_decomposition_exact(lemma1, reading):
    row = lemma1[reading]
    assert abs(row["residual"]) <= row["tolerance"]
    assert abs(row["cross_term"]) <= row["tolerance"]


def test_lemma1_decomposition_fails_for_fedumf_with_the_papers_mean(lemma1):
    row = lemma1["fedumf (paper's thetabar)"]
    assert abs(row["residual"]) > 1e6 * row["tolerance"]
    assert abs(row["cross_term"]) > 0.01 * row["lhs"]


@pytest.mark.parametrize("M", [1, 8])
def test_lemma1_cross_term_monte_carlo(runs, M):
    assert th.lemma1_cross_term(runs[M], "fedavg")["zero_consistent"]


def test_lemma1_cross_term_monte_carlo_fails_for_fedumf(runs):
    assert not th.lemma1_cross_term(runs[1], "fedumf")["zero_consistent"]


# ---------------------------------------------------------------------------------------------------------
# Lemma 2's bound
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("M", [1, 2])
def test_lemma2_bound_fails_for_small_M_over_n(M):
    result = th.lemma2_exact(n=8, M=M)
    assert result["measured"] > result["bound"] + result["tolerance"]


@pytest.mark.parametrize("M", [3, 4, 5, 6, 7])
def test_lemma2_bound_holds_for_large_M_over_n(M):
    result = th.lemma2_exact(n=8, M=M)
    assert result["measured"] <= result["bound"] + result["tolerance"]


@pytest.mark.parametrize("M", range(1, 8))
def test_corrected_lemma2_bound_for_the_would_be_mean(M):
    result = th.lemma2_exact(n=8, M=M)
    assert result["would_be_measured"] <= result["would_be_bound"] + result["tolerance"]


def test_lemma2_failure_does_not_depend_on_mu():
    """The violation is not an artefact of the strong-convexity constant: it persists as mu varies."""
    for mu in (1e-1, 1e-2, 1e-4, 1e-6):
        result = th.lemma2_exact(n=8, M=2, mu=mu)
        assert result["measured"] > result["bound"] + result["tolerance"]


@pytest.mark.parametrize("M", [1, 8])
@pytest.mark.parametrize("algorithm", ["fedumf", "fedavg"])
def test_lemma2_bound_monte_carlo_with_sigma2_on_the_domain(runs, M, algorithm):
    assert th.lemma2_check(runs[M], algorithm, sigma2="domain")["holds"]


@pytest.mark.parametrize("algorithm", ["fedumf", "fedavg"])
def test_lemma2_bound_monte_carlo_along_the_iterates_large_M(runs, algorithm):
    assert th.lemma2_check(runs[8], algorithm, sigma2="expected")["holds"]


def test_lemma2_bound_monte_carlo_along_the_iterates_fails_for_small_M(quadratic):
    """At M/n = 0.1 the measured sampling error exceeds Lemma 2's bound (sigma^2 read along the iterates) by a
    few percent in every late round: invisible round by round, significant pooled over rounds."""
    run = th.run_fedumf_quadratic(quadratic, 1, T=1000, seeds=200, rng=np.random.default_rng(11))
    check = th.lemma2_check(run, "fedumf", sigma2="expected")
    assert check["pooled_ratio"] - 1 > K * check["pooled_ratio_se"]
    assert th.lemma2_check(run, "fedavg", sigma2="expected")["holds"]


# ---------------------------------------------------------------------------------------------------------
# Theorem 1 and Remark 2
# ---------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("M", [1, 8])
@pytest.mark.parametrize("algorithm", ["fedumf", "fedavg"])
def test_theorem1_bound_holds(runs, M, algorithm):
    run = runs[M]
    assert run.projections.sum() == 0  # the projected algorithm is the paper's algorithm on these runs
    assert th.theorem1_check(run, algorithm)["holds"]
    assert th.theorem1_check(run, algorithm, sigma2=run.sigma2_expected)["holds"]


def test_theorem1_induction_step():
    """If a_{s+1} <= (1 - 2/s) a_s + C0/(s-1)^2 + C1/s^2 holds with equality from a_{t0}, the bound holds."""
    c0, c1, t0, a = 3.0, 5.0, 2, 7.0
    values = {t0: a}
    for s in range(t0, 500):
        values[s + 1] = (1 - 2 / s) * values[s] + c0 / (s - 1) ** 2 + c1 / s ** 2
    t = np.arange(t0 + 1, 501)
    assert (np.array([values[s] for s in t]) <= th.theorem1_bound(t, t0, a, c0, c1)).all()


@pytest.mark.parametrize("M", [1, 8])
def test_theorem1_rate_is_one_over_t(runs, M):
    run = runs[M]
    for algorithm in run.algorithms:
        slope, se = th.loglog_slope(run.t, run.sq_dist[run.algorithms.index(algorithm)], t_min=30)
        assert slope <= -1 + K * se


def test_remark2_depends_on_M_over_n(runs):
    """FedUmf ends closer to theta* than FedAvg at M/n = 0.8 but farther at M/n = 0.1 (heterogeneous clients)."""
    large, small = th.remark2_comparison(runs[8]), th.remark2_comparison(runs[1])
    assert large["difference"] < -K * large["difference_se"]
    assert small["difference"] > K * small["difference_se"]


# ---------------------------------------------------------------------------------------------------------
# Theorem 2
# ---------------------------------------------------------------------------------------------------------

def test_theorem2_bound_holds():
    problem = th.cosine_problem(rng=np.random.default_rng(0))
    result = th.theorem2_check(problem, M=3, horizons=(16, 64, 256), seeds=100, rng=np.random.default_rng(1))
    assert result["holds"]


def test_cosine_problem_constants():
    problem = th.cosine_problem(n=6, d=5, rng=np.random.default_rng(0))
    rng = np.random.default_rng(1)
    theta = rng.uniform(-10, 10, (20000, problem.d))
    assert problem.f(theta).min() >= problem.f_star - th.summation_tolerance(problem.d * problem.n, 10 * problem.d)
    gradient = problem.client_gradients(np.broadcast_to(theta[:, None, :], (20000, problem.n, problem.d)))
    assert (gradient ** 2).sum(-1).max() <= problem.sigma2 - problem.noise_std ** 2 * problem.d
    # full gradient = mean of client gradients
    assert np.allclose(problem.full_gradient(theta), gradient.mean(1), rtol=0, atol=1e-12)


# ---------------------------------------------------------------------------------------------------------
# FedNNNN: Proposition 1, eq. 9 and the N/E identity
# ---------------------------------------------------------------------------------------------------------

def _updates_and_weights(data, m, d):
    deltas = data.draw(hnp.arrays(np.float64, (m, d), elements=finite))
    raw = data.draw(hnp.arrays(np.float64, m, elements=st.floats(1e-3, 1.0)))
    return deltas, raw / raw.sum()


@settings(max_examples=200, deadline=None)
@given(data=st.data(), m=st.integers(1, 10), d=st.integers(1, 6))
def test_proposition1_N_at_most_E(data, m, d):
    deltas, weights = _updates_and_weights(data, m, d)
    N, E = th.nwda(deltas, weights)
    assert N <= E + th.summation_tolerance(m + d, E)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), m=st.integers(1, 10), d=st.integers(1, 6), beta=st.floats(0.1, 10.0))
def test_norm_norm_step_has_norm_beta_E(data, m, d, beta):
    deltas, weights = _updates_and_weights(data, m, d)
    N, E = th.nwda(deltas, weights)
    step = th.norm_norm_step(deltas, weights, beta)
    if N == 0:
        assert not step.any()  # the paper returns w_t unchanged
    else:
        assert abs(np.linalg.norm(step) - beta * E) <= th.summation_tolerance(4 * (m + d), beta * E)


def test_norm_norm_step_has_norm_beta_E_when_the_updates_nearly_cancel():
    # hypothesis's find: N = 13 against E = 473.7; the step once summed the updates apart from N, and its
    # rounding under that cancellation put ||step|| 16 ulps of E away from beta E
    deltas, weights = np.array([[-651.0], [730.0], [-40.0]]), np.full(3, 1 / 3)
    N, E = th.nwda(deltas, weights)
    assert N < E / 30
    assert abs(np.linalg.norm(th.norm_norm_step(deltas, weights, 1.0)) - E) <= th.summation_tolerance(16, E)


@settings(max_examples=200, deadline=None)
@given(data=st.data(), m=st.integers(2, 10), d=st.integers(1, 6))
def test_N_over_E_identity(data, m, d):
    deltas, weights = _updates_and_weights(data, m, d)
    norms = np.linalg.norm(deltas, axis=1)
    assume(norms.max() > 0 and (norms >= 1e-6 * norms.max()).all())  # cosines need non-zero updates
    N, E = th.nwda(deltas, weights)
    identity = th.nwda_ratio_identity(deltas, weights)
    # cosines are computed with relative error ~ d eps each; the weighted sum over m^2 of them adds m^2 eps
    assert abs((N / E) ** 2 - identity["ratio"] ** 2) <= 8 * (m * m + d) * th.EPS


@pytest.mark.parametrize("m,rho", [(2, -1.0), (5, -0.25), (5, 0.0), (10, 0.3), (10, 1.0)])
def test_updates_with_cosine(m, rho):
    deltas = th.updates_with_cosine(m, 16, rho, np.random.default_rng(0), norms=np.arange(1.0, m + 1))
    norms = np.linalg.norm(deltas, axis=1)
    cosines = deltas @ deltas.T / np.outer(norms, norms)
    assert np.allclose(norms, np.arange(1.0, m + 1), rtol=0, atol=64 * th.EPS * m)
    assert np.allclose(cosines[~np.eye(m, dtype=bool)], rho, rtol=0, atol=64 * th.EPS * m)
    N, E = th.nwda(deltas / norms[:, None], np.full(m, 1 / m))
    assert N / E == pytest.approx(math.sqrt(max(1 / m + (1 - 1 / m) * rho, 0)), abs=1e-7)
