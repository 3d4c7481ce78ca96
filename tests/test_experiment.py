"""End-to-end runs on a real MNIST subset: results schema, learning, determinism, checkpoint/resume."""

import dataclasses
import json
import math

import pytest
import torch

from fedcore import algorithms, experiment, results
from fedcore.config import GridLeader, RunConfig, Runtime
from fedcore.errors import ConfigError, RunInterrupted
from tests.helpers import needs_mnist

pytestmark = needs_mnist

SMOKE = dict(dataset="mnist", model="mcmahan_2nn", partition="iid", clients=10, fraction=0.5, local_epochs=1,
             batch_size=20, lr=0.1, rounds=4, train_subset=2000, test_subset=500, target_acc=(0.5, 0.99))


def _numbers(doc: dict) -> list[dict]:
    """Everything a run measured except wall-clock time."""
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in doc["rounds"]]


def _run(tmp_path, name="run.json", **overrides):
    return experiment.run(RunConfig(**{**SMOKE, **overrides}),
                          Runtime(device="cpu", out=tmp_path / name, progress=False))


def test_smoke_run_learns_and_writes_a_valid_results_file(tmp_path):
    doc = _run(tmp_path)
    on_disk = results.load(tmp_path / "run.json")
    assert on_disk["config"] == RunConfig(**SMOKE).to_dict()
    assert on_disk["env"]["torch_version"] and on_disk["env"]["git_commit"]
    accs = [r["test_acc"] for r in doc["rounds"]]
    assert [r["round"] for r in doc["rounds"]] == [0, 1, 2, 3, 4]
    assert accs[-1] > accs[0] + 0.3
    assert doc["summary"]["rounds_to_target"]["0.5"]["first_round"] is not None
    assert doc["summary"]["rounds_to_target"]["0.99"] == {"interpolated": None, "first_round": None}
    assert all(r["N"] <= r["E"] + 1e-9 for r in doc["rounds"][1:])


def test_same_config_and_seed_give_identical_numbers(tmp_path):
    a, b = _run(tmp_path, "a.json"), _run(tmp_path, "b.json")
    assert _numbers(a) == _numbers(b)
    assert _numbers(_run(tmp_path, "c.json", seed=1)) != _numbers(a)


def test_unit_inputs_feed_the_network_pixels_in_0_1_and_change_the_run(tmp_path):
    from fedcore import data

    ds = data.scaled(data.load("mnist"), "unit")
    x = ds.normalize(ds.train_x[:50])
    assert torch.equal(x, ds.train_x[:50].float() / 255.0)
    assert _numbers(_run(tmp_path, "unit.json", inputs="unit")) != _numbers(_run(tmp_path, "std.json"))


def test_bf16_precision_trains_in_bfloat16_and_still_learns(tmp_path):
    bf16, fp32 = _run(tmp_path, "bf16.json", precision="bf16"), _run(tmp_path, "fp32.json")
    assert bf16["config"]["precision"] == "bf16" and fp32["config"]["precision"] == "fp32"
    assert _numbers(bf16) != _numbers(fp32)  # the clients' arithmetic did change
    assert abs(bf16["rounds"][-1]["test_acc"] - fp32["rounds"][-1]["test_acc"]) < 0.05


def test_fedsgd_with_every_client_is_full_batch_gradient_descent_whatever_the_split(tmp_path):
    # With C = 1, B = inf, E = 1 and weights n_k/n, sum_k (n_k/n) grad F_k(w) is the gradient over all the
    # data: the split cannot matter (McMahan Table 1's C = 1.0 FedSGD cells, IID and non-IID, must agree).
    fedsgd = dict(fraction=1.0, batch_size=0, local_epochs=1, weighting="samples", rounds=2, eval_every=1,
                  clients=5, train_subset=1000, test_subset=200)
    runs = {"iid": dict(partition="iid"), "shards": dict(partition="shards"),
            "power_law": dict(partition="power_law", classes_per_client=2),
            # the control: unequal parts weighted equally is another algorithm, and the test must see it
            "power_law, uniform": dict(partition="power_law", classes_per_client=2, weighting="uniform")}
    losses = {name: [r["test_loss"] for r in _run(tmp_path, f"{i}.json", **{**fedsgd, **cfg})["rounds"]]
              for i, (name, cfg) in enumerate(runs.items())}
    gap = {name: max(abs(a - b) for a, b in zip(losses[name], losses["iid"])) for name in losses}
    assert losses["iid"][-1] < losses["iid"][0]  # it did learn
    assert gap["shards"] <= 1e-6 and gap["power_law"] <= 1e-6, gap
    assert gap["power_law, uniform"] > 100 * 1e-6, gap


