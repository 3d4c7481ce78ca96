"""The engine benchmark's figures on a tiny cohort (speed itself is never asserted: see README)."""

import torch

from fedcore import bench


def test_a_case_reports_both_paths_and_the_batching_used():
    case = bench.Case("tiny 2nn", "mcmahan_2nn", clients=3, batch_size=10, examples_per_client=20)
    row = bench.run_case(case, torch.device("cpu"), repeats=1)
    assert row["batching"] == "vmap" and "vmap_samples_per_s" not in row  # the CPU keeps vmap
    assert row["vectorized_samples_per_s"] > 0 and row["loop_samples_per_s"] > 0
    assert row["ratio"] == row["vectorized_samples_per_s"] / row["loop_samples_per_s"]
