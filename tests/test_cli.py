"""Bad input exits non-zero with one clear line naming the flag or file; good input runs."""

import json
import subprocess
import sys

import pytest

from fedcore.cli import main
from tests.helpers import needs_mnist

SMALL = ["--train-subset", "1000", "--test-subset", "200", "--clients", "10", "--rounds", "1", "--quiet",
         "--device", "cpu"]


@pytest.mark.parametrize("args,needle", [
    (["--fraction", "1.5"], "--fraction must be in [0, 1]"),
    (["--lr", "-0.1"], "--lr must be a positive number"),
    (["--model", "vgg"], "--model must be one of"),
    (["--dataset", "svhn"], "--dataset must be one of"),
    (["--partition", "zipf"], "--partition must be one of"),
    (["--inputs", "whitened"], "--inputs must be one of standardized, unit"),
    (["--batch-size", "ten"], "--batch-size must be"),
    (["--device", "tpu"], "--device must be"),
    (["--lr-grid", "0.1", "-1"], "--lr-grid must be positive learning rates"),
    (["--stop-at-target"], "--stop-at-target must be used together with --target-acc"),
])
def test_invalid_flags(args, needle, capsys, tmp_path):
    assert main(["run", *SMALL, "--out", str(tmp_path / "r.json"), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0], err


@needs_mnist
def test_shards_that_cannot_be_split(capsys, tmp_path):
    args = ["run", *SMALL, "--partition", "shards", "--train-subset", "1001", "--out", str(tmp_path / "r.json")]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert "--clients 10 x --shards-per-client 2" in err and "1001" in err


def test_unwritable_output_path(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert main(["run", *SMALL, "--out", str(blocker / "r.json")]) == 2
    assert "--out: cannot write" in capsys.readouterr().err


@needs_mnist
def test_corrupt_checkpoint(capsys, tmp_path):
    (tmp_path / "r.json.ckpt").write_bytes(b"not a checkpoint")
    assert main(["run", *SMALL, "--out", str(tmp_path / "r.json"), "--resume"]) == 2
    assert "corrupt or not a fedcore checkpoint" in capsys.readouterr().err


def test_unknown_toml_key_and_bad_toml(capsys, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("lr = 0.1\nlearning_rate = 3\n")
    assert main(["run", "--config", str(cfg), "--out", str(tmp_path / "r.json")]) == 2
    assert "unknown setting(s) learning_rate" in capsys.readouterr().err
    cfg.write_text("lr = = 1")
    assert main(["run", "--config", str(cfg), "--out", str(tmp_path / "r.json")]) == 2
    assert "is not valid TOML" in capsys.readouterr().err


@needs_mnist
def test_toml_config_with_flag_override_runs_end_to_end(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[run]\nmodel = "mcmahan_2nn"\nbatch_size = "inf"\nlr = 0.5\ntarget_acc = [0.5]\n')
    out = tmp_path / "r.json"
    assert main(["run", "--config", str(cfg), *SMALL, "--rounds", "2", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "B=inf" in printed and "rounds 2" in printed and str(out) in printed


@needs_mnist
def test_lr_grid_runs_every_lr_and_keeps_the_fastest_to_target(tmp_path, capsys):
    out = tmp_path / "r.json"
    args = ["run", *SMALL, "--rounds", "2", "--model", "mcmahan_2nn", "--target-acc", "0.6",
            "--lr-grid", "0.001", "0.1", "--out", str(out)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert (tmp_path / "r-lr0.001.json").exists() and (tmp_path / "r-lr0.1.json").exists()
    # lr 0.001 cannot reach 60% in two rounds on MNIST; lr 0.1 does.
    assert "best lr = 0.1 (fewest rounds to 0.6" in printed and "r-lr0.1.json" in printed.splitlines()[-1]


def test_module_entry_point_reports_errors_on_one_line():
    proc = subprocess.run([sys.executable, "-m", "fedcore", "run", "--fraction", "2"], capture_output=True, text=True)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["fedcore: error: --fraction must be in [0, 1] (0 means one client "
                                                "per round); got 2.0"]


@needs_mnist
@pytest.mark.parametrize("sig", ["SIGINT", "SIGTERM"])
def test_ctrl_c_writes_a_checkpoint_and_resume_finishes_the_same_run(tmp_path, sig):
    import json
    import os
    import signal
    import time

    args = [sys.executable, "-m", "fedcore", "run", *SMALL, "--rounds", "12", "--checkpoint-every", "1"]
    out = tmp_path / "r.json"
    # SIG_DFL first: a shell runs background jobs with SIGINT ignored, and Python then never raises
    # KeyboardInterrupt (that is how `make test &` would run this test).
    proc = subprocess.Popen([*args, "--out", str(out)], stderr=subprocess.PIPE, text=True, env=os.environ,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while not out.with_name("r.json.ckpt").exists() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(getattr(signal, sig))  # SIGTERM: `kill`, `timeout`, batch schedulers
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "checkpoint written to" in err and "--resume" in err
    subprocess.run([*args, "--out", str(out), "--resume"], check=True, capture_output=True)
    subprocess.run([*args, "--out", str(tmp_path / "full.json")], check=True, capture_output=True)
    strip = lambda p: [{k: v for k, v in r.items() if k != "wall_s"} for r in json.loads(p.read_text())["rounds"]]  # noqa: E731
    assert strip(out) == strip(tmp_path / "full.json")


def test_bench_switches_writes_a_row_per_case(tmp_path, capsys, monkeypatch):
    from fedcore import bench

    monkeypatch.setattr(bench, "CASES", (bench.Case("tiny 2nn", "mcmahan_2nn", 2, 10, examples_per_client=20),))
    assert main(["bench", "--switches", "--repeats", "1", "--out", str(tmp_path / "s.json")]) == 0
    assert "tiny 2nn" in capsys.readouterr().out
    doc = json.loads((tmp_path / "s.json").read_text())
    assert [r["case"] for r in doc["switches"]] == ["tiny 2nn"] and doc["env"]["device"] == "cpu"
