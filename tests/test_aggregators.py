import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from fedcore import aggregators as A
from fedcore import params as P


def _deltas(seed: int, m: int, scale: float = 1.0) -> P.Params:
    g = torch.Generator().manual_seed(seed)
    return {"w": scale * torch.randn(m, 3, 4, generator=g), "b": scale * torch.randn(m, 4, generator=g)}


def _weights(seed: int, m: int) -> torch.Tensor:
    return A.aggregation_weights(torch.randint(1, 100, (m,), generator=torch.Generator().manual_seed(seed)),
                                 "samples")


def test_fedavg_by_hand():
    # Two clients, one parameter each: w = 1 + (1/4 * 2 + 3/4 * -2) = 0.
    global_params = {"w": torch.tensor([1.0])}
    deltas = {"w": torch.tensor([[2.0], [-2.0]])}
    p = A.aggregation_weights(torch.tensor([100, 300]), "samples")
    assert torch.allclose(A.fedavg(global_params, deltas, p)["w"], torch.tensor([0.0]))
    assert torch.equal(A.aggregation_weights(torch.tensor([100, 300]), "uniform"),
                       torch.tensor([0.5, 0.5], dtype=torch.float64))


@settings(max_examples=50, deadline=None)
@given(seed=st.integers(0, 2**31), m=st.integers(1, 12))
def test_norm_of_average_never_exceeds_average_norm(seed, m):
    N, E = A.nwda(_deltas(seed, m), _weights(seed, m))  # FedNNNN Proposition 1
    assert N <= E * (1 + 1e-12)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), m=st.integers(1, 12))
def test_identical_updates_give_equal_norms(seed, m):
    one = _deltas(seed, 1)
    N, E = A.nwda({k: v.repeat(m, *[1] * (v.dim() - 1)) for k, v in one.items()}, _weights(seed, m))
    assert torch.isclose(N, E, rtol=1e-6)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31), m=st.integers(1, 12))
def test_aggregation_leaves_inputs_untouched_and_weights_sum_to_one(seed, m):
    deltas, p = _deltas(seed, m), _weights(seed, m)
    before = {k: v.clone() for k, v in deltas.items()}
    A.fedavg(P.zeros_like(P.row(deltas, 0)), deltas, p)
    assert all(torch.equal(before[k], deltas[k]) for k in deltas)
    assert torch.isclose(p.sum(), torch.tensor(1.0, dtype=torch.float64))


def test_buffers_average_floats_and_keep_counters():
    buffers = {"bn.running_mean": torch.tensor([[0.0, 2.0], [2.0, 4.0]]),
               "bn.num_batches_tracked": torch.tensor([3, 5])}
    avg = A.average_buffers(buffers, torch.tensor([0.5, 0.5], dtype=torch.float64))
    assert torch.allclose(avg["bn.running_mean"], torch.tensor([1.0, 3.0]))
    assert avg["bn.num_batches_tracked"] == 5