def test_evaluation_every_k_rounds_and_at_the_end(tmp_path):
    doc = _run(tmp_path, rounds=5, eval_every=2)
    assert [r["round"] for r in doc["rounds"] if r["test_acc"] is not None] == [0, 2, 4, 5]


def test_stop_at_target_ends_at_the_first_evaluation_past_every_target(tmp_path):
    full = _run(tmp_path, "full.json", rounds=6, target_acc=(0.5,))
    reached = full["summary"]["rounds_to_target"]["0.5"]["first_round"]
    assert reached is not None and reached < 6
    stopped = _run(tmp_path, "stopped.json", rounds=6, target_acc=(0.5,), stop_at_target=True)
    assert stopped["rounds"][-1]["round"] == reached and stopped["summary"]["stopped_at_target"]
    assert _numbers(stopped) == _numbers(full)[:reached + 1]
    assert stopped["summary"]["rounds_to_target"] == full["summary"]["rounds_to_target"]
    with pytest.raises(ConfigError, match="--stop-at-target"):
        RunConfig(stop_at_target=True)


def test_a_diverged_run_ends_in_the_round_its_weights_turn_nan(tmp_path):
    doc = _run(tmp_path, lr=2.0, rounds=50, eval_every=10)  # finite after round 1, NaN in round 2
    last = doc["rounds"][-1]
    assert last["round"] == doc["summary"]["diverged_at_round"] == 2 and not doc["summary"]["stopped_at_target"]
    assert last["test_acc"] is not None  # evaluated although round 2 is not an evaluation round
    assert math.isfinite(doc["rounds"][1]["server_step"]) and not math.isfinite(last["server_step"])
    assert _run(tmp_path, "fine.json")["summary"]["diverged_at_round"] is None


def test_a_losing_learning_rate_ends_at_its_first_evaluation_past_the_leaders_rounds(tmp_path, monkeypatch):
    full = _run(tmp_path, "full.json", rounds=6, eval_every=2)
    assert full["summary"]["best_acc"] < 0.99  # so the leader below is out of its reach
    leader = GridLeader("a--lr0.5", 0.99, 2.5)
    beaten = experiment.run(RunConfig(**{**SMOKE, "rounds": 6, "eval_every": 2}),
                            Runtime(device="cpu", out=tmp_path / "beaten.json", progress=False, leader=lambda: leader))
    assert beaten["summary"]["rounds_completed"] == 4  # evaluations in rounds 2 (before 2.5) and 4 (past it)
    assert _numbers(beaten) == _numbers(full)[:5]
    assert beaten["summary"]["beaten_by"] == {"run": "a--lr0.5", "rounds": 2.5}
    assert not beaten["summary"]["stopped_at_target"] and full["summary"]["beaten_by"] is None
    # a checkpoint already past the leader (a run begun before the leader finished) ends as it is resumed
    cfg, out = RunConfig(**{**SMOKE, "rounds": 6}), tmp_path / "resumed.json"
    _interrupted_in_round(monkeypatch, cfg, out, 5)
    real_make = algorithms.make
    monkeypatch.setattr(algorithms, "make", lambda cfg: dataclasses.replace(
        real_make(cfg), run_round=lambda *a: pytest.fail("trained a round it did not need")))
    resumed = experiment.run(cfg, Runtime(device="cpu", out=out, progress=False, resume=True, leader=lambda: leader))
    assert resumed["summary"]["rounds_completed"] == 4 and resumed["summary"]["beaten_by"]["run"] == "a--lr0.5"


