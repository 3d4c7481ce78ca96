"""Experiments as data, `fedcore reproduce` and the results store: every experiment's smoke scale runs,
published values line up with cells, and the store survives kills, corruption and config changes."""

import dataclasses
import functools
import io
import json
import math
import multiprocessing
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from fedcore import checkpoint, experiments, reproduce, results, scoreboard
from fedcore.config import GridLeader
from fedcore.errors import ConfigError
from tests.helpers import needs_mnist

ALL = experiments.names()


@pytest.mark.parametrize("name", ALL)
def test_every_scale_loads_and_every_cell_has_its_paper_value(name):
    for scale in experiments.SCALES:
        exp = experiments.load(name, scale)
        assert exp.scale_note, f"{name} [{scale}] must say what it runs"
    exp = experiments.load(name, "paper")
    if exp.published:  # figures without numbers (NWDA, poster extensions) have none
        cells = {c.name for c in exp.cells}
        assert set(exp.published) <= cells
        assert all(set(v) == set(exp.columns) for v in exp.published.values()), name


def test_lr_grid_flag_replaces_every_cells_grid():
    exp = experiments.load("mcmahan_table2_cnn", "paper", lr_grid=(0.03, 0.3))
    for cell in exp.cells:
        assert [(run_id.split("--")[1], cfg.lr) for run_id, cfg in cell.variants()] == [("lr0.03", 0.03),
                                                                                      ("lr0.3", 0.3)]


def test_reproduce_with_an_lr_grid_prints_the_books_scoreboard_and_scoreboard_with_one_says_it_is_restricted(
        monkeypatch, capsys):
    # Scored over --lr-grid's rates alone, a cell whose best rate was run earlier would read "not reached".
    from fedcore import cli

    monkeypatch.setattr(reproduce, "reproduce", lambda *a, **k: None)  # the committed results, nothing run
    name, grid = "mcmahan_table2_cnn", (0.1,)
    own, restricted = (experiments.load(name, "paper", lr_grid=g) for g in (None, grid))
    own_text, restricted_text = (scoreboard.format_text(e, scoreboard.compare(e)) for e in (own, restricted))
    assert own_text != restricted_text
    assert cli.main(["reproduce", name, "--scale", "paper", "--lr-grid", "0.1"]) == 0
    header, text = capsys.readouterr().out.split("\n", 1)
    assert "each cell's own learning-rate grid" in header and "--scoreboard --lr-grid 0.1" in header
    assert text.strip() == own_text
    assert cli.main(["reproduce", name, "--scale", "paper", "--scoreboard", "--lr-grid", "0.1"]) == 0
    header, text = capsys.readouterr().out.split("\n", 1)
    assert header.startswith("scoreboard restricted to learning rates 0.1")
    assert text.strip() == restricted_text


@needs_mnist
@pytest.mark.parametrize("name", ALL)
def test_smoke_scale_runs_and_scores(name, tmp_path):
    exp = reproduce.reproduce(name, "smoke", device="cpu", results_dir=tmp_path, log=lambda *a: None)
    rows = scoreboard.compare(exp, tmp_path)
    assert rows and all(r["scale"] == "smoke" for r in rows)
    assert {r["cell"] for r in rows} == {c.name for c in exp.cells} | set(exp.omitted)  # the whole table
    for r in rows:
        if r["cell"] in exp.omitted:
            assert r["status"] == "not in the smoke scale" and r["ours"] is None
            continue
        if exp.cells[0].config.dataset == "cifar10":
            assert r["status"] == "not run: cifar10 not available offline" and r["ours"] is None
        else:
            assert r["status"].startswith("done"), r
            if r["column"] == "acc":
                assert 0 <= r["ours"] <= 100


TINY = textwrap.dedent("""
    title = "tiny"
    reference = "test"
    metric = "rounds_to_target"
    rule = "interpolated"
    targets = [0.8]
    [base]
    dataset = "mnist"
    model = "mcmahan_2nn"
    clients = 10
    fraction = 0.5
    batch_size = 20
    lr = 0.1
    rounds = 25
    train_subset = 1000
    test_subset = 200
    target_acc = [0.8]
    [scales.smoke]
    note = "test"
    [[cells]]
    name = "a"
""")


