"""Experiments as data: one TOML file per paper table or figure in experiments/, plus the papers'
published numbers in experiments/published.toml (the one place the book and scoreboard read them from).

An experiment file holds
    title, reference, metric ("rounds_to_target" or "final_acc"), rule, targets,
    final_acc_column (true: also compare final accuracy, as a column "acc", beside rounds to target)
    seeds             optional list (also per scale): every cell runs once per seed, as cells "<name>-seed<s>"
    [base]            RunConfig fields shared by every cell (the paper's settings)
    [scales.<s>]      overrides of [base] per scale (paper / cpu / smoke), with a `note` saying what was
                      reduced, optionally `cells = [...]` (run only these) and `lr_grid = [...]`
    [[cells]]         name + RunConfig overrides (+ optional lr_grid = [...]); they win over the scale
    [choices]         settings the paper leaves open: value and reason, written beside the config
    [layout]          optional: the table as the paper prints it (McMahan's Tables 1, 2 and 4), see Layout
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from fedcore import config as C
from fedcore.errors import ConfigError

EXPERIMENTS_DIR = Path(__file__).resolve().parent.parent / "experiments"
SCALES = ("paper", "cpu", "smoke")
METRICS = ("rounds_to_target", "final_acc")


@dataclass(frozen=True)
class Cell:
    experiment: str
    name: str
    config: C.RunConfig
    lr_grid: tuple[float, ...] = ()  # McMahan's protocol: run each lr, keep the best
    setting: str = ""  # the [[cells]] entry this cell comes from: its name, or its name before "-seed<s>"

    def variants(self) -> list[tuple[str, C.RunConfig]]:
        """(run id, config) for each learning rate this cell runs."""
        if not self.lr_grid:
            return [(self.name, self.config)]
        return [(f"{self.name}--lr{lr:g}", C.from_mapping({**self.config.to_dict(), "lr": lr}, self.name))
                for lr in self.lr_grid]


@dataclass(frozen=True)
class Layout:
    """Where each cell sits in the paper's printed table, and which row its speedup is measured against.

    McMahan et al. print rounds-to-target as a grid (Table 1: rows C, columns split and B; Tables 2 and 4:
    rows E and B, columns split), each entry with its speedup over the baseline row of the same column.
    """

    rows: tuple[str, ...]  # RunConfig fields that name a row, e.g. ("local_epochs", "batch_size")
    columns: tuple[str, ...]  # RunConfig fields that name a column, e.g. ("partition",)
    baseline: dict  # the baseline row's values, e.g. {"local_epochs": 1, "batch_size": 0}: FedSGD
    configs: dict  # every [[cells]] entry (those this scale leaves out too) -> its RunConfig at this scale


@dataclass(frozen=True)
class Experiment:
    name: str
    title: str
    reference: str
    metric: str
    rule: str
    targets: tuple[float, ...]
    scale: str
    scale_note: str
    cells: tuple[Cell, ...]
    choices: dict = field(default_factory=dict)
    published: dict = field(default_factory=dict)  # cell name -> {target or "acc": value or None}
    final_acc_column: bool = False
    omitted: tuple[str, ...] = ()  # the paper's cells this scale does not run (its note says why)
    published_wall_time: str = ""  # the paper's own compute time for a run, where it reports one
    seeds: tuple[int, ...] = ()  # a seed study's seeds (each [[cells]] entry runs once per seed); () otherwise
    layout: Layout | None = None  # the paper's printed layout of the table, where the file gives one

    @property
    def columns(self) -> list[str]:
        """The paper's columns for each cell: one per target (rounds), and/or "acc" (final accuracy %)."""
        rounds = [f"{t:g}" for t in self.targets] if self.metric == "rounds_to_target" else []
        return rounds + (["acc"] if self.metric == "final_acc" or self.final_acc_column else [])


