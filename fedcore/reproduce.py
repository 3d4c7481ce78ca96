"""`fedcore reproduce`: run every cell of a paper table at a scale into the results store in results/,
resume what was interrupted, and read the store back (`scoreboard` compares it with the papers).

A results file is reused only if it holds exactly the cell's config and was written by this fedcore
version; anything else (corrupt, foreign, stale) is reported and renamed aside, never mixed into tables.
"""

from __future__ import annotations

import datetime
import functools
import json
import os
import signal
import threading
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from multiprocessing import active_children, get_context
from pathlib import Path

from fedcore import __version__, checkpoint, data, errors, experiments, metrics, results
from fedcore import config as C
from fedcore.config import RunConfig, Runtime
from fedcore.errors import ConfigError

RESULTS_DIR = Path(__file__).resolve().parent.parent / "results"
RUNS_DIR = RESULTS_DIR.parent / "runs"  # one-off variants from notebooks and the explorer; not committed
CHECKPOINT_EVERY = 10  # rounds: a kill loses at most this many


def run_path(results_dir: Path, exp: experiments.Experiment, run_id: str) -> Path:
    return results_dir / exp.name / exp.scale / f"{run_id}.json"


@dataclass
class RunStatus:
    run_id: str
    config: RunConfig
    path: Path
    status: str  # done | missing | stale | corrupt | no-data
    doc: dict | None = None
    detail: str = ""


def inspect(exp: experiments.Experiment, cell: experiments.Cell, results_dir: Path) -> list[RunStatus]:
    out = []
    for run_id, cfg in cell.variants():
        path = run_path(results_dir, exp, run_id)
        if not path.exists():
            if data.available(cfg.dataset):
                out.append(RunStatus(run_id, cfg, path, "missing", detail="not run"))
            else:
                out.append(RunStatus(run_id, cfg, path, "no-data",
                                     detail=f"not run: {cfg.dataset} not available offline"))
        else:
            try:
                doc = results.load(path)
            except ConfigError as exc:
                out.append(RunStatus(run_id, cfg, path, "corrupt", detail=str(exc)))
                continue
            if C.with_defaults(doc["config"]) != cfg.to_dict():
                out.append(RunStatus(run_id, cfg, path, "stale", doc, "config changed since this run"))
            elif doc["env"].get("fedcore_version") != __version__:
                out.append(RunStatus(run_id, cfg, path, "stale", doc,
                                     f"written by fedcore {doc['env'].get('fedcore_version')}"))
            else:
                out.append(RunStatus(run_id, cfg, path, "done", doc))
    return out


def set_aside(path: Path, why: str) -> Path:
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    aside = path.with_name(f"{path.name}.{why}-{stamp}")
    os.replace(path, aside)
    return aside


# A worker process's view of an interruption. The pool hands each worker its next cell before the last
# one ends, so after a signal a worker must also refuse the cells already handed to it. `drawing` counts
# the main thread's holds on the bar lock (`_BarLock`); `deferred` is an interrupt waiting for their end.
_worker = {"running": False, "stopping": False, "line": 0, "drawing": 0, "deferred": False}


def _on_signal_in_worker(signum, frame) -> None:
    first = not _worker["stopping"]  # a second signal (Ctrl-C, then the parent's forward) must not cut the checkpoint
    _worker["stopping"] = True
    if _worker["running"] and first:
        if _worker["drawing"]:
            _worker["deferred"] = True  # raised by _BarLock.release
        else:
            raise KeyboardInterrupt  # the cell in flight checkpoints and stops


