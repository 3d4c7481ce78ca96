"""The engine benchmark's figures on a tiny cohort (speed itself is never asserted: see README)."""

import pytest
import torch

from fedcore import bench, models
from fedcore import params as P
from fedcore.client import LocalTraining, train_cohort


def test_a_case_reports_both_paths_and_the_batching_used():
    case = bench.Case("tiny 2nn", "mcmahan_2nn", clients=3, batch_size=10, examples_per_client=20)
    row = bench.run_case(case, torch.device("cpu"), repeats=1)
    assert row["batching"] == "vmap" and "vmap_samples_per_s" not in row  # the CPU keeps vmap
    assert row["vectorized_samples_per_s"] > 0 and row["loop_samples_per_s"] > 0
    assert row["ratio"] == row["vectorized_samples_per_s"] / row["loop_samples_per_s"]


def test_a_cnn_on_the_cpu_trains_through_the_loop_and_reports_vmap_beside_it():
    case = bench.Case("tiny cnn", "fednnnn_mnist", clients=2, batch_size=0, examples_per_client=20)
    row = bench.run_case(case, torch.device("cpu"), repeats=1)
    assert row["batching"] == "loop" and row["vmap_samples_per_s"] > 0


def test_switches_report_a_ratio_each_and_leave_the_defaults_as_they_were():
    defaults = (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(),
                torch.is_autocast_enabled("cpu"))
    case = bench.Case("tiny cnn", "fednnnn_mnist", clients=2, batch_size=10, examples_per_client=20)
    row = bench.run_switches(case, torch.device("cpu"), repeats=1)
    assert row["default_samples_per_s"] > 0 and all(row[name] > 0 for name in bench.SWITCHES)
    assert (torch.backends.cudnn.benchmark, torch.get_float32_matmul_precision(),
            torch.is_autocast_enabled("cpu")) == defaults


def test_bf16_autocast_trains_both_batchings_and_keeps_float32_weights():
    data = bench._synthetic_mnist(40, torch.device("cpu"))
    model = models.build("fednnnn_mnist")
    start, start_b = P.broadcast(P.trainable(model), 2), P.broadcast(P.buffers(model), 2)
    for batching in ("stacked", "vmap", "loop"):  # the CUDA path, and the CPU's for the 2NN and for CNNs
        with bench.switch("bf16_autocast", torch.device("cpu")):
            out = train_cohort(model, start, start_b, list(torch.arange(40).split(20)), data,
                               LocalTraining(1, 10, lr=0.05), [torch.Generator().manual_seed(i) for i in range(2)],
                               batching=batching)
        assert all(v.dtype == torch.float32 for v in out.params.values())
        assert torch.isfinite(out.train_loss).all()


def test_each_switch_is_on_inside_its_block():
    cpu = torch.device("cpu")
    with bench.switch("cudnn_benchmark", cpu):
        assert torch.backends.cudnn.benchmark
    with bench.switch("tf32_matmul", cpu):
        assert torch.get_float32_matmul_precision() == "high"
    with bench.switch("bf16_autocast", cpu):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_an_unknown_switch_is_named():
    with pytest.raises(ValueError, match="unknown switch 'fp8'"):
        with bench.switch("fp8", torch.device("cpu")):
            pass
