"""Property tests for fedcore.partition on synthetic labels, plus one on real MNIST."""

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedcore import partition
from fedcore.errors import ConfigError

MNIST_ROOT = Path("/work/shared/data")
FAST = settings(max_examples=30, deadline=None)


def gen(seed):
    return torch.Generator().manual_seed(seed)


@st.composite
def problems(draw, min_clients=1):
    """(labels, num_clients, seed): random labels with at least 40 examples per client."""
    num_clients = draw(st.integers(min_clients, 20))
    n = draw(st.integers(40 * num_clients, 3000))
    num_classes = draw(st.integers(2, 10))
    seed = draw(st.integers(0, 2**32 - 1))
    labels = torch.randint(num_classes, (n,), generator=gen(seed))
    return labels, num_clients, seed + 1


def assert_partition(parts, n, num_clients):
    """K int64 CPU index tensors that together hold every index in 0..n-1 exactly once."""
    assert len(parts) == num_clients
    for p in parts:
        assert p.dtype == torch.int64 and p.device.type == "cpu" and p.dim() == 1
    assert torch.equal(torch.cat(parts).sort().values, torch.arange(n))


def sizes_of(parts):
    return torch.tensor([len(p) for p in parts])


def owners(parts, n):
    owner = torch.empty(n, dtype=torch.int64)
    for k, p in enumerate(parts):
        owner[p] = k
    return owner


@FAST
@given(problems())
def test_iid_sizes_differ_by_at_most_one(problem):
    labels, k, seed = problem
    parts = partition.iid(labels, k, generator=gen(seed))
    assert_partition(parts, len(labels), k)
    assert torch.equal(sizes_of(parts), partition._equal_sizes(len(labels), k))