class _BarLock:
    """The progress-bar lock the workers share, held safe from the interrupt above. tqdm takes its lock and
    releases it without try/finally (`refresh`), so a KeyboardInterrupt raised while a bar draws would keep
    the lock held for good, and the other workers' bars, their close() after the interrupt included, would
    wait on it forever. So while the main thread (the one signal handlers run in) holds the lock, or waits
    for it, its interrupt waits, and is raised once the lock is released."""

    def __init__(self, lock):
        self._lock = lock

    def acquire(self, *args, **kwargs) -> bool:
        counted = threading.current_thread() is threading.main_thread()
        _worker["drawing"] += counted  # before the acquire: an interrupt just after it must already wait
        got = False
        try:
            got = self._lock.acquire(*args, **kwargs)
        finally:
            if counted and not got:
                self._leave()
        return got

    def release(self) -> None:
        self._lock.release()
        if threading.current_thread() is threading.main_thread():
            self._leave()

    def _leave(self) -> None:
        _worker["drawing"] -= 1
        if not _worker["drawing"] and _worker["deferred"]:
            _worker["deferred"] = False
            raise KeyboardInterrupt

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _init_worker(next_line, write_lock) -> None:
    """Worker initializer: SIGINT/SIGTERM checkpoint and stop the cell in flight and skip the rest, and
    (Linux) a killed `reproduce` takes its workers along the same way instead of leaving them running.
    Each worker takes the next terminal line (`next_line`, a shared counter) for its runs' progress bars,
    and the workers share tqdm's `write_lock`, so that parallel bars stack instead of overwriting each other."""
    from tqdm.auto import tqdm

    with next_line.get_lock():
        _worker["line"] = next_line.value
        next_line.value += 1
    tqdm.set_lock(_BarLock(write_lock))
    signal.signal(signal.SIGINT, _on_signal_in_worker)
    signal.signal(signal.SIGTERM, _on_signal_in_worker)
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _run_one(cfg: RunConfig, path: str, device: str, threads: int, progress: bool,
             parallel_runs: int = 1, leader: Callable[[], C.GridLeader | None] | None = None) -> str | None:
    """Run one cell; None if it was skipped because the worker had been told to stop."""
    import torch

    from fedcore import experiment

    if _worker["stopping"]:
        return None
    if threads:
        torch.set_num_threads(threads)
    _worker["running"] = True
    try:
        experiment.run(cfg, Runtime(device=device, out=Path(path), checkpoint_every=CHECKPOINT_EVERY,
                                    resume=True, progress=progress, progress_line=_worker["line"],
                                    parallel_runs=parallel_runs, leader=leader))
    finally:
        _worker["running"] = False
    return path


def _copy_identical_runs(todo: list[RunStatus], results_dir: Path, log) -> list[RunStatus]:
    """Tables share cells (McMahan's Table 1 C = 0.1 cells are also cells of Tables 2 and 4): a run the store
    already holds for another table, with exactly this config and fedcore version, is copied, naming its
    source in `copied_from`, instead of being trained again. Returns the runs still to do."""
    if not todo:
        return todo
    wanted = {json.dumps(st.config.to_dict(), sort_keys=True): st for st in todo}
    copied = set()
    for path in sorted(results_dir.glob("*/*/*.json")):
        try:
            doc = results.load(path)
        except ConfigError:
            continue
        st = wanted.get(json.dumps(C.with_defaults(doc["config"]), sort_keys=True))
        if st is None or st.run_id in copied or doc["env"].get("fedcore_version") != __version__:
            continue
        doc.setdefault("copied_from", path.relative_to(results_dir).as_posix())
        results.write_json_atomic(st.path, doc)
        checkpoint.path_for(st.path).unlink(missing_ok=True)  # a cut-off run of it is superseded
        copied.add(st.run_id)
        log(f"{st.path}: the same run as {doc['copied_from']}, copied")
    return [st for st in todo if st.run_id not in copied]