def _interrupted_in_round(monkeypatch, cfg, out, round):
    """Run cfg (resuming any checkpoint at out) until Ctrl-C lands in `round`; the checkpoint it leaves."""
    real_make = algorithms.make

    def interrupted(cfg):
        algo = real_make(cfg)

        def run_round(state, inputs):
            if inputs.round == round:
                raise KeyboardInterrupt  # what Ctrl-C raises
            return algo.run_round(state, inputs)

        return dataclasses.replace(algo, run_round=run_round)

    monkeypatch.setattr(algorithms, "make", interrupted)
    with pytest.raises(RunInterrupted) as info:
        experiment.run(cfg, Runtime(device="cpu", out=out, progress=False, resume=True))
    monkeypatch.undo()
    assert info.value.round == round - 1 and info.value.checkpoint.exists()
    return info.value.checkpoint


def test_interrupted_run_resumes_to_the_same_numbers(tmp_path, monkeypatch):
    uninterrupted = _run(tmp_path, "full.json", rounds=5)
    cfg = RunConfig(**{**SMOKE, "rounds": 5})
    out = tmp_path / "resumed.json"
    ckpt = _interrupted_in_round(monkeypatch, cfg, out, 4)

    with pytest.raises(ConfigError, match="--resume"):
        experiment.run(cfg, Runtime(device="cpu", out=out, progress=False))
    resumed = experiment.run(cfg, Runtime(device="cpu", out=out, progress=False, resume=True))
    assert _numbers(resumed) == _numbers(uninterrupted)
    assert not ckpt.exists()
    # each process that ran rounds is on record, for a resumption may happen on another machine or commit
    assert "segments" not in uninterrupted["env"]
    first, second = resumed["env"]["segments"]
    assert (first["rounds"], second["rounds"]) == ([0, 3], [4, 5])
    assert second["git_commit"] == resumed["env"]["git_commit"] and second["start_time"] == resumed["env"]["start_time"]
    assert first["start_time"] <= second["start_time"] and first["device_name"] == second["device_name"]
    # each of the three is rounded to the millisecond on its own: their sums may differ by up to 1.5 ms
    assert first["wall_s"] + second["wall_s"] <= resumed["summary"]["total_wall_s"] + 1.5e-3


def test_a_checkpoint_from_before_segments_were_recorded_resumes_and_says_what_is_unknown(tmp_path, monkeypatch):
    cfg, out = RunConfig(**{**SMOKE, "rounds": 3}), tmp_path / "old.json"
    ckpt = _interrupted_in_round(monkeypatch, cfg, out, 3)
    payload = torch.load(ckpt, weights_only=True)
    del payload["segments"]  # as fedcore wrote checkpoints before it recorded them
    torch.save(payload, ckpt)
    doc = experiment.run(cfg, Runtime(device="cpu", out=out, progress=False, resume=True))
    old, new = doc["env"]["segments"]
    assert old["rounds"] == [0, 2] and old["device_name"] == old["git_commit"] == "not recorded"
    assert new["rounds"] == [3, 3] and new["device_name"] == doc["env"]["device_name"]
    assert results.devices(doc) == ["not recorded", doc["env"]["device_name"]]
    assert results.parallel_runs(doc) == ["not recorded", 1]
    assert results.provenance(doc).startswith(f"not recorded (not recorded) + {doc['env']['device_name']} (cpu)")


def test_a_resumption_that_runs_no_round_adds_no_segment(tmp_path, monkeypatch):
    cfg, out = RunConfig(**{**SMOKE, "rounds": 3}), tmp_path / "r.json"
    _interrupted_in_round(monkeypatch, cfg, out, 2)
    _interrupted_in_round(monkeypatch, cfg, out, 2)  # resumed (reproduce resumes) and cut off at once
    doc = experiment.run(cfg, Runtime(device="cpu", out=out, progress=False, resume=True))
    assert [s["rounds"] for s in doc["env"]["segments"]] == [[0, 1], [2, 3]]


def test_resume_refuses_a_checkpoint_of_another_config(tmp_path, monkeypatch):
    out = tmp_path / "r.json"
    _interrupted_in_round(monkeypatch, RunConfig(**SMOKE), out, 1)
    with pytest.raises(ConfigError, match="different config.*lr"):
        experiment.run(RunConfig(**{**SMOKE, "lr": 0.2}), Runtime(device="cpu", out=out, progress=False, resume=True))


def test_results_file_is_plain_json(tmp_path):
    _run(tmp_path, rounds=1)
    json.loads((tmp_path / "run.json").read_text())
