"""Paper vs ours: a paper table's scoreboard from the results store (paper value, ours, difference, scale,
status, and the run behind our number), the tables and cost summaries built on it, and `show`, what the
book's pages call to fetch an experiment and display its scoreboard.
"""

from __future__ import annotations

from pathlib import Path

from fedcore import checkpoint, data, experiments, metrics, reproduce, results
from fedcore.errors import ConfigError


def _cell_value(exp: experiments.Experiment, doc: dict, key: str):
    """Our number for one paper column: rounds to `key` (a target) under the paper's rule, or accuracy."""
    if key == "acc":
        return doc["summary"]["final_acc"]
    return doc["summary"]["rounds_to_target"].get(key, {}).get(exp.rule)


def _cannot_change(exp: experiments.Experiment, best: reproduce.RunStatus, statuses: list) -> str:
    """"; final for this grid, ..." when no unfinished learning rate can beat the best any more: each is
    checkpointed below the target at an evaluation past the best's rounds (`metrics.cannot_beat`), so
    running it on cannot change our number (resumed, `reproduce` ends it there)."""
    leader = reproduce.grid_leader(exp, statuses)
    if leader is None:
        return ""
    behind = []
    for st in statuses:
        if st.status == "done":
            continue
        ckpt = checkpoint.path_for(st.path)
        try:
            evals = checkpoint.evaluations(ckpt) if ckpt.exists() else []  # none: not started
        except ConfigError:  # a checkpoint that cannot be read says nothing about the run
            evals = []
        if not metrics.cannot_beat(evals, leader.target, leader.rounds):
            return ""
        behind.append(f"lr {st.config.lr:g} (checkpointed) is below {100 * leader.target:g}% in round "
                      f"{evals[-1][0]}")
    return (f"; final for this grid, since {' and '.join(behind)}, past lr {best.config.lr:g}'s "
            f"{round(leader.rounds, 2):g} rounds")


def compare(exp: experiments.Experiment, results_dir: Path = reproduce.RESULTS_DIR) -> list[dict]:
    """One row per (cell, paper column): paper value, ours, difference, scale, status, chosen run."""
    rows = []
    for cell in exp.cells:
        statuses = reproduce.inspect(exp, cell, results_dir)
        best = reproduce.best_run(exp, statuses)
        done = sum(s.status == "done" for s in statuses)
        # read the unfinished rates' checkpoints once per cell, not once per column
        final = "" if best is None or done == len(statuses) else _cannot_change(exp, best, statuses)
        for key in exp.columns:
            paper = exp.published.get(cell.name, {}).get(key)
            ours = None if best is None else _cell_value(exp, best.doc, key)
            if key == "acc" and ours is not None:
                ours = round(100 * ours, 2)  # the papers print accuracy in percent
            if best is None:
                in_progress = [checkpoint.describe(c, brief=True) for s in statuses
                               if (c := checkpoint.path_for(s.path)).exists()]
                status = (f"in progress: {', '.join(in_progress)} (checkpointed)" if in_progress else
                          next((s.detail for s in statuses if s.status == "no-data"), "not run"))
            else:
                # a learning-rate grid not yet run to the end: our number is the best so far, and says so
                status = ("done" if done == len(statuses) else
                          f"partial: {done} of {len(statuses)} learning rates{final}")
                if ours is None and key != "acc":
                    summary = best.doc["summary"]
                    status += (f": not reached, diverged (NaN weights) in round {summary['diverged_at_round']}"
                               if summary.get("diverged_at_round") else
                               f": not reached in {summary['rounds_completed']} rounds")
                grid = sorted(st.config.lr for st in statuses)
                if (done == len(grid) or final) and len(grid) > 2 and best.config.lr in (grid[0], grid[-1]):
                    # McMahan et al. checked that each best rate lay inside its grid; a cell that fails it says so
                    status += f"; best lr {best.config.lr:g} at the grid's edge"
            rows.append({
                "experiment": exp.name, "cell": cell.name, "setting": cell.setting, "seed": cell.config.seed,
                "column": key, "paper": paper,
                "ours": None if ours is None else round(ours, 2),
                "diff": None if ours is None or not isinstance(paper, (int, float)) else round(ours - paper, 2),
                "scale": exp.scale, "status": status,
                "run": None if best is None else best.run_id,
                "device": None if best is None else " + ".join(results.devices(best.doc)),
                "wall_s": None if best is None else round(best.doc["summary"]["total_wall_s"]),  # whole seconds
                "commit": None if best is None else " + ".join(results.commits(best.doc)),
            })
    # The paper's cells that this scale leaves out (its note says why) are listed too: a table stays whole.
    for cell in exp.omitted:
        rows += [{"experiment": exp.name, "cell": cell, "setting": cell, "seed": None, "column": key,
                  "paper": exp.published.get(cell, {}).get(key), "ours": None, "diff": None, "scale": exp.scale,
                  "status": f"not in the {exp.scale} scale", "run": None, "device": None, "wall_s": None,
                  "commit": None} for key in exp.columns]
    return rows


