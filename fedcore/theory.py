"""Numerical checks of the theory in FedUmf (section 4) and FedNNNN (section 3, eq. 8-9).

Pure numpy, float64, CPU. Every random draw comes from an explicit ``np.random.Generator``; nothing
touches numpy's global RNG. Functions return plain data (floats, arrays, dicts, dataclasses) and never print.

Papers (texts in ../shared/papers/):

- FedUmf: Li, Chen and Yu, *Model Fusion from Unauthorized Clients in Federated Learning*, Mathematics
  10(20), 3751 (2022) (003_6f8daccc1e53ba64.txt). Algorithm 1 (section 3.2), Assumptions 1-3, Lemmas 1-4,
  Theorems 1-2, Remarks 1-3 (section 4).
- FedNNNN: Nagura, Bian and Sato, *FedNNNN: Norm-Normalized Neural Network Aggregation for Fast and Accurate
  Federated Learning* (001_f3f2b09549c959d2.txt). N and E (eq. 4-5), Proposition 1 (eq. 6), Norm-Norm
  (eq. 8-9).

FedUmf as simulated here (K = 1 local step, the setting of the paper's analysis; uniform client weights, the
"equal dataset size" case the paper analyses). Round t, step size eta_t:

1. the server broadcasts theta_t to all n clients and draws S_t, a uniform M-subset, independent of the past;
2. a client i in S_t \\ S_{t-1} starts from theta_t + alpha (eta_t / eta_{t-1}) g^i_{t-1}; every other client
   starts from theta_t (S_0 is empty and g^i_0 = 0, so round 1 fuses nothing);
3. every client takes one SGD step from its start point with a stochastic gradient, and stores
   g^i_t = theta^i_{t+1} - theta^i_{t,0};
4. theta_{t+1} = (1/M) sum_{i in S_t} theta^i_{t+1}.

FedAvg is the same with alpha = 0. FedUmf and FedAvg are always run on common random numbers (the same
S_t and the same gradient noise per seed), so their difference is measured paired.

Reconstruction decisions (the PDF-to-text conversion dropped most mathematical symbols):

- The paper's proofs (case (2) of Lemma 2) write a fused client's model as
  theta_t - eta_t grad_i(theta_{t-1}) - eta_t grad_i(theta_t - eta_t grad_i(theta_{t-1})), which is
  Algorithm 1 with alpha = 1 (g^i_{t-1} = -eta_{t-1} grad_i(theta_{t-1}) because a client outside S_{t-1} was
  not fused in round t-1). The analysis therefore holds for alpha = 1 only; alpha = 1 is used throughout.
- thetabar_{t+1} = (1/n) sum_{i in [n]} theta^i_{t+1} (Lemma 1) averages the models the clients actually
  hold: fused only for i in S_t \\ S_{t-1}, as in the three cases of Lemma 2 and the expansion of Lemma 3.
  This is "the paper's thetabar". We also evaluate the "would-be mean" thetahat_{t+1} = (1/n) sum_i x^i_{t+1},
  x^i_{t+1} being the model client i would upload if selected (fused iff i is not in S_{t-1}): it does not
  depend on S_t, so Lemma 1 and the sampling identity hold for it exactly, but then up to n - M clients are
  fused, not M (see ``lemma2_bound_would_be``).
- Assumption 3, E||grad~_i(theta)||^2 <= sigma^2, contradicts Assumption 2 (mu-strong convexity) on R^d,
  since ||grad l_i(theta)|| >= mu ||theta - theta_i*|| grows without bound. For the strongly convex problem
  we therefore restrict to a ball Theta = B(theta*, R) and project the server model and the fused start
  points onto it (projected FedUmf); on Theta the assumption holds with a computable sigma^2. The runs report
  how many projections happened: when none did, the run is exactly the paper's unprojected algorithm.
- Assumptions 1-2 are printed with stochastic gradients (grad~), and the proofs use them across rounds
  (eq. 13, 17: ||grad~_i(theta_{t-1}) - grad~_i(theta_t)|| <= L ||theta_{t-1} - theta_t||, the two gradients
  carrying independent noise). No gradient noise that is fresh each round satisfies that; we use the
  standard reading (L-smooth, mu-strongly convex l_i, unbiased stochastic gradients with bounded second
  moment) and say so where the proof relies on more.

What the checks found (details in the function docstrings and notebooks/05_fedumf_theory.ipynb):

- Lemma 2's sampling identity is exact for fixed vectors.
- Lemma 1's decomposition is exact for FedAvg, but not for FedUmf with the paper's thetabar: the fused
  clients are exactly the newly selected ones, so the client models are not fixed with respect to S_t, which
  step (a) of Lemma 1 (and the first step of Lemma 2) assumes. With the would-be mean it is exact again.
- Lemma 2's bound fails for small M/n, for the same reason: exactly on ``simplex_problem`` (M/n <= 1/4 at n = 8, <= 0.3 at n = 10), and
  by a few percent along runs on a heterogeneous quadratic at M/n = 0.1 when sigma^2 is read along the
  iterates. With the would-be mean the constant must become (n - M)(4n - 3M), and then it holds.
- Theorems 1 and 2 hold with large margins, at the rates 1/t and 1/sqrt(T); Remark 2 (FedUmf faster than
  FedAvg) holds only for some M/n and heterogeneity.
- FedNNNN's Proposition 1 and eq. 9 hold to rounding.
"""

from __future__ import annotations

import functools
import itertools
import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np

EPS = np.finfo(np.float64).eps

# Monte Carlo checks pass when the measured quantity exceeds its bound by at most this many standard errors.
# For a normal estimate a one-sided 5-sigma excursion has probability 2.9e-7, so even a union over the ~10^3
# rounds of one curve would fail by chance with probability < 1e-3.
MC_SIGMAS = 5.0


@dataclass(frozen=True)
class MonteCarloEstimate:
    """Sample mean of i.i.d. draws and its standard error (sample std / sqrt(samples))."""

    mean: float
    standard_error: float
    samples: int


def mc_estimate(draws: np.ndarray) -> MonteCarloEstimate:
    """Mean and standard error of a 1-D array of i.i.d. draws."""
    draws = np.asarray(draws, dtype=np.float64)
    return MonteCarloEstimate(float(draws.mean()), float(draws.std(ddof=1) / math.sqrt(draws.size)), draws.size)


def summation_tolerance(terms: int, magnitude: float) -> float:
    """A priori float64 rounding bound for a sum of `terms` terms of total absolute size `magnitude`:
    |fl(sum) - sum| <= (terms - 1) * eps * sum|x| (Higham, Accuracy and Stability, eq. 4.4)."""
    return float(max(terms, 2) * EPS * magnitude)


def _sq_norm(x: np.ndarray) -> np.ndarray:
    """||x||^2 over the last axis (einsum: several times faster than (x**2).sum(-1) for a short last axis)."""
    return np.einsum("...d,...d->...", x, x)


