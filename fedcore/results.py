"""Results files: one JSON per run, schema-versioned, written atomically.

    {"schema": "fedcore.results/1", "config": {...}, "env": {...},
     "rounds": [{"round", "test_acc", "test_loss", "train_loss", "wall_s", ...algorithm metrics}],
     "summary": {"final_acc", "best_acc", "rounds_to_target", "total_wall_s", ...}}

A run that two tables share is stored under each; the copy names its source in "copied_from"
(`fedcore reproduce` makes it).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import tempfile
from pathlib import Path

import torch

from fedcore.errors import ConfigError

SCHEMA = "fedcore.results/1"
REQUIRED = {"schema", "config", "env", "rounds", "summary"}
ROUND_KEYS = {"round", "test_acc", "test_loss", "train_loss", "wall_s"}
SUMMARY_KEYS = {"final_acc", "best_acc", "rounds_to_target", "total_wall_s"}
# What env records of each process that ran part of a resumed run, in env["segments"] (with its rounds and
# wall time); a run done in one go has one process, env itself.
SEGMENT_KEYS = ("git_commit", "device", "device_name", "torch_version", "torch_threads", "hostname", "start_time",
                "parallel_runs")


def git_commit() -> str:
    """The commit of the fedcore checkout ('+dirty' if code or configs have uncommitted changes), unless
    FEDCORE_GIT_COMMIT names it: a copy sent to the accelerator carries no history of its own, or a stale
    one; 'unknown' where neither is to be had."""
    if os.environ.get("FEDCORE_GIT_COMMIT"):
        return os.environ["FEDCORE_GIT_COMMIT"]
    here = Path(__file__).resolve().parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True,
                             check=True, timeout=10).stdout.strip()
        # results/ holds outputs, not code: writing them must not mark the next run's commit dirty
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", ":(top)",
                                ":(top,exclude)results"], cwd=here, capture_output=True, text=True,
                               timeout=10).stdout.strip()
        return sha + ("+dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "cpu"


def env_info(device: torch.device) -> dict:
    from fedcore import __version__
    import torchvision

    return {
        "fedcore_version": __version__,
        "git_commit": git_commit(),
        "torch_version": str(torch.__version__),  # a plain str: checkpoints hold it (weights_only)
        "torchvision_version": torchvision.__version__,
        "python_version": platform.python_version(),
        "device": str(device),
        "device_name": device_name(device),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu_count": torch.cuda.device_count(),
        "hostname": platform.node(),
        "start_time": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }


def write_atomic(path: Path, write) -> None:
    """Call write(tmp) on a temporary file beside `path`, then rename: a reader never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name + ".", suffix=".tmp")
    os.close(fd)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)  # mkstemp makes it private; results are meant to be read and shared
        os.replace(tmp, path)
    except BaseException:  # a Ctrl-C can land after the rename, when tmp is already gone
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: dict) -> None:
    """`obj` as indented JSON, written atomically."""
    def dump(tmp):
        with open(tmp, "w") as f:
            json.dump(obj, f, indent=1)
            f.write("\n")
    write_atomic(path, dump)