def format_text(exp: experiments.Experiment, rows: list[dict]) -> str:
    unit = "accuracy %" if exp.metric == "final_acc" else f"rounds ({exp.rule} rule)"
    lines = [f"{exp.title} - {exp.reference}", f"scale: {exp.scale} ({exp.scale_note}); values: {unit}",
             f"{'cell':<28}{'column':>8}{'paper':>9}{'ours':>9}{'diff':>9}  status"]
    fmt = lambda v: "-" if v is None else (v if isinstance(v, str) else f"{v:g}")  # noqa: E731
    for r in rows:
        lines.append(f"{r['cell']:<28}{r['column']:>8}{fmt(r['paper']):>9}{fmt(r['ours']):>9}"
                     f"{fmt(r['diff']):>9}  {r['status']}")
    if exp.seeds:
        lines += ["", "over the seeds (seeds: with a run; with_number: of those, with a number):",
                  seed_spread(exp, rows).to_string()]
    if exp.layout:
        lines += ["", "as the paper prints it: rounds (speedup over the baseline row of the column):",
                  speedup_table(exp, rows).to_string()]
    return "\n".join(lines)


def frame(exp: experiments.Experiment, rows: list[dict] | None = None):
    """The scoreboard as a pandas table: cell, column, paper, ours, diff, status."""
    import pandas as pd

    rows = compare(exp) if rows is None else rows
    return pd.DataFrame(rows, columns=["cell", "column", "paper", "ours", "diff", "status"])


def method_table(exp: experiments.Experiment, rows: list[dict] | None = None):
    """The scoreboard of a table whose cells are named "<setting>-<method>" (FedNNNN Table 2, the FedUmf
    tables) with a column per method: rows (setting, paper column), columns (paper | ours, method), both in
    the experiment's order; NaN where the paper printed no number or we have none (not run, or not reached)."""
    import pandas as pd

    board = frame(exp, rows)
    board[["setting", "method"]] = board["cell"].str.rsplit("-", n=1, expand=True)
    wide = board.pivot(index=["setting", "column"], columns="method", values=["paper", "ours"])
    wide = wide.apply(pd.to_numeric, errors="coerce")
    order = pd.MultiIndex.from_frame(board[["setting", "column"]].drop_duplicates())
    methods = list(dict.fromkeys(board["method"]))
    return wide.reindex(index=order, columns=pd.MultiIndex.from_product([["paper", "ours"], methods]))


def differences(exp: experiments.Experiment, baseline: str = "fedavg", rows: list[dict] | None = None):
    """Each method of method_table(exp) minus `baseline`, paper and ours side by side: the papers' claims are
    such differences (accuracy points gained over FedAvg, rounds saved against it) more than the numbers."""
    import pandas as pd

    table = method_table(exp, rows)
    methods = [m for m in table["ours"].columns if m != baseline]
    return pd.concat({m: table.xs(m, axis=1, level=1) - table.xs(baseline, axis=1, level=1) for m in methods},
                     axis=1)