def reproduce(name: str, scale: str, *, device: str = "auto", only: list[str] | None = None, jobs: int = 1,
              alongside: int = 0, lr_grid: tuple[float, ...] | None = None, results_dir: Path = RESULTS_DIR,
              experiments_dir: Path = experiments.EXPERIMENTS_DIR, log=print) -> experiments.Experiment:
    """Run the cells of experiment `name` at `scale` that have no current results, `jobs` at a time.
    `alongside`: runs outside this call that share the machine (other `reproduce` processes), added to
    `jobs` in each run's recorded parallel_runs, since sharing stretches wall times.
    A learning rate of a grid whose table counts rounds to its target ends once it can no longer need
    fewer rounds than the cell's best finished rate, whenever that rate finished (`cell_leader`): its results
    file names that rate."""
    exp = experiments.load(name, scale, experiments_dir, lr_grid=lr_grid)
    cells = [c for c in exp.cells if not only or c.name in only or c.setting in only]  # a setting: all its seeds
    if only and not cells:
        raise ConfigError(f"--only: no cell of {name} is named {', '.join(only)}; "
                          f"cells: {', '.join(c.name for c in exp.cells)}")
    todo, cell_of = [], {}
    for cell in cells:
        for st in inspect(exp, cell, results_dir):
            cell_of[st.run_id] = cell.name
            if st.status in ("corrupt", "stale"):
                log(f"{st.path}: {st.detail}; moved aside to {set_aside(st.path, st.status).name}")
            if st.status == "no-data":
                log(f"{exp.name}/{st.run_id}: {st.detail}")
            elif st.status != "done":
                todo.append(st)
    todo = _copy_identical_runs(todo, results_dir, log)

    # the leader of each cell's own grid, as the book scores it, even when --lr-grid chose the rates to run
    own = {c.name: c for c in (exp if lr_grid is None else experiments.load(name, scale, experiments_dir)).cells}

    def leader(st: RunStatus) -> Callable[[], C.GridLeader | None] | None:
        if not st.config.stop_at_target:
            return None
        return functools.partial(cell_leader, exp, own[cell_of[st.run_id]], results_dir)

    log(f"{exp.name} [{scale}]: {len(todo)} run(s) to do" + (f" ({exp.scale_note})" if exp.scale_note else ""))
    if jobs <= 1:
        try:
            for i, st in enumerate(todo, 1):
                log(f"[{i}/{len(todo)}] {st.run_id}")
                _run_one(st.config, str(st.path), device, 0, True, 1 + alongside, leader(st))
        except errors.RunInterrupted:
            raise errors.ReproduceInterrupted() from None
    else:
        threads = max(1, (os.cpu_count() or 1) // jobs)
        ctx = get_context("spawn")
        with ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init_worker,
                                 initargs=(ctx.Value("i", 0), ctx.RLock())) as pool:
            sharing = min(jobs, len(todo)) + alongside  # a pool with fewer cells than jobs runs fewer at once
            futures = [pool.submit(_run_one, st.config, str(st.path), device, threads, True, sharing, leader(st))
                       for st in todo]
            interrupted = False
            try:
                for i, f in enumerate(as_completed(futures), 1):  # as they finish: a long run hides no others
                    path = f.result()
                    if path is None:  # skipped: the workers alone were signalled
                        interrupted = True
                        break
                    log(f"[{i}/{len(todo)}] done {Path(path).stem}")
            except (KeyboardInterrupt, errors.RunInterrupted):
                interrupted = True
            if interrupted:
                # a signal to the parent alone (`kill PID`) reaches no worker: forward it, so the cells in flight
                # checkpoint and stop instead of running to the end inside the shutdown below
                for worker in active_children():
                    os.kill(worker.pid, signal.SIGTERM)
                pool.shutdown(wait=True, cancel_futures=True)  # the queued cells never start
                raise errors.ReproduceInterrupted()
    return exp


def best_run(exp: experiments.Experiment, statuses: list[RunStatus]) -> RunStatus | None:
    """McMahan's protocol for an lr grid: keep the learning rate with the best result."""
    done = [s for s in statuses if s.status == "done"]
    if not done:
        return None
    target = None if exp.metric == "final_acc" else f"{exp.targets[0]:g}"
    return max(done, key=lambda st: metrics.lr_grid_score(st.doc["summary"], target, exp.rule))


def grid_leader(exp: experiments.Experiment, statuses: list[RunStatus]) -> C.GridLeader | None:
    """The rate a cell's unfinished learning rates must beat: its best finished one, if it reached the
    table's target (a final-accuracy table has none: every rate runs to the end)."""
    best = best_run(exp, statuses)
    if best is None or exp.metric != "rounds_to_target":
        return None
    rounds = best.doc["summary"]["rounds_to_target"].get(f"{exp.targets[0]:g}", {}).get(exp.rule)
    return None if rounds is None else C.GridLeader(best.run_id, exp.targets[0], rounds)


_leaders: dict[tuple, tuple[tuple, C.GridLeader | None]] = {}  # cell -> (its results files' stamp, leader)


def cell_leader(exp: experiments.Experiment, cell: experiments.Cell, results_dir: Path) -> C.GridLeader | None:
    """`grid_leader` of `cell` as the store holds it now. A run asks before every round, so a rate ends as
    soon as another rate of its cell finishes ahead of it, even one running beside it (an accelerator runs a
    cell's rates side by side); the files are read again only when one of them has changed."""
    paths = [run_path(results_dir, exp, run_id) for run_id, _ in cell.variants()]
    stamp = tuple((p.name, s.st_mtime_ns, s.st_size) for p in paths if (s := _stat(p)) is not None)
    key = (exp.name, exp.scale, cell.name, str(results_dir))
    if key not in _leaders or _leaders[key][0] != stamp:
        _leaders[key] = (stamp, grid_leader(exp, inspect(exp, cell, results_dir)))
    return _leaders[key][1]


