"""The vectorized cohort engine against the plain per-client torch.optim.SGD loop."""

import dataclasses

import pytest
import torch

from fedcore import models, seeding, stacked
from fedcore import params as P
from fedcore.client import (BATCHINGS, LocalTraining, auto_batching, epoch_orders, train_client_reference,
                            train_cohort)
from fedcore.errors import ConfigError
from tests.helpers import mnist_subset, needs_mnist

pytestmark = needs_mnist

# Unequal clients: partial last batches (37 = 3*10 + 7), a client smaller than one batch (4), and
# clients that finish their epochs while others are still training.
SIZES = [37, 50, 4, 64, 21]


def _parts(sizes, seed=0):
    order = torch.randperm(sum(sizes), generator=torch.Generator().manual_seed(seed))
    return list(torch.split(order, sizes))


def _rel_err(got: P.Params, want: P.Params, start: P.Params) -> float:
    return float(P.norm(P.sub(got, want)) / P.norm(P.sub(want, start)))


def _compare(name, cfg, sizes, shape=None, client_chunk=0, shift_scale=0.0, dtype=torch.float32):
    """Every batching of the engine against the plain loop, one client at a time; returns the stacked one's
    result. "loop" runs that loop itself, so for it this checks the cohort around it: anchors, shifts, rows."""
    return [_compare_one(name, cfg, sizes, shape, client_chunk, shift_scale, dtype, b) for b in BATCHINGS][0]