LAYOUT_SYMBOLS = {"fraction": "C", "local_epochs": "E", "batch_size": "B", "partition": "split"}
_SPEEDUP_VALUES = ["paper", "paper speedup", "ours", "ours speedup"]


def _layout_frame(exp: experiments.Experiment, rows: list[dict] | None):
    """One row per cell of a table with a [layout]: its place (the layout's fields), paper and ours (rounds to
    the first target, NaN without a number), the speedup of each over the baseline row of its column, the
    paper's printed value and our status."""
    import pandas as pd

    layout = exp.layout
    if layout is None:
        raise ConfigError(f"{exp.name}: its experiment file has no [layout] (the paper's printed grid)")
    rows = compare(exp) if rows is None else rows
    key = exp.columns[0]
    found = {r["setting"]: r for r in rows if r["column"] == key}
    places = list(layout.rows + layout.columns)
    records = []
    for cell, cfg in layout.configs.items():
        r = found.get(cell, {})
        records.append({**{f: getattr(cfg, f) for f in places}, "printed": r.get("paper"), "ours": r.get("ours"),
                        "status": r.get("status", "not run")})
    table = pd.DataFrame(records)
    table["paper"] = pd.to_numeric(table["printed"], errors="coerce")  # the paper's "—": no number
    table["ours"] = pd.to_numeric(table["ours"], errors="coerce")
    is_base = pd.concat([table[f] == v for f, v in layout.baseline.items()], axis=1).all(axis=1)
    base = table[is_base].set_index(list(layout.columns))[["paper", "ours"]].add_suffix("_base")
    with_base = table.join(base, on=list(layout.columns))
    for who in ("paper", "ours"):  # speedup = baseline rounds / rounds (facts sec. 1.5); none on the baseline row
        table[f"{who} speedup"] = (with_base[f"{who}_base"] / with_base[who]).where(~is_base)
    if {"local_epochs", "batch_size"} <= set(layout.rows):  # u = E n / (K B), the expected local updates per round
        per_client = [(cfg.train_subset or data.TRAIN_SIZES[cfg.dataset]) / cfg.clients
                      for cfg in layout.configs.values()]
        table["u"] = [_plain(e if b == 0 else round(e * n / b, 1))
                      for e, b, n in zip(table["local_epochs"], table["batch_size"], per_client)]
    table["batch_size"] = [_setting("batch_size", b) for b in table["batch_size"]]
    return table


def _setting(field: str, value):
    """A setting as the papers print it: B = 0 (the whole local dataset) is B = ∞."""
    return "∞" if field == "batch_size" and value == 0 else value


def _plain(value: float):
    return int(value) if value == int(value) else value


def _pivot(exp: experiments.Experiment, table, values: list[str]):
    """The long table as the paper's grid, rows and columns in the experiment's order."""
    layout = exp.layout
    index = list(layout.rows) + (["u"] if "u" in table else [])
    columns = list(layout.columns)
    wide = table.pivot(index=index, columns=columns, values=values)
    wide = wide.reorder_levels([*range(1, len(columns) + 1), 0], axis=1)
    order_rows = list(dict.fromkeys(map(tuple, table[index].to_numpy().tolist())))
    order_cols = [(*c, v) for c in dict.fromkeys(map(tuple, table[columns].to_numpy().tolist())) for v in values]
    wide = wide.reindex(index=order_rows if len(index) > 1 else [r[0] for r in order_rows],
                        columns=order_cols)
    wide.index.names = [LAYOUT_SYMBOLS.get(f, f) for f in index]
    wide.columns.names = [LAYOUT_SYMBOLS.get(f, f) for f in columns] + [None]
    return wide