def check_writable(path: Path, flag: str = "--out") -> None:
    """Fail before a long run, not after it, when the results cannot be written."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path.parent, prefix=".write-test-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{flag}: cannot write {path} ({exc.strerror or exc})") from None


def validate(doc: dict, source: str = "results") -> None:
    """Raise ConfigError if `doc` is not a results file of this schema."""
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not REQUIRED <= set(doc):
        raise ConfigError(f"{source}: not a {SCHEMA} results file")
    missing = SUMMARY_KEYS - set(doc["summary"])
    missing |= {k for r in doc["rounds"] for k in ROUND_KEYS - set(r)}
    if missing:
        raise ConfigError(f"{source}: missing {', '.join(sorted(missing))}")


def load(path: Path) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"{path}: cannot read results ({exc})") from None
    validate(doc, str(path))
    return doc


# --- tidy tables and the standard plots the book's notebooks call ---------------------------------------

def producers(doc: dict) -> list[dict]:
    """The processes that ran a results file's rounds, in order: env itself for a run done in one go, one
    segment each for a run resumed from checkpoints (each may have run on another machine or commit)."""
    return doc["env"].get("segments") or [doc["env"]]


def _distinct(values) -> list:
    return list(dict.fromkeys(values))


def devices(doc: dict) -> list[str]:
    """The device names that ran a results file, in order, each once."""
    return _distinct(p["device_name"] for p in producers(doc))


def commits(doc: dict, width: int = 12) -> list[str]:
    """The commits (first `width` characters) that ran a results file, in order, each once."""
    return _distinct(p["git_commit"][:width] for p in producers(doc))


def parallel_runs(doc: dict) -> list:
    """How many runs shared the machine (1: it ran alone), per process that ran a results file, in order,
    each once ('not recorded' before commit 6772967)."""
    return _distinct(p.get("parallel_runs", "not recorded") for p in producers(doc))


def machines(doc: dict) -> str:
    """The machines that ran a results file: 'AMD EPYC (cpu)', or 'A (cuda:0) + B (cpu)' for a run resumed
    on another."""
    return " + ".join(_distinct(f"{p['device_name']} ({p['device']})" for p in producers(doc)))


def provenance(doc: dict) -> str:
    """One line saying what produced a results file: machines, torch, commits, wall time."""
    torch_versions = " + ".join(_distinct(p["torch_version"] for p in producers(doc)))
    return (f"{machines(doc)}, torch {torch_versions}, commit {' + '.join(commits(doc))}, "
            f"{doc['summary']['total_wall_s']:.0f} s")


def curves(runs: dict[str, dict]):
    """Long table (pandas) of every round of every run: label, round, accuracies, losses, N, E, steps."""
    import pandas as pd

    keys = ("test_acc", "test_acc_distributed", "test_loss", "train_loss", "N", "E", "server_step",
            "server_step_integral", "wall_s", "client_computations")
    return pd.DataFrame([{"run": label, "round": r["round"], **{k: r.get(k) for k in keys}}
                         for label, doc in runs.items() for r in doc["rounds"]], columns=["run", "round", *keys])


def group_curves(runs: dict[str, dict], level: str = "kinds"):
    """Long table of N, E and server step per layer ('layers') or per layer kind ('kinds')."""
    import pandas as pd

    return pd.DataFrame([{"run": label, "round": r["round"], "group": g, **v}
                         for label, doc in runs.items() for r in doc["rounds"] for g, v in r.get(level, {}).items()],
                        columns=["run", "round", "group", "N", "E", "step"])


def _legend_or_empty(ax, runs: dict, **legend_kw) -> None:
    if runs:
        ax.legend(**legend_kw)
    else:
        ax.text(0.5, 0.5, "no results at this scale yet", ha="center", va="center", transform=ax.transAxes)


def plot_accuracy(ax, runs: dict[str, dict], *, key: str = "test_acc", target: float | None = None,
                  paper_rounds: dict[str, float] | None = None, ylim=None,
                  colors: dict[str, str] | None = None) -> None:
    """Test accuracy vs round per run; the target as a grey line; the paper's rounds-to-target as markers.
    `colors` (label -> colour) keeps a run's colour across panels that show different subsets of runs."""
    last = max((r["round"] for d in runs.values() for r in d["rounds"]), default=1)
    beyond = []
    for label, doc in runs.items():
        pts = [(r["round"], r[key]) for r in doc["rounds"] if r.get(key) is not None]
        line, = ax.plot(*zip(*pts), label=label, lw=1.5, color=(colors or {}).get(label))
        paper = (paper_rounds or {}).get(label)
        if paper is not None and target is not None:
            if paper <= last:
                ax.plot(paper, target, marker="v", ms=9, color=line.get_color(), ls="none")
            else:  # beyond our last round: named at the right edge instead of stretching the axis
                beyond.append((label, paper, line.get_color()))
    for i, (label, paper, color) in enumerate(beyond):
        ax.annotate(f"paper: {paper:g} rounds \u2192", xy=(1, 0.04 + 0.07 * i), xycoords="axes fraction",
                    ha="right", fontsize=8, color=color)
    if target is not None:
        ax.axhline(target, color="grey", lw=0.8, ls="--")
    ax.set(xlabel="communication round", ylabel="test accuracy")
    if ylim:
        ax.set_ylim(*ylim)
    ax.grid(alpha=0.3)
    _legend_or_empty(ax, runs, fontsize=8)