def _read_toml(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML ({exc})") from None


def names(directory: Path = EXPERIMENTS_DIR) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.toml") if p.stem != "published")


def published(directory: Path = EXPERIMENTS_DIR) -> dict:
    return _read_toml(directory / "published.toml")


def load(name: str, scale: str, directory: Path = EXPERIMENTS_DIR, *, all_cells: bool = False,
         lr_grid: tuple[float, ...] | None = None) -> Experiment:
    """Experiment `name` at `scale`; all_cells=True ignores the scale's `cells` selection (for variants);
    lr_grid replaces every cell's learning-rate grid (--lr-grid)."""
    if scale not in SCALES:
        raise ConfigError(f"--scale must be one of {', '.join(SCALES)}; got {scale!r}")
    path = directory / f"{name}.toml"
    if not path.exists():
        raise ConfigError(f"unknown experiment {name!r}; known: {', '.join(names(directory))}")
    doc = _read_toml(path)
    if doc.get("metric") not in METRICS:
        raise ConfigError(f"{path}: metric must be one of {', '.join(METRICS)}")
    scale_doc = dict(doc.get("scales", {}).get(scale, {}))
    note = scale_doc.pop("note", "the paper's settings" if scale == "paper" else "")
    only = scale_doc.pop("cells", None)
    if all_cells:
        only = None
    scale_lr_grid = scale_doc.pop("lr_grid", None)
    if lr_grid is not None:
        scale_lr_grid = tuple(lr_grid)
    seeds = scale_doc.pop("seeds", doc.get("seeds"))
    if seeds is not None and (not isinstance(seeds, list) or not seeds
                              or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds)):
        raise ConfigError(f"{path}: seeds must be a non-empty list of integers; got {seeds!r}")
    table = published(directory).get(doc.get("published", name), {})
    paper_cells = dict(table.get("cells", {}))
    cells, omitted, configs = [], [], {}
    for entry in doc["cells"]:
        entry = dict(entry)
        cell_name, lr_grid = entry.pop("name"), tuple(entry.pop("lr_grid", ()))
        values = {**doc.get("base", {}), **scale_doc, **entry}  # a cell's own settings define it at every scale
        if "layout" in doc:
            configs[cell_name] = C.from_mapping(values, f"{path} cell {cell_name}")
        if only is not None and cell_name not in only:
            omitted.append(cell_name)
            continue
        grid = tuple(lr_grid if scale_lr_grid is None else scale_lr_grid)
        if seeds is None:
            cells.append(Cell(name, cell_name, C.from_mapping(values, f"{path} cell {cell_name}"), grid, cell_name))
            continue
        for seed in seeds:  # one cell per seed; each compares with the paper's one number for the setting
            seeded = f"{cell_name}-seed{seed}"
            cfg = C.from_mapping({**values, "seed": seed}, f"{path} cell {seeded}")
            cells.append(Cell(name, seeded, cfg, grid, cell_name))
            if cell_name in paper_cells:
                paper_cells[seeded] = paper_cells[cell_name]
    ours = {c.name for c in cells} | set(omitted)  # a seed study borrows the table it repeats cells of
    paper_cells = {cell: value for cell, value in paper_cells.items() if cell in ours}
    return Experiment(name, doc["title"], doc["reference"], doc["metric"], doc.get("rule", ""),
                      tuple(doc.get("targets", ())), scale, note, tuple(cells), doc.get("choices", {}),
                      paper_cells, bool(doc.get("final_acc_column", False)), tuple(omitted),
                      table.get("wall_time", ""), tuple(seeds or ()),
                      _layout(doc, configs, path) if "layout" in doc else None)


def _layout(doc: dict, configs: dict, path: Path) -> Layout:
    """The [layout] table, checked: a table of rounds, known fields, a baseline on the row fields, one cell
    per place."""
    if doc["metric"] != "rounds_to_target":
        raise ConfigError(f"{path}: a [layout] prints rounds with speedups, so it needs metric = "
                          f"\"rounds_to_target\"; got {doc['metric']!r}")
    fields = set(C.field_names())
    rows, columns, baseline = (doc["layout"].get(key) for key in ("rows", "columns", "baseline"))
    for key, value in (("rows", rows), ("columns", columns)):
        if not isinstance(value, list) or not value or not set(value) <= fields:
            raise ConfigError(f"{path}: layout.{key} must be a non-empty list of run settings "
                              f"({', '.join(sorted(fields))}); got {value!r}")
    if not isinstance(baseline, dict) or set(baseline) != set(rows):
        raise ConfigError(f"{path}: layout.baseline must give a value for each of layout.rows "
                          f"({', '.join(rows)}); got {baseline!r}")
    baseline = C.from_mapping(baseline, f"{path} layout.baseline")  # parses "inf" as a batch size, as cells do
    places = {}
    for cell, cfg in configs.items():
        place = tuple(getattr(cfg, f) for f in rows + columns)
        if place in places:
            raise ConfigError(f"{path}: cells {places[place]} and {cell} have the same layout.rows and "
                              f"layout.columns values {place}; each cell needs a place of its own")
        places[place] = cell
    return Layout(tuple(rows), tuple(columns), {f: getattr(baseline, f) for f in rows}, configs)