def speedups(exp: experiments.Experiment, rows: list[dict] | None = None):
    """A rounds-to-target table (one with a [layout]) in the paper's printed grid: per column, paper and ours,
    the rounds to the first target and the speedup over the baseline row of that column (McMahan et al.:
    over C = 0 in Table 1, over FedSGD in Tables 2 and 4); NaN where there is no number. Rows of E and B
    also carry u = E n / (K B), by which the paper orders them."""
    return _pivot(exp, _layout_frame(exp, rows), _SPEEDUP_VALUES).apply(lambda c: c.astype(float))


def _rounds(value: float) -> str:
    return f"{value:.0f}" if value >= 100 or value == int(value) else f"{value:.1f}"


def speedup_table(exp: experiments.Experiment, rows: list[dict] | None = None):
    """speedups() printed as the paper prints it, "rounds (speedup×)", paper beside ours in every column. The
    paper's "—" (not reached) stays "—"; ours without a number says why: "not reached" (within our round
    limit), "not run" or "not in this scale"; "*" marks the best of a partly run learning-rate grid."""
    table = _layout_frame(exp, rows)

    def entry(rounds, speedup) -> str:
        return _rounds(rounds) + (f" ({speedup:.1f}×)" if speedup == speedup else "")  # NaN != NaN

    def paper(r) -> str:
        if r["paper"] == r["paper"]:
            return entry(r["paper"], r["paper speedup"])
        return r["printed"] if isinstance(r["printed"], str) else ""  # the paper's "—", or no value at all

    def ours(r) -> str:
        partial = " *" if r["status"].startswith("partial") else ""
        if r["ours"] == r["ours"]:
            return entry(r["ours"], r["ours speedup"]) + partial
        if r["status"].startswith(("done", "partial")):
            return "not reached" + partial
        return "not in this scale" if r["status"].startswith("not in the") else "not run"

    table["paper"], table["ours"] = table.apply(paper, axis=1), table.apply(ours, axis=1)
    return _pivot(exp, table, ["paper", "ours"])


def show_speedups(name: str, scale: str) -> None:
    """For notebooks: speedup_table of experiment `name` at `scale`, then at paper scale once any of its
    paper-scale runs are committed (as `show` does for the per-cell tables)."""
    from IPython.display import Markdown, display

    for s in scales_to_show([name], scale):
        exp = experiments.load(name, s)
        baseline = ", ".join(f"{LAYOUT_SYMBOLS.get(f, f)} = {_setting(f, v)}" for f, v in exp.layout.baseline.items())
        display(Markdown(f"**{exp.reference} as the paper prints it, {s} scale:** rounds to "
                         f"{float(exp.columns[0]):.0%} (speedup over {baseline} in the same column)  \n"
                         f"<small>* the best of a partly run learning-rate grid; \"not reached\": not within "
                         f"our round limit; the paper's \"—\": not within its own</small>"))
        display(speedup_table(exp))


def seed_table(exp: experiments.Experiment, rows: list[dict] | None = None, values: str = "ours"):
    """A seed study (an experiment with `seeds`) as rows (setting, paper column) by columns (the seeds) of
    `values`, a scoreboard field: "ours" (NaN where a seed's run is missing or did not reach the target) or
    "run" (the run's id, None where there is no run). The settings this scale leaves out are all-NaN rows."""
    import pandas as pd

    board = pd.DataFrame(compare(exp) if rows is None else rows)
    order = pd.MultiIndex.from_frame(board[["setting", "column"]].drop_duplicates())
    board = board[board["seed"].notna()].astype({"seed": int})
    table = board.pivot(index=["setting", "column"], columns="seed", values=values)
    return (table.apply(pd.to_numeric) if values == "ours" else table).reindex(index=order)