@FAST
@given(
    num_clients=st.integers(1, 20),
    shards_per_client=st.integers(1, 4),
    shard_size=st.integers(1, 30),
    num_classes=st.integers(2, 10),
    seed=st.integers(0, 2**32 - 1),
)
def test_shards_give_each_client_whole_label_sorted_shards(
    num_clients, shards_per_client, shard_size, num_classes, seed
):
    n = num_clients * shards_per_client * shard_size
    labels = torch.randint(num_classes, (n,), generator=gen(seed))
    parts = partition.shards(
        labels, num_clients, shards_per_client=shards_per_client, generator=gen(seed + 1)
    )
    assert_partition(parts, n, num_clients)
    assert (sizes_of(parts) == n // num_clients).all()
    by_label = torch.sort(labels, stable=True).indices
    position = torch.empty(n, dtype=torch.int64)
    position[by_label] = torch.arange(n)
    classes_per_shard = [len(s.unique()) for s in labels[by_label].split(shard_size)]
    for p in parts:
        shard_ids, counts = (position[p] // shard_size).unique(return_counts=True)
        assert len(shard_ids) == shards_per_client and (counts == shard_size).all()
        assert len(labels[p].unique()) <= shards_per_client * max(classes_per_shard)


@pytest.mark.skipif(not (MNIST_ROOT / "MNIST" / "raw").is_dir(), reason="MNIST not present")
def test_shards_on_mnist_match_mcmahan():
    torchvision = pytest.importorskip("torchvision")
    labels = torchvision.datasets.MNIST(str(MNIST_ROOT), train=True, download=False).targets
    parts = partition.shards(labels, 100, shards_per_client=2, generator=gen(0))
    assert_partition(parts, 60000, 100)
    assert (sizes_of(parts) == 600).all()
    # No MNIST class boundary falls on a multiple of 300, so exactly 9 of the 200
    # shards straddle two classes and the others hold one class.
    shard_classes = torch.tensor(
        [len(s.unique()) for s in labels.sort(stable=True).values.split(300)]
    )
    assert shard_classes.max() == 2 and (shard_classes == 2).sum() == 9
    classes = (partition.class_counts(labels, parts, 10) > 0).sum(1)
    assert classes.max() <= 4
    assert (classes <= 2).sum() >= 100 - 9


@FAST
@given(problems(), st.floats(0.0, 1.2))
def test_power_law_sizes_follow_zipf(problem, exponent):
    labels, k, seed = problem
    n = len(labels)
    parts = partition.power_law(labels, k, exponent=exponent, generator=gen(seed))
    assert_partition(parts, n, k)
    sizes = sizes_of(parts)
    assert sizes.min() >= 1
    weights = torch.arange(1, k + 1, dtype=torch.float64) ** -exponent
    quota = n * weights / weights.sum()
    assert ((sizes.sort(descending=True).values - quota).abs() < 1).all()


def test_power_law_default_top_ten_hold_56_percent():
    labels = torch.arange(60000) % 10
    sizes = sizes_of(partition.power_law(labels, 100, generator=gen(0)))
    assert sizes.sort(descending=True).values[:10].sum() / 60000 == pytest.approx(0.5647, abs=1e-3)


@FAST
@given(problems(min_clients=5))
def test_power_law_non_iid_gives_two_balanced_classes_per_client(problem):
    labels, k, seed = problem
    parts = partition.power_law(labels, k, classes_per_client=2, generator=gen(seed))
    assert_partition(parts, len(labels), k)
    present = labels.unique()
    held = partition.class_counts(labels, parts, int(labels.max()) + 1)[:, present] > 0
    assert (held.sum(1) == 2).all()
    holders = held.sum(0)
    assert holders.min() >= (2 * k) // len(present)
    assert holders.max() <= -(-2 * k // len(present))


@FAST
# Five or more clients: with two, equal sizes happen by chance (~0.5% of draws for n ~ 450, sigma 0.5).
@given(problems(min_clients=5), st.floats(0.1, 1.0))
def test_lognormal_sizes_are_unequal_and_nonempty(problem, sigma):
    labels, k, seed = problem
    parts = partition.lognormal(labels, k, sigma=sigma, generator=gen(seed))
    assert_partition(parts, len(labels), k)
    sizes = sizes_of(parts)
    assert sizes.min() >= 1
    assert len(sizes.unique()) > 1


@FAST
@given(problems(), st.floats(0.01, 100.0))
def test_dirichlet_sizes_are_equal(problem, alpha):
    labels, k, seed = problem
    parts = partition.dirichlet(labels, k, alpha=alpha, generator=gen(seed))
    assert_partition(parts, len(labels), k)
    assert torch.equal(sizes_of(parts), partition._equal_sizes(len(labels), k))


def test_dirichlet_small_alpha_concentrates_classes():
    labels = torch.randint(10, (5000,), generator=gen(0))

    def mean_top_share(alpha):
        parts = partition.dirichlet(labels, 50, alpha=alpha, generator=gen(1))
        counts = partition.class_counts(labels, parts, 10)
        return (counts.max(1).values / counts.sum(1)).mean().item()

    assert mean_top_share(0.05) > 0.5 > 0.2 > mean_top_share(100.0)


SCHEME_PARAMS = [
    ("iid", {}),
    ("shards", {"shards_per_client": 2}),
    ("power_law", {}),
    ("power_law", {"classes_per_client": 2}),
    ("lognormal", {}),
    ("dirichlet", {}),
]


@pytest.mark.parametrize("name,params", SCHEME_PARAMS)
def test_seed_determines_partition(name, params):
    labels = torch.randint(10, (1200,), generator=gen(0))

    def run(seed):
        return partition.make(name, labels, 10, generator=gen(seed), **params)

    global_state = torch.random.get_rng_state()
    first, again, other = run(1), run(1), run(2)
    assert torch.equal(torch.random.get_rng_state(), global_state)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not torch.equal(owners(first, 1200), owners(other, 1200))


def test_class_counts():
    labels = torch.tensor([0, 1, 1, 2, 2, 2])
    parts = [torch.tensor([0, 3]), torch.tensor([1, 2, 4, 5])]
    expected = torch.tensor([[1, 0, 1], [0, 2, 2]])
    assert torch.equal(partition.class_counts(labels, parts, 3), expected)


@pytest.mark.parametrize(
    "name,clients,params,flag",
    [
        ("fedavg", 10, {}, "--partition"),
        ("iid", 0, {}, "--clients"),
        ("dirichlet", 101, {}, "--clients"),
        ("shards", 10, {"shards_per_client": 3}, "--shards-per-client"),
        ("power_law", 100, {}, "--clients"),
        ("power_law", 3, {"classes_per_client": 2}, "--classes-per-client"),
    ],
)
def test_bad_config_names_the_flag(name, clients, params, flag):
    labels = torch.arange(100) % 10
    with pytest.raises(ConfigError, match=flag):
        partition.make(name, labels, clients, generator=gen(0), **params)


def test_make_rejects_another_schemes_params():
    with pytest.raises(TypeError):
        partition.make("iid", torch.arange(10), 2, generator=gen(0), alpha=0.1)