def _stat(path: Path) -> os.stat_result | None:
    try:
        return path.stat()
    except FileNotFoundError:
        return None


def listing(results_dir: Path = RESULTS_DIR, experiments_dir: Path = experiments.EXPERIMENTS_DIR) -> str:
    """Runs done per experiment and scale, then the runs cut off with a checkpoint that `reproduce` resumes."""
    lines = [f"{'experiment':<30}" + "".join(f"{s:>14}" for s in experiments.SCALES) + "  title"]
    in_flight = []
    for name in experiments.names(experiments_dir):
        counts, title = [], ""
        for scale in experiments.SCALES:
            exp = experiments.load(name, scale, experiments_dir)
            title = exp.title
            runs = [st for c in exp.cells for st in inspect(exp, c, results_dir)]
            counts.append(f"{sum(st.status == 'done' for st in runs)}/{len(runs)} done")
            in_flight += [c for st in runs if st.status != "done" and (c := checkpoint.path_for(st.path)).exists()]
        lines.append(f"{name:<30}" + "".join(f"{c:>14}" for c in counts) + f"  {title}")
    if in_flight:
        lines += ["", "checkpointed (the same `fedcore reproduce NAME --scale S` resumes them):"]
        lines += [f"  {c.relative_to(results_dir).as_posix()}: {checkpoint.describe(c)}" for c in in_flight]
    return "\n".join(lines)


def load_runs(name: str, scale: str, results_dir: Path = RESULTS_DIR) -> dict[str, dict]:
    """{cell name: results doc} for the cells that are done (the best learning rate where a grid ran)."""
    exp = experiments.load(name, scale)
    runs = {}
    for cell in exp.cells:
        best = best_run(exp, inspect(exp, cell, results_dir))
        if best is not None:
            runs[cell.name] = best.doc
    return runs


def ensure(name: str, scale: str, *, recompute: bool = False, device: str = "auto",
           results_dir: Path = RESULTS_DIR, log=print) -> tuple[experiments.Experiment, dict[str, dict]]:
    """What the book's notebooks call: the committed results of `name` at `scale`; cells that are missing
    (or all of them, with recompute=True) are run first. CIFAR-10 cells stay 'not run' offline.

    While the book itself is built (`make book` sets FEDBOOK_RENDER_ONLY=1) nothing is computed: a page
    shows what is committed and lists the rest as "not run", so a build never turns into hours of training.
    """
    exp = experiments.load(name, scale)
    if os.environ.get("FEDBOOK_RENDER_ONLY") == "1":
        return exp, load_runs(name, scale, results_dir)
    if recompute:
        for cell in exp.cells:
            for st in inspect(exp, cell, results_dir):
                if st.path.exists():
                    log(f"recompute: {st.path.name} moved aside to {set_aside(st.path, 'stale').name}")
    missing = [st for c in exp.cells for st in inspect(exp, c, results_dir) if st.status != "done"
               and st.status != "no-data"]
    if missing:
        reproduce(name, scale, device=device, results_dir=results_dir, log=log)
    return exp, load_runs(name, scale, results_dir)


def variant(name: str, scale: str, cell_name: str, *, device: str = "auto", out_dir: Path = RUNS_DIR,
            **overrides) -> dict:
    """Run one cell of an experiment with some settings changed (a notebook's beta/gamma/alpha parameters).

    Written under `out_dir` (not the committed store); reused when the same variant already ran.
    """
    from fedcore import experiment

    exp = experiments.load(name, scale, all_cells=True)
    cell = next((c for c in exp.cells if c.name == cell_name), None)
    if cell is None:
        raise ConfigError(f"{name} has no cell {cell_name!r} at scale {scale}")
    cfg = C.from_mapping({**cell.config.to_dict(), **overrides}, f"{name}/{cell_name}")
    path = out_dir / name / scale / f"{cell_name}-{experiment.config_hash(cfg)}.json"
    if path.exists():
        doc = results.load(path)
        if C.with_defaults(doc["config"]) == cfg.to_dict():
            return doc
    return experiment.run(cfg, Runtime(device=device, out=path, checkpoint_every=CHECKPOINT_EVERY, resume=True))