def plot_norms(ax, runs: dict[str, dict], *, which=("N", "E"), log: bool = True, group: tuple | None = None,
               colors: dict[str, str] | None = None) -> None:
    """FedNNNN's NWDA: N = ||sum p_k Delta_k|| (solid) and E = sum p_k ||Delta_k|| (dashed) per round;
    `group=("kinds", "conv")` plots one layer kind or layer; `colors` as in plot_accuracy."""
    styles = {"N": "-", "E": "--", "server_step": ":", "step": ":"}
    for i, (label, doc) in enumerate(runs.items()):
        color = (colors or {}).get(label, f"C{i}")
        for name in which:
            pts = []
            for r in doc["rounds"][1:]:
                # per-group records call the server step "step"
                value = r[group[0]][group[1]]["step" if name == "server_step" else name] if group else r.get(name)
                if value is not None:
                    pts.append((r["round"], value))
            if pts:
                ax.plot(*zip(*pts), styles.get(name, "-"), color=color, label=f"{label} {name}", lw=1.3)
    if log:
        ax.set_yscale("log")
    ax.set(xlabel="communication round", ylabel="L2 norm")
    ax.grid(alpha=0.3, which="both")
    _legend_or_empty(ax, runs, fontsize=7, ncol=2)


def _plain_log_ticks(axis) -> None:
    """Label a log axis with plain numbers (20, 300), also where it spans less than a decade."""
    from matplotlib import ticker

    axis.set_major_formatter(ticker.LogFormatter())
    axis.set_minor_formatter(ticker.LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.5)))


def plot_ours_vs_paper(ax, boards: dict, *, what: str = "rounds to target") -> None:
    """One point per table cell: the paper's number (x) against ours (y), log axes, for scoreboard frames
    keyed by scale (marker: scale; colour: the cell name's first part, the data split). On the diagonal we
    match the paper, below it we need fewer rounds. A cell only one side reached sits on that axis's far
    edge as an open marker; cells not run are left out."""
    import math

    def number(v):
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) else None

    points = []  # (scale, split, paper, ours); None: not reached
    for scale, board in boards.items():
        for r in board.itertuples():
            paper, ours = number(r.paper), number(r.ours)
            paper_known = paper is not None or isinstance(r.paper, str)  # a string is the paper's "—"
            if r.status.startswith(("done", "partial")) and paper_known and (paper is not None or ours is not None):
                points.append((scale, r.cell.split("-")[0], paper, ours))
    values = [v for p in points for v in p[2:4] if v is not None]
    if not values:
        ax.text(0.5, 0.5, "no results yet", ha="center", va="center", transform=ax.transAxes)
        return
    lo, hi = min(values) / 1.5, max(values) * 1.5
    splits = sorted({p[1] for p in points})
    markers = dict(zip(boards, "osD^"))
    for scale, split, paper, ours in points:
        color = f"C{splits.index(split)}"
        x, y = (paper if paper is not None else hi), (ours if ours is not None else hi)
        filled = paper is not None and ours is not None
        ax.plot(x, y, markers[scale], ms=7, color=color, mfc=color if filled else "none", ls="none")
    for i, split in enumerate(splits):
        ax.plot([], [], "-", lw=5, color=f"C{i}", label=split)
    for scale in dict.fromkeys(p[0] for p in points):
        ax.plot([], [], markers[scale], color="0.3", mfc="none", label=f"{scale} scale")
    ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, ls="--")
    ax.set(xscale="log", yscale="log", xlim=(lo, hi * 1.1), ylim=(lo, hi * 1.1),
           xlabel=f"paper: {what} (right edge: not reached)", ylabel=f"ours: {what} (top edge: not reached)")
    _plain_log_ticks(ax.xaxis)
    _plain_log_ticks(ax.yaxis)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)