def spread(per_seed, ran=None):
    """Summary of a table with one column per seed (seed_table, or differences of its rows): `seeds`, how many
    seeds ran (`ran`: a table of the same shape, True where a seed's run exists; None: every column ran), and
    `with_number`, how many of them have a number (the rest did not reach the target); then its min, median,
    max and max/min over the seeds with a number."""
    import pandas as pd

    values = per_seed.apply(pd.to_numeric)
    summary = pd.DataFrame({"seeds": values.shape[1] if ran is None else ran.sum(axis=1),
                            "with_number": values.notna().sum(axis=1),
                            "min": values.min(axis=1), "median": values.median(axis=1), "max": values.max(axis=1)})
    summary["max/min"] = (summary["max"] / summary["min"]).where(summary["min"] > 0)
    return summary.round(2)


def _paper_by_setting(rows: list[dict], index) -> list:
    """The paper's one number for each (setting, column) of `index` (every seed of a setting has the same)."""
    paper = {(r["setting"], r["column"]): r["paper"] for r in rows}
    return [paper.get(key) for key in index]


def seed_spread(exp: experiments.Experiment, rows: list[dict] | None = None):
    """spread() of seed_table(exp), with the paper's one number for each setting beside it."""
    rows = compare(exp) if rows is None else rows
    summary = spread(seed_table(exp, rows), seed_table(exp, rows, "run").notna())
    summary.insert(0, "paper", _paper_by_setting(rows, summary.index))
    return summary


def seed_differences(exp: experiments.Experiment, baseline: str = "fedavg", rows: list[dict] | None = None):
    """differences() for a seed study whose settings are named "<setting>-<method>": each method minus
    `baseline` per seed (a paired comparison: the same seed draws the same split, initial model and client
    samples for both). Returns three tables with rows (method, setting, column): the differences per seed
    (columns: seeds), whether both runs of a seed exist (for spread), and the paper's difference (NaN where
    it printed no number)."""
    import pandas as pd

    rows = compare(exp) if rows is None else rows
    ours, ran = seed_table(exp, rows), seed_table(exp, rows, "run").notna()
    paper = pd.to_numeric(pd.Series(_paper_by_setting(rows, ours.index), index=ours.index), errors="coerce")
    names = ours.index.get_level_values("setting").str.rsplit("-", n=1)
    index = pd.MultiIndex.from_arrays([names.str[0], names.str[1], ours.index.get_level_values("column")],
                                      names=["setting", "method", "column"])
    ours, ran, paper = (t.set_axis(index) for t in (ours, ran, paper))
    methods = [m for m in dict.fromkeys(index.get_level_values("method")) if m != baseline]

    def minus_baseline(t, combine):
        base = t.xs(baseline, level="method")
        return pd.concat({m: combine(t.xs(m, level="method"), base) for m in methods}, names=["method"])

    return (minus_baseline(ours, lambda a, b: a - b), minus_baseline(ran, lambda a, b: a & b),
            minus_baseline(paper, lambda a, b: a - b))


def wall_times(names, scale: str = "paper", results_dir: Path = reproduce.RESULTS_DIR,
               experiments_dir: Path = experiments.EXPERIMENTS_DIR):
    """What the committed runs at `scale` cost, per experiment and machine, from their results files: every
    run counts (each learning rate of a grid, the cells it did not pick too), a copy of another table's run
    does not. `parallel` is how many runs shared the machine (recorded since commit 6772967; '1 + 2' for a run
    resumed beside another), which stretches each one's wall time; `paper` is the paper's own time, where it
    gives one."""
    import pandas as pd

    rows, paper = [], {}
    for name in names:
        exp = experiments.load(name, scale, experiments_dir)
        paper[name] = exp.published_wall_time
        for cell in exp.cells:
            for st in reproduce.inspect(exp, cell, results_dir):
                if st.status == "done" and "copied_from" not in st.doc:
                    rows.append({"experiment": name, "device": " + ".join(results.devices(st.doc)),
                                 "parallel": " + ".join(map(str, results.parallel_runs(st.doc))),
                                 "wall_s": st.doc["summary"]["total_wall_s"],
                                 "rounds": st.doc["summary"]["rounds_completed"]})
    runs = pd.DataFrame(rows, columns=["experiment", "device", "parallel", "wall_s", "rounds"])
    table = runs.groupby(["experiment", "device", "parallel"]).agg(
        runs=("wall_s", "size"), rounds=("rounds", "sum"), median_s=("wall_s", "median"),
        max_s=("wall_s", "max"), total_s=("wall_s", "sum"))
    table["total_h"] = table["total_s"] / 3600
    table["s_per_round"] = table.pop("total_s") / table["rounds"]
    table["paper"] = [paper[name] for name in table.index.get_level_values("experiment")]
    return table.round({"median_s": 1, "max_s": 1, "total_h": 2, "s_per_round": 3})