def _tiny(tmp_path, **base_overrides):
    d = tmp_path / "experiments"
    d.mkdir(exist_ok=True)
    text = TINY
    for k, v in base_overrides.items():
        text = text.replace(f"\n{k} = ", f"\n{k} = {v}\n# was: ")
    (d / "tiny.toml").write_text(text)
    (d / "published.toml").write_text('[tiny.cells]\n"a" = { "0.8" = 12 }\n')
    return d


def _numbers(path):
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in json.loads(path.read_text())["rounds"]]


@needs_mnist
def test_killed_reproduce_resumes_to_the_numbers_of_an_uninterrupted_run(tmp_path):
    exps = _tiny(tmp_path)
    script = ("import sys; from pathlib import Path; from fedcore import reproduce; "
              "reproduce.reproduce('tiny', 'smoke', device='cpu', results_dir=Path(sys.argv[1]), "
              "experiments_dir=Path(sys.argv[2]), log=lambda *a: None)")
    run = lambda out: subprocess.Popen([sys.executable, "-c", script, str(out), str(exps)],  # noqa: E731
                                       env=os.environ, stderr=subprocess.DEVNULL)
    killed = tmp_path / "killed"
    proc = run(killed)
    ckpt = killed / "tiny" / "smoke" / "a.json.ckpt"
    deadline = time.time() + 120
    while not ckpt.exists() and time.time() < deadline and proc.poll() is None:
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # a real kill: no handler runs
    proc.wait()
    assert ckpt.exists() and not (killed / "tiny" / "smoke" / "a.json").exists()
    in_flight = reproduce.listing(killed, exps).split("checkpointed")[1]
    assert "tiny/smoke/a.json.ckpt: round " in in_flight and f"commit {results.git_commit()[:12]} on " in in_flight
    tiny = experiments.load("tiny", "smoke", exps)
    assert re.fullmatch(r"in progress: round \d+ of 25 \(checkpointed\)", scoreboard.compare(tiny, killed)[0]["status"])
    assert run(killed).wait() == 0
    assert "checkpointed" not in reproduce.listing(killed, exps)
    assert scoreboard.compare(tiny, killed)[0]["status"] == "done"
    assert run(tmp_path / "clean").wait() == 0
    assert _numbers(killed / "tiny" / "smoke" / "a.json") == _numbers(tmp_path / "clean" / "tiny" / "smoke" / "a.json")


@needs_mnist
def test_corrupt_and_stale_results_are_set_aside_and_rerun(tmp_path):
    exps, results_dir, logs = _tiny(tmp_path, rounds=3), tmp_path / "results", []
    exp = reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps,
                              log=logs.append)
    path = results_dir / "tiny" / "smoke" / "a.json"
    path.write_text("{ truncated")
    reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps, log=logs.append)
    assert any("moved aside" in line and "corrupt" in line for line in logs)
    assert len(list(path.parent.glob("a.json.corrupt-*"))) == 1
    assert scoreboard.compare(exp, results_dir)[0]["status"].startswith("done")

    exps = _tiny(tmp_path, rounds=4)  # the cell's config changed: the old result must not be used
    exp = experiments.load("tiny", "smoke", exps)
    assert scoreboard.compare(exp, results_dir)[0]["status"] == "not run"
    reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps, log=logs.append)
    assert len(list(path.parent.glob("a.json.stale-*"))) == 1
    assert json.loads(path.read_text())["config"]["rounds"] == 4


@needs_mnist
def test_results_written_before_a_setting_existed_still_count_as_done(tmp_path):
    # A field added later (with a default that keeps the old behaviour) must not make old results stale.
    exps, results_dir = _tiny(tmp_path, rounds=2), tmp_path / "results"
    exp = reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps)
    path = results_dir / "tiny" / "smoke" / "a.json"
    doc = json.loads(path.read_text())
    del doc["config"]["stop_at_target"]
    path.write_text(json.dumps(doc))
    assert scoreboard.compare(exp, results_dir)[0]["status"].startswith("done")