def plot_seed_spread(ax, per_seed, paper=None, *, ran=None, what: str, log: bool = False) -> None:
    """A seed study at a glance: one column of dots per row of `per_seed` (index: labels, columns: seeds;
    NaN: that seed has no number), seed 0 ringed (it is the run our tables show), a bar at the median, and
    the paper's one number (`paper`, aligned with the index; None or a string: no number) as a red cross.
    `ran` (same shape, True where a seed's run exists; None: all ran) leaves out rows without runs; the seeds
    that ran but have no number are counted under their column as not reached."""
    import math
    import numbers
    import statistics

    import pandas as pd

    ran = pd.DataFrame(True, index=per_seed.index, columns=per_seed.columns) if ran is None else ran
    keep = ran.any(axis=1).to_numpy()
    per_seed, ran = per_seed[keep], ran[keep]
    paper = None if paper is None else paper[keep]
    labels = [" ".join(map(str, key)) if isinstance(key, tuple) else str(key) for key in per_seed.index]
    half = 0.25  # half the width of a column of dots
    shown = 0  # points drawn
    for i, ((_, values), (_, has_run)) in enumerate(zip(per_seed.iterrows(), ran.iterrows())):
        seeds = [(seed, float(v)) for seed, v in values.items() if v == v]  # NaN != NaN: no number
        shown += len(seeds)
        xs = [i + half * (2 * k / max(len(seeds) - 1, 1) - 1) for k in range(len(seeds))]
        ax.plot(xs, [v for _, v in seeds], "o", color="C0", alpha=0.7, ms=5, label="ours, one seed each")
        ax.plot([x for x, (seed, _) in zip(xs, seeds) if seed == 0], [v for seed, v in seeds if seed == 0], "o",
                ms=10, mfc="none", color="C1", label="seed 0 (the run our tables show)")
        if seeds:
            median = statistics.median(v for _, v in seeds)
            ax.plot([i - 1.3 * half, i + 1.3 * half], [median, median], color="C0", lw=2, label="median over seeds")
        if len(seeds) < has_run.sum():
            ax.annotate(f"{has_run.sum() - len(seeds)} of {has_run.sum()}\nnot reached", (i, 0),
                        xycoords=("data", "axes fraction"), xytext=(0, 4), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7)
        value = None if paper is None else paper.iloc[i]
        if isinstance(value, numbers.Real) and math.isfinite(value):  # numbers.Real: numpy's numbers too
            ax.plot(i, value, "X", color="C3", ms=9, label="paper (one run)")
            shown += 1
    long = max(map(len, labels), default=0) > 12
    ax.set_xticks(range(len(labels)), labels, fontsize=8, rotation=30 if long else 0, ha="right" if long else "center")
    ax.set(xlim=(-0.6, len(labels) - 0.4), ylabel=what)
    if not shown:
        ax.text(0.5, 0.5, "no numbers yet", ha="center", va="center", transform=ax.transAxes)
        return
    if log:
        ax.set_yscale("log")
        _plain_log_ticks(ax.yaxis)
    ax.grid(alpha=0.3, axis="y", which="both")
    handles, names = ax.get_legend_handles_labels()
    unique = dict(zip(names, handles))  # every column labels its artists; the legend lists each once
    ax.legend(unique.values(), unique.keys(), fontsize=8)


def plot_class_counts(ax, counts, title: str) -> None:
    """Examples per (client, class) as an image: McMahan's IID vs pathological non-IID split at a glance."""
    im = ax.imshow(counts.T.numpy(), aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set(xlabel="client", ylabel="class", title=title, yticks=range(counts.shape[1]))
    ax.figure.colorbar(im, ax=ax, label="examples")


def stamp(fig, runs: dict[str, dict], scale: str) -> None:
    """Print under a figure which scale and hardware produced it, so a saved image keeps its provenance."""
    names = sorted({n for d in runs.values() for n in devices(d)}) or ["no results yet"]
    shas = sorted({c for d in runs.values() for c in commits(d, 7)})
    fig.text(0.005, 0.002, f"fedbook - scale: {scale} - {', '.join(names)}"
             + (f" - commit {', '.join(shas)}" if shas else ""), fontsize=7, color="0.4", va="bottom")
