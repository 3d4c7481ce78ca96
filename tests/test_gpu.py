"""The CUDA code paths: the vectorized engine against the plain loop on the GPU, and every algorithm for a
few rounds there. Skipped where no CUDA device is present (this book's CPU machines and CI)."""

import pytest
import torch

from fedcore import algorithms, experiment, models
from fedcore import params as P
from fedcore.client import LocalTraining, train_client_reference, train_cohort
from fedcore.config import RunConfig, Runtime
from tests.helpers import mnist_subset, needs_mnist

pytestmark = [pytest.mark.gpu, needs_mnist]


@pytest.fixture
def full_fp32_convolutions():
    """cuDNN convolutions round to TF32 by default (10-bit mantissas), and batched and plain convolutions pick
    different kernels: an H100 lease saw 1.7e-3 between them. The equivalence is checked in full fp32."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32 = saved


@pytest.mark.parametrize("batching", ["stacked", "vmap"])
@pytest.mark.parametrize("name", ["mcmahan_2nn", "fednnnn_mnist"])
def test_engine_matches_plain_loop_on_cuda(name, batching, full_fp32_convolutions):
    data = mnist_subset(120, 10).to("cuda")
    model = models.build(name).cuda()
    parts = list(torch.arange(120, device="cuda").split([50, 37, 33]))
    cfg = LocalTraining(epochs=1, batch_size=10, lr=0.05, momentum=0.5, prox_mu=0.01)
    start, sb = P.broadcast(P.trainable(model), 3), P.broadcast(P.buffers(model), 3)
    fast = train_cohort(model, start, sb, parts, data, cfg, [torch.Generator().manual_seed(i) for i in range(3)],
                        batching=batching)
    for i, ix in enumerate(parts):
        ref, _, _ = train_client_reference(model, P.row(start, i), P.row(sb, i), ix, data, cfg,
                                           torch.Generator().manual_seed(i))
        err = P.norm(P.sub(P.row(fast.params, i), ref)) / P.norm(P.sub(ref, P.row(start, i)))
        assert err <= 1e-4  # fp32 rounding, summed in another order by the batched kernels


@pytest.mark.parametrize("name", algorithms.NAMES)
def test_every_algorithm_runs_on_cuda(name, tmp_path):
    cfg = RunConfig(algorithm=name, model="fednnnn_mnist", partition="shards", clients=10, fraction=0.3,
                    batch_size=20, lr=0.05, rounds=2, train_subset=2000, test_subset=500, mu=0.01, beta=0.7,
                    gamma=0.5, noise_std=0.001)
    doc = experiment.run(cfg, Runtime(device="cuda", out=tmp_path / "r.json", progress=False))
    assert doc["env"]["device"].startswith("cuda") and doc["rounds"][-1]["test_acc"] > 0.1


def test_bf16_precision_runs_on_cuda_and_learns_as_fp32_does(tmp_path):
    docs = {}
    for precision in ("fp32", "bf16"):
        cfg = RunConfig(model="fednnnn_mnist", clients=10, fraction=0.5, batch_size=20, lr=0.05, rounds=2,
                        train_subset=2000, test_subset=500, precision=precision)
        docs[precision] = experiment.run(cfg, Runtime(device="cuda", out=tmp_path / f"{precision}.json",
                                                      progress=False))
    accs = {p: [r["test_acc"] for r in doc["rounds"]] for p, doc in docs.items()}
    assert accs["bf16"] != accs["fp32"] or docs["bf16"]["rounds"][-1]["N"] != docs["fp32"]["rounds"][-1]["N"]
    assert accs["bf16"][-1] > 0.3 and abs(accs["bf16"][-1] - accs["fp32"][-1]) < 0.05  # chance: 0.1