def test_unknown_experiment_and_scale_are_clear_errors():
    from fedcore.cli import main

    assert main(["reproduce", "nope", "--scale", "smoke", "--scoreboard"]) == 2
    assert main(["reproduce", ALL[0], "--scale", "huge", "--scoreboard"]) == 2


@needs_mnist
def test_committed_results_show_without_the_dataset(tmp_path, monkeypatch):
    exps, results_dir = _tiny(tmp_path, rounds=2), tmp_path / "results"
    exp = reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps,
                              log=lambda *a: None)
    monkeypatch.setattr(reproduce.data, "available", lambda name, root=None: False)
    assert scoreboard.compare(exp, results_dir)[0]["status"].startswith("done")


@needs_mnist
def test_a_learning_rate_grid_run_in_part_says_so(tmp_path):
    exps, results_dir = _tiny(tmp_path, rounds=2), tmp_path / "results"
    exp = reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps,
                              lr_grid=(0.05, 0.1), log=lambda *a: None)
    assert scoreboard.compare(exp, results_dir)[0]["status"].startswith("done")
    (results_dir / "tiny" / "smoke" / "a--lr0.1.json").unlink()
    row = scoreboard.compare(exp, results_dir)[0]
    assert row["status"].startswith("partial: 1 of 2 learning rates") and row["run"] == "a--lr0.05"


@dataclasses.dataclass
class _State:
    step: int = 0


@needs_mnist
def test_a_partial_grid_is_final_once_the_rest_are_below_the_target_past_its_rounds(tmp_path):
    exps, results_dir = _tiny(tmp_path), tmp_path / "results"
    exp = reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps,
                              lr_grid=(0.05, 0.1), log=lambda *a: None)
    best = scoreboard.compare(exp, results_dir)[0]
    other = next(p for p in (results_dir / "tiny" / "smoke").glob("a--lr*.json") if p.stem != best["run"])
    config = json.loads(other.read_text())["config"]
    other.unlink()

    def cut_off(last_round, acc):  # the other rate, checkpointed at last_round, at `acc` in every round
        history = [{"round": r, "test_acc": acc} for r in range(last_round + 1)]
        checkpoint.save(checkpoint.path_for(other), config=config, round=last_round, state=_State(),
                        history=history, wall_s=1.0, segments=[])
        return scoreboard.compare(exp, results_dir)[0]["status"]

    past, before = math.floor(best["ours"]) + 1, math.ceil(best["ours"]) - 1
    assert re.fullmatch(rf"partial: 1 of 2 learning rates; final for this grid, since lr [\d.]+ \(checkpointed\) "
                        rf"is below 80% in round {past}, past lr [\d.]+'s {best['ours']:g} rounds",
                        cut_off(past, 0.5))
    assert cut_off(before, 0.5) == "partial: 1 of 2 learning rates"  # it may still get there sooner
    assert cut_off(past, 0.9) == "partial: 1 of 2 learning rates"  # it got there: its result will say when


@needs_mnist
def test_a_rate_that_can_no_longer_beat_its_cells_best_ends_there_and_completes_the_grid(tmp_path):
    # the cell's own grid is 0.01 and 0.1; 0.1 runs first (--lr-grid 0.1), then 0.01 (--lr-grid 0.01), which
    # is held to 0.1's rounds, the leader of the cell's own grid (the book's), though --lr-grid left 0.1 out
    exps = _tiny(tmp_path, note='"test"\nlr_grid = [0.01, 0.1]', target_acc="[0.8]\nstop_at_target = true")
    results_dir, store = tmp_path / "results", tmp_path / "results" / "tiny" / "smoke"
    for rate in (0.1, 0.01):
        reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps,
                            lr_grid=(rate,), log=lambda *a: None)
    leader, beaten = (json.loads((store / f"a--lr{r}.json").read_text())["summary"] for r in ("0.1", "0.01"))
    rounds = leader["rounds_to_target"]["0.8"]["interpolated"]
    assert rounds is not None and leader["beaten_by"] is None
    assert beaten["beaten_by"] == {"run": "a--lr0.1", "rounds": rounds}
    assert beaten["rounds_completed"] == math.ceil(rounds) < 25 and beaten["best_acc"] < 0.8
    assert leader["stopped_at_target"] and not beaten["stopped_at_target"]
    exp = experiments.load("tiny", "smoke", exps)
    row = scoreboard.compare(exp, results_dir)[0]
    assert row["status"] == "done" and row["run"] == "a--lr0.1"