def _pick(mask: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a where mask else b, row-wise over the last axis; exact (a*1 + b*0 = a for finite b) and faster than
    np.where with a broadcast mask."""
    m = mask[..., None].astype(np.float64)
    return a * m + b * (1.0 - m)


# ----------------------------------------------------------------------------------------------------------
# Lemma 2's sampling identity
# ----------------------------------------------------------------------------------------------------------

def subset_masks(n: int, M: int) -> np.ndarray:
    """All C(n, M) subsets of [n] of size M as a boolean array [C(n, M), n], in lexicographic order."""
    combos = np.array(list(itertools.combinations(range(n), M)), dtype=np.intp).reshape(-1, M)
    masks = np.zeros((len(combos), n), dtype=bool)
    np.put_along_axis(masks, combos, True, axis=1)
    return masks


def random_subset_masks(rng: np.random.Generator, batch: int, n: int, M: int) -> np.ndarray:
    """`batch` independent uniform M-subsets of [n] as a boolean array [batch, n]: the M smallest of n i.i.d.
    uniform keys are a uniform M-subset, and argpartition picks exactly M even under (measure-zero) ties."""
    keys = rng.random((batch, n))
    chosen = np.argpartition(keys, M - 1, axis=1)[:, :M]
    masks = np.zeros((batch, n), dtype=bool)
    np.put_along_axis(masks, chosen, True, axis=1)
    return masks


def sampling_variance_formula(x: np.ndarray, M: int) -> float:
    """Lemma 2's sampling identity, right-hand side: for fixed x_1..x_n ([n, d]) and S a uniform M-subset,
    E||mean_{i in S} x_i - xbar||^2 = (n - M) / (M (n - 1) n) * sum_i ||x_i - xbar||^2.

    This is the textbook variance of a sample mean drawn without replacement; the paper writes the same
    constant as (1 / (M (n - 1))) (1 - M / n)."""
    n = len(x)
    spread = float(((x - x.mean(0)) ** 2).sum())
    return (n - M) / (M * (n - 1) * n) * spread


def sampling_variance_exact(x: np.ndarray, M: int) -> float:
    """Left-hand side of Lemma 2's identity by enumerating all C(n, M) subsets (exact up to rounding)."""
    masks = subset_masks(len(x), M)
    means = masks.astype(np.float64) @ x / M
    return float(((means - x.mean(0)) ** 2).sum(1).mean())


def sampling_variance_monte_carlo(x: np.ndarray, M: int, samples: int,
                                  rng: np.random.Generator) -> MonteCarloEstimate:
    """Left-hand side of Lemma 2's identity from `samples` uniform M-subsets."""
    masks = random_subset_masks(rng, samples, len(x), M)
    means = masks.astype(np.float64) @ x / M
    return mc_estimate(((means - x.mean(0)) ** 2).sum(1))


# ----------------------------------------------------------------------------------------------------------
# Federated test problems
# ----------------------------------------------------------------------------------------------------------

class _ClientProblem:
    """What every test problem shares: n clients and dimension d, read off its [n, d] client centers."""

    centers: np.ndarray

    @property
    def n(self) -> int:
        return len(self.centers)

    @property
    def d(self) -> int:
        return self.centers.shape[1]


@dataclass(frozen=True)
class QuadraticProblem(_ClientProblem):
    """Client losses l_i(theta) = 1/2 (theta - c_i)^T A_i (theta - c_i), f = (1/n) sum_i l_i, stochastic
    gradient grad l_i(theta) + xi with xi ~ N(0, noise_std^2 I_d), domain Theta = B(theta*, radius).

    Assumption 1 holds with L = max_i lambda_max(A_i), Assumption 2 with mu = min_i lambda_min(A_i), and
    Assumption 3 on Theta with sigma2 = max_i (lambda_max(A_i) (radius + ||theta* - c_i||))^2 + noise_std^2 d,
    since E||grad l_i + xi||^2 = ||A_i (theta - c_i)||^2 + noise_std^2 d.
    """

    hessians: np.ndarray  # [n, d, d], symmetric positive definite
    centers: np.ndarray  # [n, d], client minimisers c_i
    noise_std: float
    radius: float  # np.inf: no projection
    theta_init: np.ndarray  # [d], theta_1

    @property
    def L(self) -> float:
        return float(np.linalg.eigvalsh(self.hessians)[:, -1].max())

    @property
    def mu(self) -> float:
        return float(np.linalg.eigvalsh(self.hessians)[:, 0].min())

    @functools.cached_property
    def theta_star(self) -> np.ndarray:
        """argmin f: (sum_i A_i) theta* = sum_i A_i c_i."""
        return np.linalg.solve(self.hessians.sum(0), np.einsum("nij,nj->i", self.hessians, self.centers))

    @property
    def sigma2(self) -> float:
        """Assumption 3's sigma^2 on Theta (infinite when the domain is unbounded)."""
        lam_max = np.linalg.eigvalsh(self.hessians)[:, -1]
        reach = self.radius + np.linalg.norm(self.theta_star - self.centers, axis=1)
        return float((lam_max * reach).max() ** 2 + self.noise_std ** 2 * self.d)

    def client_gradients(self, points: np.ndarray) -> np.ndarray:
        """grad l_i at points [..., n, d] (client i's gradient at points[..., i, :])."""
        # optimize=True contracts through BLAS: ~10x faster than the default loop for these shapes
        return np.einsum("nij,...nj->...ni", self.hessians, points - self.centers, optimize=True)

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Euclidean projection of points [..., d] onto Theta, and which points moved. Points inside are
        returned bit-for-bit unchanged."""
        if math.isinf(self.radius):
            return points, np.zeros(points.shape[:-1], dtype=bool)
        offset = points - self.theta_star
        dist = np.sqrt(_sq_norm(offset))
        outside = dist > self.radius
        if not outside.any():  # the common case: skip the arithmetic
            return points, outside
        projected = self.theta_star + offset * (self.radius / np.maximum(dist, self.radius))[..., None]
        return _pick(outside, projected, points), outside


def quadratic_problem(n: int = 10, d: int = 2, mu: float = 1.0, L: float = 2.0, heterogeneity: float = 1.0,
                      noise_std: float = 1.0, init_distance: float = 1.0, radius: float | None = None,
                      rng: np.random.Generator | None = None) -> QuadraticProblem:
    """A random federated strongly convex quadratic with exactly the given mu and L.

    A_i = Q_i diag(lambda_i) Q_i^T with random rotations Q_i and eigenvalues uniform in [mu, L]; client 0 gets
    eigenvalues {mu, L} (d >= 2) so min/max are attained. Centers c_i ~ N(0, heterogeneity^2 I).
    theta_1 = theta* + init_distance * (random unit vector).

    radius=None picks R = 2 (init_distance + max_i ||c_i - theta*||) + 6 noise_std sqrt(d) / mu: twice the
    largest noiseless excursion scale plus six standard deviations of the largest noise step (the first
    round's, eta_1 = 1/mu). It is large enough that projections are rare (the runs count them), and no
    larger, because sigma^2 grows with R^2.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    eigenvalues = rng.uniform(mu, L, size=(n, d))
    eigenvalues[0, 0], eigenvalues[0, -1] = mu, L
    rotations = np.linalg.qr(rng.standard_normal((n, d, d)))[0]
    hessians = np.einsum("nij,nj,nkj->nik", rotations, eigenvalues, rotations)
    centers = heterogeneity * rng.standard_normal((n, d))
    problem = QuadraticProblem(hessians, centers, noise_std, np.inf, np.zeros(d))
    theta_star = problem.theta_star
    direction = rng.standard_normal(d)
    theta_init = theta_star + init_distance * direction / np.linalg.norm(direction)
    if radius is None:
        spread = np.linalg.norm(centers - theta_star, axis=1).max()
        radius = 2 * (init_distance + spread) + 6 * noise_std * math.sqrt(d) / mu
    return QuadraticProblem(hessians, centers, noise_std, float(radius), theta_init)


def simplex_problem(n: int, mu: float = 1e-3, gradient_norm: float = 1.0) -> QuadraticProblem:
    """The configuration that breaks Lemma 2: l_i(theta) = <v_i, theta> + mu/2 ||theta||^2 with v_i the n
    vertices of a regular simplex centred at 0 (||v_i|| = gradient_norm, <v_i, v_j> = -gradient_norm^2/(n-1)).

    theta* = 0 and every client's gradient at theta* has the same norm, so the measured second moment sits
    right at sigma^2, while the clients' updates are as spread out as possible. Written as a QuadraticProblem
    with A_i = mu I and c_i = -v_i / mu; deterministic gradients, no projection, theta_1 = theta*.
    """
    vertices = np.eye(n) - 1.0 / n
    vertices *= gradient_norm / np.linalg.norm(vertices, axis=1, keepdims=True)
    return QuadraticProblem(np.broadcast_to(mu * np.eye(n), (n, n, n)).copy(), -vertices / mu, 0.0, np.inf,
                            np.zeros(n))


@dataclass(frozen=True)
class CosineProblem(_ClientProblem):
    """Smooth non-convex clients l_i(theta) = sum_j a_j (1 - cos(theta_j - c_ij)), stochastic gradient
    grad l_i(theta) + xi, xi ~ N(0, noise_std^2 I_d).

    Assumption 1 holds with L = max_j a_j (the Hessian is diag(a_j cos(theta_j - c_ij))), and Assumption 3
    holds on all of R^d with sigma2 = sum_j a_j^2 + noise_std^2 d (the sup of sum_j a_j^2 sin^2 is attained),
    so no projection is needed. f = (1/n) sum_i l_i = sum_j a_j (1 - r_j cos(theta_j - psi_j)) with
    r_j e^{i psi_j} = (1/n) sum_i e^{i c_ij}, hence f* = sum_j a_j (1 - r_j) exactly. The problem is separable;
    rotating theta would change nothing since the noise is isotropic.
    """

    scales: np.ndarray  # [d], a_j > 0
    centers: np.ndarray  # [n, d], c_ij
    noise_std: float
    theta_init: np.ndarray  # [d], theta_0

    @property
    def L(self) -> float:
        return float(self.scales.max())

    @property
    def sigma2(self) -> float:
        return float((self.scales ** 2).sum() + self.noise_std ** 2 * self.d)

    @property
    def _resultant(self) -> tuple[np.ndarray, np.ndarray]:
        mean_phasor = np.exp(1j * self.centers).mean(0)
        return np.abs(mean_phasor), np.angle(mean_phasor)

    @property
    def f_star(self) -> float:
        r, _ = self._resultant
        return float((self.scales * (1 - r)).sum())

    def f(self, theta: np.ndarray) -> np.ndarray:
        r, psi = self._resultant
        return (self.scales * (1 - r * np.cos(theta - psi))).sum(-1)

    def full_gradient(self, theta: np.ndarray) -> np.ndarray:
        r, psi = self._resultant
        return self.scales * r * np.sin(theta - psi)

    def client_gradients(self, points: np.ndarray) -> np.ndarray:
        return self.scales * np.sin(points - self.centers)

    def project(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Identity: Assumption 3 holds on all of R^d."""
        return points, np.zeros(points.shape[:-1], dtype=bool)


def cosine_problem(n: int = 10, d: int = 5, heterogeneity: float = 1.0, noise_std: float = 0.5,
                   rng: np.random.Generator | None = None) -> CosineProblem:
    """Random non-convex federated problem: a_j uniform in [0.5, 1] with max a_j = 1 (so L = 1), c_ij = m_j +
    heterogeneity * N(0, 1), theta_0 uniform in [-pi, pi]^d."""
    rng = np.random.default_rng(0) if rng is None else rng
    scales = rng.uniform(0.5, 1.0, size=d)
    scales[0] = 1.0
    centers = rng.uniform(-np.pi, np.pi, size=d) + heterogeneity * rng.standard_normal((n, d))
    return CosineProblem(scales, centers, noise_std, rng.uniform(-np.pi, np.pi, size=d))


# ----------------------------------------------------------------------------------------------------------
# One FedUmf round (K = 1), vectorised over any leading batch shape
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class RoundOutcome:
    """Everything one round produces, for a batch [...] of independent runs.

    local_models [..., n, d]: theta^i_{t+1}, the models the clients hold (fused iff i in S_t \\ S_{t-1}), as in
    the paper's Lemmas 1-3; plain_local / fused_local [..., n, d]: every client's step from theta_t and from
    its fused start point; fuses / fusable [..., n]: S_t \\ S_{t-1} and the complement of S_{t-1};
    stored_updates [..., n, d]: g^i_t; server_model [..., d]: (1/M) sum_{i in S_t} theta^i_{t+1},
    unprojected; grad_sq_plain / grad_sq_fused [..., n]: ||grad l_i||^2 (noise excluded) at theta_t and at
    client i's fused start point; fused_start_projected [..., n]: fused start points moved by the projection.
    """

    local_models: np.ndarray
    plain_local: np.ndarray
    fused_local: np.ndarray
    fuses: np.ndarray
    fusable: np.ndarray
    stored_updates: np.ndarray
    server_model: np.ndarray
    grad_sq_plain: np.ndarray
    grad_sq_fused: np.ndarray
    fused_start_projected: np.ndarray

    @functools.cached_property
    def would_be_models(self) -> np.ndarray:
        """x^i_{t+1}: the model client i would upload if selected, fused iff i is not in S_{t-1}."""
        return _pick(self.fusable, self.fused_local, self.plain_local)

    @property
    def grad_sq_actual(self) -> np.ndarray:
        """||grad l_i||^2 at the point where client i actually evaluated its gradient."""
        return np.where(self.fuses, self.grad_sq_fused, self.grad_sq_plain)

    @property
    def grad_sq_would_be(self) -> np.ndarray:
        """The largest ||grad l_i||^2 over the points the would-be reading needs: theta_t and, for clients
        outside S_{t-1}, the fused start point."""
        return np.maximum(self.grad_sq_plain, np.where(self.fusable, self.grad_sq_fused, 0.0))


def fedumf_round(problem, theta: np.ndarray, stored: np.ndarray, prev_selected: np.ndarray,
                 selected: np.ndarray, step_size: float, step_ratio: float, alpha: np.ndarray | float,
                 noise: np.ndarray) -> RoundOutcome:
    """One round of FedUmf (Algorithm 1, section 3.2) with K = 1 for a batch of runs.

    theta [..., d] is theta_t, stored [..., n, d] is g_{t-1}, prev_selected / selected [..., n] are S_{t-1}, S_t,
    step_ratio = eta_t / eta_{t-1}, alpha broadcasts against the batch shape (0 gives FedAvg), noise
    [..., n, d] is each client's gradient noise for this round. Every client computes both its plain step (from
    theta_t) and its fused step (from the projected fused start point); which one it keeps depends on S_t.
    """
    fusable = ~prev_selected
    fuses = selected & fusable
    fusion = (np.asarray(alpha, dtype=np.float64) * step_ratio)[..., None, None] * stored
    plain_start = np.broadcast_to(theta[..., None, :], fusion.shape)
    fused_start, moved = problem.project(plain_start + fusion)
    plain_grad = problem.client_gradients(plain_start)
    fused_grad = problem.client_gradients(fused_start)
    # the same noise draw whether or not the client fuses: it takes one SGD step either way
    plain_local = plain_start - step_size * (plain_grad + noise)
    fused_local = fused_start - step_size * (fused_grad + noise)
    local_models = _pick(fuses, fused_local, plain_local)
    weights = selected / selected.sum(-1, keepdims=True)
    return RoundOutcome(
        local_models=local_models, plain_local=plain_local, fused_local=fused_local, fuses=fuses, fusable=fusable,
        stored_updates=local_models - _pick(fuses, fused_start, plain_start),
        server_model=np.matmul(weights[..., None, :], local_models)[..., 0, :],
        grad_sq_plain=_sq_norm(plain_grad), grad_sq_fused=_sq_norm(fused_grad),
        fused_start_projected=moved & fuses)


# ----------------------------------------------------------------------------------------------------------
# Exact expectations by enumerating every sequence of client subsets
# ----------------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ExactRounds:
    """Exact expectations after `rounds` rounds over all C(n, M)^rounds equally likely subset sequences
    (noise fixed), at the last round t = rounds: theta = theta_{t+1}, thetabar = paper's mean of the clients'
    models, thetahat = mean of the would-be models. *_sq are E||.||^2, cross_* are 2 E<., .>."""

    paths: int
    dist_sq: float  # E||theta_{t+1} - theta*||^2
    mean_dist_sq: float  # E||thetabar_{t+1} - theta*||^2
    sampling_sq: float  # E||theta_{t+1} - thetabar_{t+1}||^2
    cross: float  # 2 E<theta_{t+1} - thetabar_{t+1}, thetabar_{t+1} - theta*>
    would_be_mean_dist_sq: float
    would_be_sampling_sq: float
    would_be_cross: float
    grad_sq_max_actual: np.ndarray  # [rounds], per round
    grad_sq_max_would_be: np.ndarray  # [rounds]
    terms: int  # float64 terms summed into each expectation (for rounding tolerances)


def enumerate_rounds(problem, M: int, step_sizes: np.ndarray, alpha: float,
                     noise: np.ndarray | None = None) -> ExactRounds:
    """Run FedUmf (alpha) or FedAvg (alpha = 0) along every sequence S_1..S_R and average uniformly.

    noise [R, n, d] is one fixed draw of the gradient noise (default 0), shared by all paths: the identities
    checked hold conditionally on the noise, hence also in expectation over it. No projection (use a problem
    with radius = inf)."""
    subsets = subset_masks(problem.n, M)
    rounds = len(step_sizes)
    noise = np.zeros((rounds, problem.n, problem.d)) if noise is None else noise
    theta = problem.theta_init[None, :]
    stored = np.zeros((1, problem.n, problem.d))
    prev_selected = np.zeros((1, problem.n), dtype=bool)
    grad_actual, grad_would_be = np.zeros(rounds), np.zeros(rounds)
    for r in range(rounds):
        paths = len(theta)
        theta, stored, prev_selected = (np.repeat(a, len(subsets), axis=0) for a in (theta, stored, prev_selected))
        selected = np.tile(subsets, (paths, 1))
        step_ratio = step_sizes[r] / step_sizes[r - 1] if r else 1.0
        out = fedumf_round(problem, theta, stored, prev_selected, selected, step_sizes[r], step_ratio, alpha,
                           noise[r])
        grad_actual[r], grad_would_be[r] = out.grad_sq_actual.max(), out.grad_sq_would_be.max()
        theta, stored, prev_selected = out.server_model, out.stored_updates, selected
    theta_star = problem.theta_star
    thetabar = out.local_models.mean(-2)
    thetahat = out.would_be_models.mean(-2)

    def sq(v):
        return float((v ** 2).sum(-1).mean())

    def cross(a, b):
        return float(2 * (a * b).sum(-1).mean())

    return ExactRounds(
        paths=len(theta), dist_sq=sq(theta - theta_star), mean_dist_sq=sq(thetabar - theta_star),
        sampling_sq=sq(theta - thetabar), cross=cross(theta - thetabar, thetabar - theta_star),
        would_be_mean_dist_sq=sq(thetahat - theta_star), would_be_sampling_sq=sq(theta - thetahat),
        would_be_cross=cross(theta - thetahat, thetahat - theta_star),
        grad_sq_max_actual=grad_actual, grad_sq_max_would_be=grad_would_be,
        terms=len(theta) * problem.d * (problem.n + 2))


def lemma1_decomposition(problem: QuadraticProblem, M: int, rounds: int = 3, alpha: float = 1.0,
                         rng: np.random.Generator | None = None) -> dict:
    """Lemma 1, checked exactly by enumeration:
    E||theta_{t+1} - theta*||^2 = E||thetabar_{t+1} - theta*||^2 + E||theta_{t+1} - thetabar_{t+1}||^2,
    which holds iff the cross term 2 E<theta_{t+1} - thetabar_{t+1}, thetabar_{t+1} - theta*> vanishes.

    The proof's step (a), E_{S_t}[theta_{t+1}] = thetabar_{t+1}, treats the clients' models as fixed with
    respect to S_t. For FedAvg they are, and the identity is exact. For FedUmf the fused clients are exactly
    the newly selected ones, so with the paper's thetabar the models depend on S_t and the cross term is not
    zero; with the would-be mean thetahat (models fixed given the past) it is again exact.

    Step sizes eta_t = 1/(mu t) as in Theorem 1; one fixed N(0, noise_std^2) draw of the gradient noise per
    (round, client) from rng. Returns, for "fedavg", "fedumf (paper's thetabar)" and "fedumf (would-be mean)":
    lhs, mean term, sampling term, cross term, lhs - (mean + sampling), and a rounding tolerance.
    """
    rng = np.random.default_rng(0) if rng is None else rng
    step_sizes = 1.0 / (problem.mu * np.arange(1, rounds + 1))
    noise = problem.noise_std * rng.standard_normal((rounds, problem.n, problem.d))
    fedavg = enumerate_rounds(problem, M, step_sizes, 0.0, noise)
    fedumf = enumerate_rounds(problem, M, step_sizes, alpha, noise)

    def row(lhs, mean_term, sampling_term, cross, terms):
        return {"lhs": lhs, "mean_term": mean_term, "sampling_term": sampling_term, "cross_term": cross,
                "residual": lhs - mean_term - sampling_term,
                "tolerance": float(summation_tolerance(terms, lhs + mean_term + sampling_term))}

    return {
        "paths": fedumf.paths,
        "fedavg": row(fedavg.dist_sq, fedavg.mean_dist_sq, fedavg.sampling_sq, fedavg.cross, fedavg.terms),
        "fedumf (paper's thetabar)": row(fedumf.dist_sq, fedumf.mean_dist_sq, fedumf.sampling_sq, fedumf.cross,
                                         fedumf.terms),
        "fedumf (would-be mean)": row(fedumf.dist_sq, fedumf.would_be_mean_dist_sq, fedumf.would_be_sampling_sq,
                                      fedumf.would_be_cross, fedumf.terms),
    }


# ----------------------------------------------------------------------------------------------------------
# Lemma 2's bound
# ----------------------------------------------------------------------------------------------------------

def lemma2_bound(n: int, M: int, step_size: float | np.ndarray, sigma2: float) -> float | np.ndarray:
    """Lemma 2 (eq. 5): E||theta_{t+1} - thetabar_{t+1}||^2 <= (n - M)(n + 3M) eta_t^2 sigma^2 / (M (n - 1) n).

    Proof: sampling identity, then sum_i ||theta^i_{t+1} - theta_t||^2 <= eta_t^2 sigma^2 (n + 3 |F_t|) with
    F_t = S_t \\ S_{t-1} (a fused client moves by two gradient steps: 2 + 2 = 4 instead of 1 by
    ||a + b||^2 <= 2||a||^2 + 2||b||^2), and |F_t| <= M. The first step is not valid for FedUmf (the models
    depend on S_t); see ``lemma2_exact``."""
    return (n - M) * (n + 3 * M) * np.asarray(step_size) ** 2 * sigma2 / (M * (n - 1) * n)


def lemma2_bound_would_be(n: int, M: int, step_size: float | np.ndarray, sigma2: float) -> float | np.ndarray:
    """Our corrected Lemma 2 for the would-be mean thetahat_{t+1} (models fixed given the past, so the sampling
    identity is exact): the fused set is then [n] \\ S_{t-1}, of size n - M, so the same proof gives
    E||theta_{t+1} - thetahat_{t+1}||^2 <= (n - M)(4n - 3M) eta_t^2 sigma^2 / (M (n - 1) n).
    It coincides with the paper's constant at M = n/2 and is larger below."""
    return (n - M) * (4 * n - 3 * M) * np.asarray(step_size) ** 2 * sigma2 / (M * (n - 1) * n)


def lemma2_exact(n: int, M: int, rounds: int = 2, step_size: float = 1.0, mu: float = 1e-3) -> dict:
    """Lemma 2's bound against the exact E||theta_{t+1} - thetabar_{t+1}||^2 on ``simplex_problem`` (t = rounds).

    Constant step size (Lemma 2 holds for any eta_t), alpha = 1, no noise, enumeration over all subset
    sequences. sigma^2 is the exact largest ||grad l_i||^2 over every point where a gradient was evaluated in
    rounds t-1 and t on any path (the tightest sigma^2 for which Assumption 3 holds where the proof uses it).
    With small mu every client's gradient has norm ~1, so sigma^2 ~ 1 is tight, and the gradients are as
    spread out as possible; the fused clients, whose steps are doubled, are exactly the selected ones, so the
    selected mean is pulled away from thetabar further than the sampling identity allows. Returns the measured
    value, both bounds and their ratios (measured / bound > 1 means the bound fails)."""
    problem = simplex_problem(n, mu)
    exact = enumerate_rounds(problem, M, np.full(rounds, step_size), 1.0)
    sigma2_actual = float(exact.grad_sq_max_actual[-2:].max())
    sigma2_would_be = float(exact.grad_sq_max_would_be[-2:].max())
    bound = float(lemma2_bound(n, M, step_size, sigma2_actual))
    bound_would_be = float(lemma2_bound_would_be(n, M, step_size, sigma2_would_be))
    return {"n": n, "M": M, "paths": exact.paths, "sigma2": sigma2_actual,
            "measured": exact.sampling_sq, "bound": bound, "ratio": exact.sampling_sq / bound,
            "would_be_measured": exact.would_be_sampling_sq, "would_be_bound": bound_would_be,
            "would_be_ratio": exact.would_be_sampling_sq / bound_would_be,
            "tolerance": float(summation_tolerance(exact.terms, exact.sampling_sq))}


# ----------------------------------------------------------------------------------------------------------
# Monte Carlo runs of FedUmf and FedAvg on common random numbers
# ----------------------------------------------------------------------------------------------------------

def _simulate(problem, M: int, step_sizes: np.ndarray, alphas: np.ndarray, seeds: int,
              rng: np.random.Generator) -> Iterator[tuple[np.ndarray, RoundOutcome, np.ndarray, np.ndarray]]:
    """Yield (theta_t, outcome of round t, projected theta_{t+1}, server projections) for t = 1..T.

    Batch shape [len(alphas), seeds]: one row per algorithm, all rows share S_t and the noise (drawn once per
    seed), so algorithm differences are paired."""
    n, d = problem.n, problem.d
    theta = np.broadcast_to(problem.theta_init, (len(alphas), seeds, d))
    stored = np.zeros((len(alphas), seeds, n, d))
    prev_selected = np.zeros((seeds, n), dtype=bool)
    alpha = np.asarray(alphas, dtype=np.float64)[:, None]
    for r, step in enumerate(step_sizes):
        selected = random_subset_masks(rng, seeds, n, M)
        noise = problem.noise_std * rng.standard_normal((seeds, n, d))
        step_ratio = step / step_sizes[r - 1] if r else 1.0
        out = fedumf_round(problem, theta, stored, prev_selected, selected, step, step_ratio, alpha, noise)
        theta_next, moved = problem.project(out.server_model)
        yield theta, out, theta_next, moved
        theta, stored, prev_selected = theta_next, out.stored_updates, selected


def _mean_se(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and standard error over the last axis (seeds)."""
    return values.mean(-1), values.std(-1, ddof=1) / math.sqrt(values.shape[-1])


ALGORITHMS = {"fedumf": 1.0, "fedavg": 0.0}


@dataclass(frozen=True)
class StronglyConvexRun:
    """FedUmf and FedAvg (rows in ``algorithms`` order) with eta_t = 1/(mu t), t = 1..T, on common random numbers.

    sq_dist [A, seeds, T+1]: ||theta_t - theta*||^2 per seed for t = 1..T+1 (column k is t = k + 1);
    sampling_sq [A, seeds, T]: ||theta_{t+1} - thetabar_{t+1}||^2 per seed for t = 1..T (paper's thetabar,
    unprojected server model); cross [A, seeds, T]: 2<theta_{t+1} - thetabar_{t+1}, thetabar_{t+1} - theta*>
    (Lemma 1's cross term); second_moment [A, T]: max_i E||grad~ l_i||^2 at the points evaluated in round t
    (theta_t, and the fused start point of clients outside S_{t-1}), estimated as a mean over seeds;
    projections [A]: server-model plus fused-start-point projections.
    """

    algorithms: tuple[str, ...]
    n: int
    M: int
    mu: float
    L: float
    sigma2_domain: float
    step_sizes: np.ndarray
    sq_dist: np.ndarray
    sampling_sq: np.ndarray
    cross: np.ndarray
    second_moment: np.ndarray
    projections: np.ndarray

    @property
    def t(self) -> np.ndarray:
        """Round index of sq_dist's columns: 1..T+1."""
        return np.arange(1, self.sq_dist.shape[-1] + 1)

    @property
    def sigma2_expected(self) -> float:
        """Assumption 3 read along the iterates, as in Li et al. (ICLR 2020, Assumption 4), which is how the
        proofs use it (they only take total expectations): sigma^2 = max over rounds and clients of the expected
        squared stochastic gradient at the points where it is evaluated. Estimated by a mean over seeds."""
        return float(self.second_moment.max())

    def lemma2_sigma2(self) -> np.ndarray:
        """Per-round sigma^2 [A, T] for Lemma 2 at round t, in the along-the-iterates reading: the proof applies
        Assumption 3 to gradients evaluated in rounds t and t-1 (fused clients reuse their round t-1
        gradient)."""
        previous = np.concatenate([self.second_moment[:, :1], self.second_moment[:, :-1]], axis=1)
        return np.maximum(self.second_moment, previous)


def run_fedumf_quadratic(problem: QuadraticProblem, M: int, T: int, seeds: int,
                         rng: np.random.Generator) -> StronglyConvexRun:
    """FedUmf (alpha = 1) and FedAvg on `problem` for T rounds with Theorem 1's step eta_t = 1/(mu t),
    vectorised over seeds; see ``StronglyConvexRun`` for what is recorded."""
    step_sizes = 1.0 / (problem.mu * np.arange(1, T + 1))
    alphas = np.array(list(ALGORITHMS.values()))
    theta_star = problem.theta_star
    sq_dist = np.empty((len(alphas), seeds, T + 1))
    sq_dist[:, :, 0] = ((problem.theta_init - theta_star) ** 2).sum()
    sampling_sq = np.empty((len(alphas), seeds, T))
    cross = np.empty((len(alphas), seeds, T))
    second_moment = np.empty((len(alphas), T))
    projections = np.zeros(len(alphas), dtype=np.int64)
    noise_var = problem.noise_std ** 2 * problem.d
    for r, (_, out, theta_next, moved) in enumerate(_simulate(problem, M, step_sizes, alphas, seeds, rng)):
        sq_dist[:, :, r + 1] = _sq_norm(theta_next - theta_star)
        thetabar = np.einsum("...nd->...d", out.local_models) / problem.n
        deviation = out.server_model - thetabar
        sampling_sq[:, :, r] = _sq_norm(deviation)
        cross[:, :, r] = 2 * np.einsum("...d,...d->...", deviation, thetabar - theta_star)
        # S_t is independent of the past, so E[. | client fuses] = E[. | client is outside S_{t-1}]
        plain_moment = out.grad_sq_plain.mean(-2)
        fused_moment = (out.grad_sq_fused * out.fusable).sum(-2) / np.maximum(out.fusable.sum(-2), 1)
        second_moment[:, r] = np.maximum(plain_moment, fused_moment).max(-1) + noise_var
        projections += moved.sum(-1) + out.fused_start_projected.sum((-2, -1))
    return StronglyConvexRun(
        algorithms=tuple(ALGORITHMS), n=problem.n, M=M, mu=problem.mu, L=problem.L,
        sigma2_domain=problem.sigma2, step_sizes=step_sizes, sq_dist=sq_dist, sampling_sq=sampling_sq,
        cross=cross, second_moment=second_moment, projections=projections)


def lemma2_check(run: StronglyConvexRun, algorithm: str = "fedumf", sigma2: str = "expected",
                 t_min: int | None = None) -> dict:
    """Lemma 2 along Monte Carlo trajectories: E||theta_{t+1} - thetabar_{t+1}||^2 (paper's thetabar) against
    (n - M)(n + 3M) eta_t^2 sigma^2 / (M (n - 1) n).

    sigma2="domain": Assumption 3 on Theta (sup over the ball), the rigorous reading; sigma2="expected": the
    per-round along-the-iterates reading (``StronglyConvexRun.lemma2_sigma2``), the tightest constant the proof
    can use. Per round: the estimate and its standard error. Pooled over rounds t >= t_min (default T/10):
    per seed the mean over those rounds of ||theta_{t+1} - thetabar_{t+1}||^2 / bound_t, averaged over the
    independent seeds (a small excess that persists over many rounds is invisible round by round).
    holds: no round exceeds its bound by more than MC_SIGMAS standard errors and neither does the pooled ratio
    exceed 1; margin: min_t bound / measured."""
    k = run.algorithms.index(algorithm)
    sigma2_t = run.lemma2_sigma2()[k] if sigma2 == "expected" else run.sigma2_domain
    bound = lemma2_bound(run.n, run.M, run.step_sizes, sigma2_t)
    measured, se = _mean_se(run.sampling_sq[k].T)
    excess_in_se = (measured - bound) / se
    t = run.t[:-1]
    t_min = max(2, len(t) // 10) if t_min is None else t_min
    pooled = mc_estimate((run.sampling_sq[k][:, t >= t_min] / bound[t >= t_min]).mean(1))
    pooled_excess_in_se = (pooled.mean - 1) / pooled.standard_error
    return {"t": t, "measured": measured, "measured_se": se, "bound": bound,
            "max_excess_in_se": float(excess_in_se.max()), "pooled_ratio": pooled.mean,
            "pooled_ratio_se": pooled.standard_error,
            "holds": bool(excess_in_se.max() <= MC_SIGMAS and pooled_excess_in_se <= MC_SIGMAS),
            "margin": float((bound / measured).min())}


def lemma1_cross_term(run: StronglyConvexRun, algorithm: str = "fedumf") -> dict:
    """Lemma 1 along Monte Carlo trajectories: the cross term 2 E<theta_{t+1} - thetabar_{t+1},
    thetabar_{t+1} - theta*>, which Lemma 1 says is 0.

    Per round: its z-score and its size relative to E||theta_{t+1} - theta*||^2. Pooled over rounds: per seed
    the sum over t of cross_t / eta_t^2 (each round rescaled to order 1), a mean over independent seeds with an
    honest standard error. If Lemma 1's step (a) holds, every cross_t has conditional mean 0 given the past
    (a martingale difference), so the pooled mean is 0 as well; a bias that persists over rounds adds up.
    zero_consistent: |pooled z| <= MC_SIGMAS."""
    k = run.algorithms.index(algorithm)
    cross, cross_se = _mean_se(run.cross[k].T)
    z = cross / cross_se
    relative = cross / run.sq_dist[k, :, 1:].mean(0)
    pooled = mc_estimate((run.cross[k] / run.step_sizes ** 2).sum(1))
    pooled_z = pooled.mean / pooled.standard_error
    return {"t": run.t[:-1], "cross": cross, "cross_se": cross_se, "z": z,
            "max_abs_z": float(np.abs(z).max()), "max_abs_relative": float(np.abs(relative).max()),
            "pooled_z": float(pooled_z), "zero_consistent": bool(abs(pooled_z) <= MC_SIGMAS)}


# ----------------------------------------------------------------------------------------------------------
# Theorem 1 (strongly convex, K = 1, eta_t = 1/(mu t)) and Remark 2
# ----------------------------------------------------------------------------------------------------------

def theorem1_constants(n: int, M: int, L: float, mu: float, sigma2: float, fusion: bool = True) -> tuple[float, float]:
    """Theorem 1's constants (eq. 19):
    C0 = 4 M (n - M) L^2 sigma^2 / (n mu^2),
    C1 = L^2 M (n - M) sigma^2 / (n mu^2) + (n + M)^2 sigma^2 / (n^2 mu^2)
         + (n - M)(n + 3M) sigma^2 / (M (n - 1) n mu^2).
    C0 comes from Lemma 3's 4 M (n - M) L^2 eta_{t-1}^2 sigma^2 / n, the first two terms of C1 from Lemma 3, the
    last from Lemma 2. fusion=False is the same proof with no fused clients (FedAvg; our specialisation, not in
    the paper): C0 = 0, C1 = sigma^2 / mu^2 + (n - M) sigma^2 / (M (n - 1) mu^2).

    Neither constant is invariant under rescaling theta or f (L^2 sigma^2 / mu^2 is not a squared length):
    Young's inequality is applied in eq. 13-14 without the step size as weight. That is not an error, but the
    bound's tightness then depends on the units."""
    if not fusion:
        return 0.0, sigma2 / mu ** 2 + (n - M) * sigma2 / (M * (n - 1) * mu ** 2)
    c0 = 4 * M * (n - M) * L ** 2 * sigma2 / (n * mu ** 2)
    c1 = (L ** 2 * M * (n - M) * sigma2 / (n * mu ** 2) + (n + M) ** 2 * sigma2 / (n ** 2 * mu ** 2)
          + (n - M) * (n + 3 * M) * sigma2 / (M * (n - 1) * n * mu ** 2))
    return c0, c1


def theorem1_bound(t: np.ndarray, t0: int, a_t0: float, c0: float, c1: float) -> np.ndarray:
    """Theorem 1 (eq. 19): for t > t0, E||theta_t - theta*||^2 <= (t0 / t) a_{t0} + 2 C0 / (t - 1) + C1 / t.

    Reconstruction of the proof: Lemmas 1-3 give a_{t+1} <= (1 - 2/t) a_t + C0/(t-1)^2 + C1/t^2 once the fusion
    terms -2 M (n - M) mu eta_t / n^2 + 2 eta_t^2 M (n - M) / n^3 are dropped, which needs eta_t <= n mu (the
    paper writes "eta_t <= 1/n", which is not the condition that algebra gives), and (1 - 2/t) >= 0 needs t >= 2;
    so t0 >= max(2, 1/(n mu^2)). The induction itself checks out: (s-2)/s^2 <= 1/(s+1),
    (2 s^2 - 5 s + 4)/(s (s-1)^2) <= 2/s for s >= 2, and (s-1)/s^2 <= 1/(s+1)."""
    t = np.asarray(t, dtype=np.float64)
    return t0 / t * a_t0 + 2 * c0 / (t - 1) + c1 / t


def theorem1_min_t0(n: int, mu: float) -> int:
    """Smallest t0 for which the proof of Theorem 1 goes through: t0 >= 2 and eta_t = 1/(mu t) <= n mu."""
    return max(2, math.ceil(1.0 / (n * mu ** 2)))


def theorem1_check(run: StronglyConvexRun, algorithm: str = "fedumf", t0: int | None = None,
                   sigma2: float | None = None) -> dict:
    """Measured E||theta_t - theta*||^2 against Theorem 1's bound for t0 < t <= T + 1.

    a_{t0} is measured on the same seeds; the test statistic per seed is
    ||theta_t - theta*||^2 - (t0/t) ||theta_{t0} - theta*||^2, whose mean must not exceed 2 C0/(t-1) + C1/t by
    more than MC_SIGMAS standard errors (this accounts for the noise in both a_t and a_{t0}).
    sigma2 defaults to the run's domain sigma^2 (Assumption 3 on Theta); ``StronglyConvexRun.sigma2_expected``
    is the tightest along-the-iterates reading. The FedAvg row uses the FedAvg
    constants (``theorem1_constants(fusion=False)``). Returns the curves, the largest excess in standard errors,
    holds, and the margin min_t bound / measured."""
    k = run.algorithms.index(algorithm)
    t0 = theorem1_min_t0(run.n, run.mu) if t0 is None else t0
    sigma2 = run.sigma2_domain if sigma2 is None else sigma2
    c0, c1 = theorem1_constants(run.n, run.M, run.L, run.mu, sigma2, fusion=algorithm == "fedumf")
    t = run.t[t0:]
    sq = run.sq_dist[k]
    measured, measured_se = _mean_se(sq[:, t0:].T)
    bound = theorem1_bound(t, t0, float(sq[:, t0 - 1].mean()), c0, c1)
    diff_mean, diff_se = _mean_se((sq[:, t0:] - t0 / t * sq[:, t0 - 1:t0]).T)
    excess_in_se = (diff_mean - (2 * c0 / (t - 1) + c1 / t)) / diff_se
    return {"t": t, "measured": measured, "measured_se": measured_se, "bound": bound, "t0": t0, "C0": c0, "C1": c1,
            "sigma2": sigma2, "max_excess_in_se": float(excess_in_se.max()),
            "holds": bool(excess_in_se.max() <= MC_SIGMAS), "margin": float((bound / measured).min())}


def loglog_slope(t: np.ndarray, per_seed: np.ndarray, t_min: int, batches: int = 20) -> tuple[float, float]:
    """Least-squares slope of log E[y_t] against log t for t >= t_min (per_seed [seeds, len(t)]), and its
    standard error from `batches` disjoint batches of seeds (batch means; the slope is a smooth function of
    the mean curve, so the batch slopes are approximately i.i.d.)."""
    use = t >= t_min
    log_t = np.log(t[use])

    def slope(rows):
        return float(np.polyfit(log_t, np.log(rows[:, use].mean(0)), 1)[0])

    batch_slopes = [slope(rows) for rows in np.array_split(per_seed, batches)]
    return slope(per_seed), float(np.std(batch_slopes, ddof=1) / math.sqrt(batches))


def loglog_fit(x: np.ndarray, y: np.ndarray, y_se: np.ndarray) -> tuple[float, float]:
    """Slope of log y against log x for independent estimates y with standard errors y_se: weighted least
    squares with weights 1 / Var(log y) ~ (y / y_se)^2 (delta method), and the slope's standard error."""
    log_x, log_y, w = np.log(x), np.log(y), (y / y_se) ** 2
    centred = log_x - (w * log_x).sum() / w.sum()
    slope = float((w * centred * log_y).sum() / (w * centred ** 2).sum())
    return slope, float(1 / math.sqrt((w * centred ** 2).sum()))


def remark2_comparison(run: StronglyConvexRun, t_min: int | None = None) -> dict:
    """Remark 2 claims FedUmf's distance to theta* decays faster than FedAvg's. Measured on common random
    numbers: the paired difference a_T(FedUmf) - a_T(FedAvg) at the last round with its standard error, the
    ratio a_T(FedUmf) / a_T(FedAvg), and each algorithm's log-log slope over t >= t_min (default T/10)."""
    t = run.t
    t_min = max(2, len(t) // 10) if t_min is None else t_min
    umf, avg = (run.sq_dist[run.algorithms.index(a)] for a in ("fedumf", "fedavg"))
    diff = mc_estimate(umf[:, -1] - avg[:, -1])
    slope_umf, slope_umf_se = loglog_slope(t, umf, t_min)
    slope_avg, slope_avg_se = loglog_slope(t, avg, t_min)
    return {"M/n": run.M / run.n, "M": run.M, "n": run.n, "T": int(t[-1]),
            "fedumf_final": float(umf[:, -1].mean()), "fedavg_final": float(avg[:, -1].mean()),
            "ratio": float(umf[:, -1].mean() / avg[:, -1].mean()),
            "difference": diff.mean, "difference_se": diff.standard_error,
            "fedumf_slope": slope_umf, "fedumf_slope_se": slope_umf_se,
            "fedavg_slope": slope_avg, "fedavg_slope_se": slope_avg_se}


# ----------------------------------------------------------------------------------------------------------
# Theorem 2 (non-convex, eta = 1/(L sqrt(T)))
# ----------------------------------------------------------------------------------------------------------

def theorem2_constant(n: int, M: int, L: float, sigma2: float) -> float:
    """Theorem 2's D (eq. 23):
    D = 2 L sigma^2 M (n - M) / n + L M (n - M) sigma^2 / (2 n) + (n + M)^2 sigma^2 / (2 n^2)
        + (n - M)(n + 3M) sigma^2 / (2 M (n - 1) n).
    Reconstructed from eq. 33-34: with eta_t = eta_{t-1} = eta the constant terms of eq. 33 are
    eta^2 L D, and summing eq. 34 gives (1/T) sum_t E||grad f(theta_t)||^2 <= (f(theta_0) - f*)/(T eta) + L eta D,
    i.e. L (f(theta_0) - f*)/sqrt(T) + D/sqrt(T) at eta = 1/(L sqrt(T)); the paper states 2 L (...) (slack)."""
    return (2 * L * sigma2 * M * (n - M) / n + L * M * (n - M) * sigma2 / (2 * n)
            + (n + M) ** 2 * sigma2 / (2 * n ** 2) + (n - M) * (n + 3 * M) * sigma2 / (2 * M * (n - 1) * n))


def theorem2_bound(T: int | np.ndarray, L: float, f_gap: float, D: float) -> np.ndarray:
    """Theorem 2 (eq. 23): (1/T) sum_{t} E||grad f(theta_t)||^2 <= 2 L (f(theta_0) - f*)/sqrt(T) + D/sqrt(T)."""
    return (2 * L * f_gap + D) / np.sqrt(np.asarray(T, dtype=np.float64))


def run_fedumf_nonconvex(problem: CosineProblem, M: int, T: int, seeds: int,
                         rng: np.random.Generator) -> dict[str, MonteCarloEstimate]:
    """FedUmf and FedAvg for T rounds with eta = 1/(L sqrt(T)); per algorithm the Monte Carlo estimate of
    (1/T) sum_{t=0}^{T-1} E||grad f(theta_t)||^2 (theta_0 the initial model: the proof sums from t = 0, and
    including the initial point makes the left-hand side as large as any reading of the index range allows)."""
    step_sizes = np.full(T, 1.0 / (problem.L * math.sqrt(T)))
    alphas = np.array(list(ALGORITHMS.values()))
    grad_sq_sum = np.zeros((len(alphas), seeds))
    for theta, *_ in _simulate(problem, M, step_sizes, alphas, seeds, rng):
        grad_sq_sum += (problem.full_gradient(theta) ** 2).sum(-1)
    return {name: mc_estimate(grad_sq_sum[k] / T) for k, name in enumerate(ALGORITHMS)}


def theorem2_check(problem: CosineProblem, M: int, horizons: tuple[int, ...], seeds: int,
                   rng: np.random.Generator) -> dict:
    """Theorem 2 for each horizon T: measured (1/T) sum_t E||grad f(theta_t)||^2 (FedUmf, and FedAvg for
    comparison) against 2 L (f(theta_0) - f*)/sqrt(T) + D/sqrt(T), and the measured log-log slope in T (the
    theorem's rate is -1/2). holds: FedUmf's estimate is at most the bound plus MC_SIGMAS standard errors at
    every T; margin: min_T bound / measured."""
    f_gap = float(problem.f(problem.theta_init) - problem.f_star)
    D = theorem2_constant(problem.n, M, problem.L, problem.sigma2)
    runs = [run_fedumf_nonconvex(problem, M, T, seeds, rng) for T in horizons]
    out = {"T": np.array(horizons), "bound": theorem2_bound(np.array(horizons), problem.L, f_gap, D),
           "D": D, "f_gap": f_gap, "L": problem.L, "sigma2": problem.sigma2}
    for name in ALGORITHMS:
        out[name] = np.array([r[name].mean for r in runs])
        out[name + "_se"] = np.array([r[name].standard_error for r in runs])
        out[name + "_slope"], out[name + "_slope_se"] = loglog_fit(out["T"], out[name], out[name + "_se"])
    out["holds"] = bool(np.all(out["fedumf"] - out["bound"] <= MC_SIGMAS * out["fedumf_se"]))
    out["margin"] = float((out["bound"] / out["fedumf"]).min())
    return out


# ----------------------------------------------------------------------------------------------------------
# FedNNNN: NWDA (eq. 4-6) and Norm-Norm (eq. 8-9)
# ----------------------------------------------------------------------------------------------------------

def _unit_scaled_nwda(deltas: np.ndarray, weights: np.ndarray) -> tuple[float, np.ndarray, float, float]:
    """(s, sum_k p_k Delta_k / s, N, E) with s = max|Delta|: norms taken on the unit-scaled deltas (as BLAS
    nrm2 does) do not lose tiny updates' precision to underflow in the squares. All zero when s = 0."""
    scale = float(np.abs(deltas).max(initial=0.0))
    if scale == 0.0:
        return 0.0, np.zeros(deltas.shape[1:]), 0.0, 0.0
    unit = deltas / scale
    mean_unit = weights @ unit
    return (scale, mean_unit, scale * float(np.linalg.norm(mean_unit)),
            scale * float(weights @ np.linalg.norm(unit, axis=1)))


def nwda(deltas: np.ndarray, weights: np.ndarray) -> tuple[float, float]:
    """N = ||sum_k p_k Delta_k|| (eq. 4) and E = sum_k p_k ||Delta_k|| (eq. 5) for deltas [m, d], weights [m].
    Proposition 1 (eq. 6): N <= E, by the triangle inequality (the paper's "Pythagorean inequality")."""
    _, _, N, E = _unit_scaled_nwda(deltas, weights)
    return N, E


def norm_norm_step(deltas: np.ndarray, weights: np.ndarray, beta: float) -> np.ndarray:
    """Norm-Norm's server step w_{t+1} - w_t = beta (E/N) sum_k p_k Delta_k (eq. 8), whose norm is beta E
    (eq. 9). When N = 0 the paper returns w_t unchanged (zero step). The sum is the very one N is the norm
    of: summed another way, its rounding under cancellation (N << E) would break eq. 9 beyond a few ulps."""
    scale, mean_unit, N, E = _unit_scaled_nwda(deltas, weights)
    if N == 0:
        return np.zeros(deltas.shape[1:])
    return beta * (E / N) * scale * mean_unit


def updates_with_cosine(m: int, d: int, rho: float, rng: np.random.Generator,
                        norms: np.ndarray | None = None) -> np.ndarray:
    """m updates in R^d (d >= m) whose pairwise cosines all equal rho, rho in [-1/(m-1), 1] (the Gram matrix
    G = (1 - rho) I + rho 1 1^T must be positive semidefinite), with the given norms (default 1).

    The rows of G^(1/2) = a I + c 1 1^T, a = sqrt(1 - rho), c = (sqrt(1 - rho + rho m) - a) / m (closed form:
    (a I + c 1 1^T)^2 = a^2 I + (2 a c + m c^2) 1 1^T = G), embedded in R^d and moved by a random signed
    permutation of the coordinates (an orthogonal map, so norms and cosines are kept). No LAPACK call: small
    multithreaded factorisations stall when the CPU is oversubscribed."""
    a = math.sqrt(1 - rho)
    c = (math.sqrt(max(1 - rho + rho * m, 0.0)) - a) / m
    unit = np.zeros((m, d))
    unit[:, :m] = a * np.eye(m) + c
    permutation, signs = rng.permutation(d), rng.choice([-1.0, 1.0], size=d)
    norms = np.ones(m) if norms is None else norms
    return norms[:, None] * unit[:, permutation] * signs


def nwda_ratio_identity(deltas: np.ndarray, weights: np.ndarray) -> dict:
    """Exact identity behind the WUDD problem: with w_k = p_k ||Delta_k|| / E (sum_k w_k = 1),
    (N/E)^2 = sum_{j,k} w_j w_k cos(Delta_j, Delta_k) = s + (1 - s) cbar,  s = sum_k w_k^2,
    cbar = the w-weighted mean pairwise cosine over j != k. Equal norms and p_k = 1/m give s = 1/m, so
    N/E = sqrt(1/m + (1 - 1/m) cbar): N/E falls to sqrt(1/m) as directions become orthogonal and to 0 at
    cbar = -1/(m-1). Returns s, cbar and the identity's N/E."""
    norms = np.linalg.norm(deltas, axis=1)
    w = weights * norms / (weights @ norms)
    cosines = (deltas @ deltas.T) / np.outer(norms, norms)
    s = float(w @ w)
    off_diagonal = float(w @ cosines @ w) - float((w ** 2 * np.diag(cosines)).sum())
    cbar = off_diagonal / (1 - s) if s < 1 else 1.0
    return {"s": s, "mean_cosine": cbar, "ratio": math.sqrt(max(s + (1 - s) * cbar, 0.0))}


def nwda_vs_cosine(m_values: tuple[int, ...], rhos: np.ndarray, d: int, trials: int,
                   rng: np.random.Generator) -> dict:
    """N/E as the clients' update directions diverge (the WUDD problem, FedNNNN section 3.1).

    For each m and each pairwise cosine rho (values outside [-1/(m-1), 1] are skipped): `trials` draws of m
    updates in R^d with all pairwise cosines rho, norms lognormal(0, 0.5) and weights p ~ Dirichlet(1). Records
    the measured N/E, the identity's N/E (``nwda_ratio_identity``) and the equal-norm, equal-weight curve
    sqrt(1/m + (1 - 1/m) rho). Also records N, E and the Norm-Norm step norm (beta = 1) for every draw, for
    Proposition 1 (N <= E) and eq. 9 (step norm = beta E)."""
    rows = {k: [] for k in ("m", "rho", "ratio", "identity_ratio", "equal_ratio", "N", "E", "step_norm")}
    for m in m_values:
        for rho in rhos:
            if rho < -1 / (m - 1):
                continue
            for _ in range(trials):
                deltas = updates_with_cosine(m, d, rho, rng, norms=rng.lognormal(0.0, 0.5, m))
                weights = rng.dirichlet(np.ones(m))
                N, E = nwda(deltas, weights)
                for key, value in (("m", m), ("rho", rho), ("ratio", N / E),
                                   ("identity_ratio", nwda_ratio_identity(deltas, weights)["ratio"]),
                                   ("equal_ratio", math.sqrt(max(1 / m + (1 - 1 / m) * rho, 0.0))),
                                   ("N", N), ("E", E),
                                   ("step_norm", float(np.linalg.norm(norm_norm_step(deltas, weights, 1.0))))):
                    rows[key].append(value)
    return {k: np.array(v) for k, v in rows.items()}