def _compare_one(name, cfg, sizes, shape, client_chunk, shift_scale, dtype, batching):
    data = mnist_subset(sum(sizes), 10)
    data = dataclasses.replace(data, mean=data.mean.to(dtype), std=data.std.to(dtype))
    with seeding.seeded_global_rng(0):
        model = models.build(name, input_shape=shape or data.input_shape).to(dtype)
    parts = _parts(sizes)
    m = len(parts)
    start, start_b = P.broadcast(P.trainable(model), m), P.broadcast(P.buffers(model), m)
    shift = None
    if shift_scale:
        g = torch.Generator().manual_seed(1)
        shift = {k: shift_scale * torch.randn(v.shape, generator=g) for k, v in start.items()}
    gens = [torch.Generator().manual_seed(100 + i) for i in range(m)]
    fast = train_cohort(model, start, start_b, parts, data, cfg, gens, grad_shift=shift, client_chunk=client_chunk,
                        batching=batching)
    for i, ix in enumerate(parts):
        ref_p, ref_b, ref_loss = train_client_reference(
            model, P.row(start, i), P.row(start_b, i), ix, data, cfg, torch.Generator().manual_seed(100 + i),
            grad_shift=None if shift is None else P.row(shift, i))
        assert _rel_err(P.row(fast.params, i), ref_p, P.row(start, i)) <= 1e-5
        for k, v in ref_b.items():
            got = fast.buffers[k][i]
            if v.is_floating_point():
                assert torch.allclose(got, v, rtol=1e-4, atol=1e-6), k
            else:
                assert torch.equal(got, v), k
        assert fast.train_loss[i].item() == pytest.approx(ref_loss, rel=1e-5)
        assert fast.steps[i] == cfg.epochs * -(-len(ix) // cfg.batch_len(len(ix)))
    return fast


@pytest.mark.parametrize("cfg", [
    LocalTraining(epochs=2, batch_size=10, lr=0.05),
    LocalTraining(epochs=1, batch_size=0, lr=0.1),  # B = inf: one full-batch step per epoch (FedSGD)
    LocalTraining(epochs=2, batch_size=8, lr=0.05, weight_decay=1e-3, momentum=0.5, prox_mu=0.1),
])
def test_mlp_matches_plain_loop_on_unequal_clients(cfg):
    _compare("mcmahan_2nn", cfg, SIZES, client_chunk=2)


def test_cnn_matches_plain_loop():
    _compare("fednnnn_mnist", LocalTraining(epochs=1, batch_size=10, lr=0.05, momentum=0.5), SIZES)


def test_linear_correction_matches_plain_loop():
    _compare("mcmahan_2nn", LocalTraining(epochs=1, batch_size=10, lr=0.05), SIZES, shift_scale=1e-3)


def test_gradient_clipping_matches_clip_grad_norm_in_the_plain_loop():
    clipped = LocalTraining(epochs=2, batch_size=8, lr=0.05, weight_decay=1e-3, prox_mu=0.1, max_grad_norm=0.5)
    fast = _compare("mcmahan_2nn", clipped, SIZES, client_chunk=2, shift_scale=1e-3)
    free = _compare("mcmahan_2nn", dataclasses.replace(clipped, max_grad_norm=0.0), SIZES, shift_scale=1e-3)
    assert P.norm(P.sub(fast.params, free.params)) > 1e-3  # the bound was active, not a no-op


def test_batchnorm_cnn_matches_plain_loop():
    # In float64: BatchNorm over MNIST's near-constant background channels amplifies float32 rounding
    # chaotically (a 1e-7 perturbation of the start grows to ~50% in 8 plain-loop steps at lr 0.05), which
    # would hide a real mismatch behind noise. In float64 the two paths agree to ~1e-12.
    _compare("fednnnn_cifar", LocalTraining(epochs=2, batch_size=10, lr=0.05, momentum=0.5), [23, 10, 17],
             shape=(1, 28, 28), dtype=torch.float64)


@pytest.mark.parametrize("name", [n for n in models.MODEL_NAMES if n != "resnet18"])
def test_stacked_forward_equals_each_clients_own_forward(name):
    model = models.build(name).double().train()
    assert stacked.supports(model)
    c, B = 3, 5
    g = torch.Generator().manual_seed(0)
    params = {k: v + 0.1 * torch.randn(v.shape, generator=g, dtype=v.dtype)
              for k, v in P.broadcast(P.trainable(model), c).items()}
    buffers = P.broadcast(P.buffers(model), c)
    x = torch.randn(c, B, *models.DEFAULT_INPUT_SHAPE[name], generator=g, dtype=torch.float64)
    logits, new_buffers = stacked.forward(model, params, buffers, x)
    for i in range(c):
        model.load_state_dict({**P.row(params, i), **P.row(buffers, i)})
        assert torch.allclose(logits[i], model(x[i]), atol=1e-10)
        for k, v in P.buffers(model).items():  # the module updated its running statistics in place
            assert torch.allclose(new_buffers[k][i], v, atol=1e-12), k


def test_resnet_is_left_to_vmap():
    model = models.build("resnet18")
    assert not stacked.supports(model)
    with pytest.raises(ConfigError, match="batching must be"):
        train_cohort(model, {}, {}, [torch.arange(3)], mnist_subset(3, 1), LocalTraining(1, 1, 0.1), [None],
                     batching="stacked")


def test_the_automatic_batching_is_stacked_on_cuda_and_the_loop_for_convolutions_on_the_cpu():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")  # a device name needs no GPU
    assert [auto_batching(models.build(n), cpu) for n in ("mcmahan_2nn", "mcmahan_cnn", "resnet18")] == \
        ["vmap", "loop", "loop"]
    assert [auto_batching(models.build(n), cuda) for n in ("mcmahan_2nn", "mcmahan_cnn", "resnet18")] == \
        ["stacked", "stacked", "vmap"]


def test_the_loop_batching_leaves_the_model_it_was_given_as_it_was():
    data = mnist_subset(60, 10)
    model = models.build("fednnnn_mnist")
    before = P.trainable(model)
    start = {k: v + 0.1 for k, v in P.broadcast(before, 2).items()}
    train_cohort(model, start, {}, _parts([30, 30]), data, LocalTraining(1, 10, 0.1),
                 [torch.Generator().manual_seed(i) for i in range(2)], batching="loop")
    assert all(torch.equal(before[k], v) for k, v in P.trainable(model).items())


def test_chunking_does_not_change_results():
    data = mnist_subset(200, 10)
    model = models.build("mcmahan_2nn")
    parts = _parts(SIZES)
    cfg = LocalTraining(epochs=1, batch_size=10, lr=0.1)
    start, sb = P.broadcast(P.trainable(model), len(parts)), P.broadcast(P.buffers(model), len(parts))
    runs = [train_cohort(model, start, sb, parts, data, cfg,
                         [torch.Generator().manual_seed(i) for i in range(len(parts))], client_chunk=c)
            for c in (1, 3, 0)]
    for other in runs[1:]:
        assert all(torch.allclose(runs[0].params[k], other.params[k], rtol=1e-5, atol=1e-7) for k in start)


def test_start_points_are_not_modified():
    data = mnist_subset(100, 10)
    model = models.build("mcmahan_2nn")
    parts = _parts([30, 40])
    start = P.broadcast(P.trainable(model), 2)
    before = {k: v.clone() for k, v in start.items()}
    train_cohort(model, start, {}, parts, data, LocalTraining(1, 10, 0.1),
                 [torch.Generator().manual_seed(i) for i in range(2)])
    assert all(torch.equal(before[k], start[k]) for k in start)


def test_each_epoch_is_a_fresh_permutation_of_the_clients_data():
    indices = torch.arange(100, 110)
    order = epoch_orders(indices, 3, torch.Generator().manual_seed(0))
    epochs = order.view(3, 10)
    assert all(torch.equal(e.sort().values, indices) for e in epochs)
    assert not torch.equal(epochs[0], epochs[1])