def caption(exp: experiments.Experiment, runs: dict[str, dict]) -> str:
    """What produced a table or figure: scale, what the scale reduced, hardware and commit."""
    produced = sorted({results.machines(d) for d in runs.values()})
    commits = sorted({c for d in runs.values() for c in results.commits(d)})
    return (f"{exp.reference} | scale: {exp.scale} ({exp.scale_note}) | "
            + (f"run on {'; '.join(produced)}, commit {', '.join(commits)}" if runs else "no results yet"))


def scales_to_show(names, scale: str) -> list[str]:
    """A page's own scale, then `paper` once any of the experiments `names` has paper-scale runs committed:
    those arrive a few cells at a time (accelerator leases), and a page shows them as soon as they exist."""
    committed = any(any((reproduce.RESULTS_DIR / n / "paper").glob("*.json")) for n in names)  # not read
    return [scale] + (["paper"] if scale != "paper" and committed else [])


def for_display(table):
    """A table as a page shows it: where a value is missing (the paper printed none; ours has none, and the
    status column says why) the cell is blank, instead of pandas' None or NaN, which read like a bug."""
    return table.astype(object).where(table.notna(), "")


def runs_per_scale(name: str, scale: str, page_runs: dict[str, dict]) -> dict[str, dict[str, dict]]:
    """The runs of experiment `name` for each scale a page shows (`scales_to_show`): the page's own
    (`page_runs`, already loaded at `scale`, with any run the reader added) and the committed paper-scale ones."""
    return {s: page_runs if s == scale else reproduce.load_runs(name, s) for s in scales_to_show([name], scale)}


def figure_runs(name: str, scale: str, page_runs: dict[str, dict]) -> tuple[str, dict[str, dict]]:
    """What a page's one figure of experiment `name` draws: its paper-scale runs once any are committed, else the
    page's own (`page_runs`, already loaded at `scale`). Returns (that scale, its runs)."""
    return list(runs_per_scale(name, scale, page_runs).items())[-1]


def page_table(exp: experiments.Experiment):
    """What a page shows of an experiment: the paper-vs-ours frame; for a seed study, its seed_spread."""
    return seed_spread(exp) if exp.seeds else for_display(frame(exp))


def show(name: str, scale: str, *, recompute: bool = False, device: str = "auto"):
    """For notebooks: fetch `name` at `scale` (see ensure) and display its title, provenance and table (the
    paper's cells this scale leaves out included), then the same at paper scale once any of its paper-scale runs
    are committed. Returns (experiment, {cell: results doc}) at `scale`."""
    import pandas as pd
    from IPython.display import Markdown, display

    exp, runs = reproduce.ensure(name, scale, recompute=recompute, device=device, log=lambda *a: None)
    with pd.option_context("display.max_colwidth", None):  # a status says why in full, not cut at 50 characters
        display(Markdown(f"**{exp.title}**  \n<small>{caption(exp, runs)}</small>"))
        display(page_table(exp))
        if scales_to_show([name], scale)[1:]:
            paper_exp, paper_runs = experiments.load(name, "paper"), reproduce.load_runs(name, "paper")
            display(Markdown(f"**The same table at paper scale, {len(paper_runs)} of {len(paper_exp.cells)} "
                             f"cells run so far**  \n<small>{caption(paper_exp, paper_runs)}</small>"))
            display(page_table(paper_exp))
    return exp, runs