@needs_mnist
def test_a_rate_ends_once_a_rate_running_beside_it_finishes_ahead(tmp_path, monkeypatch):
    # an accelerator runs a cell's rates side by side: 0.01 starts with no finished rate to beat, and 0.1
    # finishes (its results file appears) while 0.01 runs, which then ends where it would have behind 0.1
    exps = _tiny(tmp_path, note='"test"\nlr_grid = [0.01, 0.1]', target_acc="[0.8]\nstop_at_target = true")
    results_dir, store = tmp_path / "results", tmp_path / "results" / "tiny" / "smoke"
    reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=tmp_path / "beside", experiments_dir=exps,
                        lr_grid=(0.1,), log=lambda *a: None)
    finished = tmp_path / "beside" / "tiny" / "smoke" / "a--lr0.1.json"
    rounds = json.loads(finished.read_text())["summary"]["rounds_to_target"]["0.8"]["interpolated"]
    real, asked = reproduce.cell_leader, []

    def cell_leader(*args):
        asked.append(real(*args))
        if len(asked) == 1:  # asked before round 1, with nothing finished; 0.1 finishes during that round
            shutil.copy(finished, store / finished.name)
        return asked[-1]

    monkeypatch.setattr(reproduce, "cell_leader", cell_leader)
    reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps,
                        lr_grid=(0.01,), log=lambda *a: None)
    beaten = json.loads((store / "a--lr0.01.json").read_text())["summary"]
    assert asked[0] is None and asked[1] == GridLeader("a--lr0.1", 0.8, rounds)
    assert beaten["beaten_by"] == {"run": "a--lr0.1", "rounds": rounds}
    assert beaten["rounds_completed"] == math.ceil(rounds) < 25 and not beaten["stopped_at_target"]
    # what a --jobs worker receives pickles, and the store is read again only when one of its files changed
    monkeypatch.setattr(reproduce, "cell_leader", real)
    exp = experiments.load("tiny", "smoke", exps)
    ask = pickle.loads(pickle.dumps(functools.partial(real, exp, exp.cells[0], results_dir)))
    assert ask() == asked[1]  # 0.01's own file is new since it last asked
    monkeypatch.setattr(reproduce, "inspect", lambda *a: pytest.fail("read the store though no file changed"))
    assert ask() == asked[1]


@needs_mnist
def test_parallel_runs_each_show_a_progress_bar_named_after_the_run(tmp_path, capfd):
    exps = _tiny(tmp_path, rounds=3)
    reproduce.reproduce("tiny", "smoke", device="cpu", jobs=2, lr_grid=(0.05, 0.1), results_dir=tmp_path / "r",
                        experiments_dir=exps, log=lambda *a: None)
    err = capfd.readouterr().err  # the workers' stderr: file descriptor 2, which they inherit
    assert "a--lr0.05" in err and "a--lr0.1" in err and "/3 " in err  # a bar: rounds done of 3


@needs_mnist
@pytest.mark.parametrize("to_group", [True, False], ids=["to-process-group", "to-parent-alone"])
def test_sigterm_stops_a_parallel_reproduce_without_starting_queued_runs(tmp_path, to_group):
    exps, out = _tiny(tmp_path, rounds=5000), tmp_path / "results"  # far more than the wait below
    script = ("import sys; from pathlib import Path; from fedcore import errors, reproduce; "
              "errors.stop_like_ctrl_c(); "
              "reproduce.reproduce('tiny', 'smoke', device='cpu', jobs=2, lr_grid=(0.01, 0.02, 0.03, 0.04), "
              "results_dir=Path(sys.argv[1]), experiments_dir=Path(sys.argv[2]), log=lambda *a: None)")
    proc = subprocess.Popen([sys.executable, "-c", script, str(out), str(exps)], env=os.environ,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    folder = out / "tiny" / "smoke"
    deadline = time.time() + 120
    while len(list(folder.glob("*.ckpt"))) < 2 and time.time() < deadline and proc.poll() is None:
        time.sleep(0.05)
    try:
        if to_group:
            os.killpg(proc.pid, signal.SIGTERM)  # as `timeout` and a terminal's Ctrl-C do: the whole group
        else:
            proc.send_signal(signal.SIGTERM)  # `kill PID`: the parent forwards it, or its shutdown waits 5000 rounds
        _, err = proc.communicate(timeout=120)
    finally:  # a failure must not leave the workers training for the rest of the suite
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "ReproduceInterrupted" in err
    started = {p.name.split(".json")[0] for p in folder.iterdir()}
    assert started == {"a--lr0.01", "a--lr0.02"}  # the two in flight checkpointed; the queued two never began


def test_an_interrupt_while_a_worker_draws_its_bar_leaves_the_bar_lock_free_for_the_others(monkeypatch):
    # tqdm's refresh() releases its lock without try/finally: a KeyboardInterrupt raised inside display() would
    # keep the lock the workers share held for good, and the other workers' bars would wait on it forever
    from tqdm.auto import tqdm

    shared = multiprocessing.get_context("spawn").RLock()
    for key, value in {"running": True, "stopping": False, "drawing": 0, "deferred": False}.items():
        monkeypatch.setitem(reproduce._worker, key, value)
    monkeypatch.setattr(tqdm, "_lock", reproduce._BarLock(shared), raising=False)
    bar = tqdm(total=3, file=io.StringIO())
    bar.display = lambda *a, **k: signal.raise_signal(signal.SIGTERM)  # killed mid-draw
    saved = signal.signal(signal.SIGTERM, reproduce._on_signal_in_worker)
    try:
        with pytest.raises(KeyboardInterrupt):
            bar.refresh()
    finally:
        signal.signal(signal.SIGTERM, saved)
        del bar.display
        bar.close()
    free = []  # another thread stands for another worker: an RLock is re-entrant for its owner
    other = threading.Thread(target=lambda: free.append(shared.acquire(block=False)))
    other.start()
    other.join()
    assert free == [True]
    assert reproduce._worker["drawing"] == 0 and not reproduce._worker["deferred"]


@needs_mnist
def test_a_run_two_tables_share_is_copied_not_trained_again(tmp_path, monkeypatch):
    exps, results_dir = _tiny(tmp_path, rounds=2), tmp_path / "results"
    (exps / "twin.toml").write_text((exps / "tiny.toml").read_text())  # same cell, another table
    (exps / "published.toml").write_text('[tiny.cells]\n"a" = { "0.8" = 12 }\n[twin.cells]\n"a" = { "0.8" = 12 }\n')
    run = functools.partial(reproduce.reproduce, scale="smoke", device="cpu", results_dir=results_dir,
                            experiments_dir=exps, log=lambda *a: None)
    run("tiny")
    monkeypatch.setattr(reproduce, "_run_one", lambda *a, **k: pytest.fail("trained a run the store already had"))
    cut_off = results_dir / "twin" / "smoke" / "a.json.ckpt"  # an earlier, interrupted attempt at the twin
    cut_off.parent.mkdir(parents=True)
    cut_off.write_bytes(b"")
    exp = run("twin")
    assert not cut_off.exists()
    cost = scoreboard.wall_times(["tiny", "twin"], "smoke", results_dir, exps)
    assert cost.index.get_level_values("experiment").tolist() == ["tiny"]  # the copy cost nothing
    assert cost["runs"].tolist() == [1]
    original = json.loads((results_dir / "tiny" / "smoke" / "a.json").read_text())
    copy = json.loads((results_dir / "twin" / "smoke" / "a.json").read_text())
    assert copy.pop("copied_from") == "tiny/smoke/a.json" and copy == original
    assert scoreboard.compare(exp, results_dir)[0]["status"].startswith("done")


@needs_mnist
def test_a_diverged_best_run_says_so_on_the_scoreboard(tmp_path):
    exps, results_dir = _tiny(tmp_path, rounds=20), tmp_path / "results"
    exp = reproduce.reproduce("tiny", "smoke", device="cpu", results_dir=results_dir, experiments_dir=exps,
                              lr_grid=(3.0,), log=lambda *a: None)
    assert "diverged (NaN weights) in round" in scoreboard.compare(exp, results_dir)[0]["status"]


@needs_mnist
def test_a_best_learning_rate_at_the_edge_of_its_grid_is_flagged(tmp_path):
    exps, results_dir = _tiny(tmp_path, rounds=2), tmp_path / "results"
    run = functools.partial(reproduce.reproduce, "tiny", "smoke", device="cpu", results_dir=results_dir,
                            experiments_dir=exps, log=lambda *a: None)
    exp = run(lr_grid=(0.003, 0.01, 0.1))  # in 2 rounds the largest rate learns most
    assert scoreboard.compare(exp, results_dir)[0]["status"].endswith("best lr 0.1 at the grid's edge")
    exp = run(lr_grid=(0.003, 0.1, 3.0))  # 3.0 is far too large: the best, 0.1, is inside the grid
    assert "edge" not in scoreboard.compare(exp, results_dir)[0]["status"]


def test_a_seed_study_runs_each_cell_once_per_seed_beside_the_papers_one_number(tmp_path):
    exps = _tiny(tmp_path)
    text = (exps / "tiny.toml").read_text().replace('targets = [0.8]', 'targets = [0.8]\nseeds = [3, 5]')
    (exps / "tiny.toml").write_text(text + '[[cells]]\nname = "b"\n')
    exp = experiments.load("tiny", "smoke", exps)
    assert [(c.name, c.setting, c.config.seed) for c in exp.cells] == [
        ("a-seed3", "a", 3), ("a-seed5", "a", 5), ("b-seed3", "b", 3), ("b-seed5", "b", 5)]
    assert exp.published == {"a-seed3": {"0.8": 12}, "a-seed5": {"0.8": 12}}  # b: the paper has no number
    # a scale may run fewer seeds; anything but a list of integers is refused, naming the file
    (exps / "tiny.toml").write_text(text.replace('note = "test"', 'note = "test"\nseeds = [7]'))
    assert [c.name for c in experiments.load("tiny", "smoke", exps).cells] == ["a-seed7"]
    for bad in ("[]", "[1.5]", "3", "[true]"):
        (exps / "tiny.toml").write_text(text.replace("seeds = [3, 5]", f"seeds = {bad}"))
        with pytest.raises(ConfigError, match="tiny.toml: seeds must be a non-empty list of integers"):
            experiments.load("tiny", "smoke", exps)


@needs_mnist
def test_only_a_setting_runs_all_its_seeds(tmp_path):
    exps = _tiny(tmp_path, rounds=1)
    text = (exps / "tiny.toml").read_text().replace('targets = [0.8]', 'targets = [0.8]\nseeds = [0, 1]')
    (exps / "tiny.toml").write_text(text + '[[cells]]\nname = "b"\n')
    results_dir = tmp_path / "results"
    reproduce.reproduce("tiny", "smoke", device="cpu", only=["b"], results_dir=results_dir, experiments_dir=exps,
                        log=lambda *a: None)
    assert sorted(p.name for p in (results_dir / "tiny" / "smoke").glob("*.json")) == ["b-seed0.json", "b-seed1.json"]


@needs_mnist
def test_runs_record_the_runs_that_shared_the_machine_with_them(tmp_path):
    exps = _tiny(tmp_path, rounds=1)
    results_dir = tmp_path / "results"
    run = functools.partial(reproduce.reproduce, "tiny", "smoke", device="cpu", results_dir=results_dir,
                            experiments_dir=exps, log=lambda *a: None)
    run(alongside=2)
    assert results.load(results_dir / "tiny" / "smoke" / "a.json")["env"]["parallel_runs"] == 3  # itself + 2
    run(jobs=4, alongside=1, lr_grid=(0.02, 0.03))  # two new runs: a pool of 4 runs only 2 at once
    docs = [results.load(path) for path in (results_dir / "tiny" / "smoke").glob("a--lr*.json")]
    assert [doc["env"]["parallel_runs"] for doc in docs] == [3, 3]


def test_alongside_must_not_be_negative(capsys):
    from fedcore import cli

    assert cli.main(["reproduce", "tiny", "--alongside", "-1"]) != 0
    assert "--alongside must be >= 0" in capsys.readouterr().err
