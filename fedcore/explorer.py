"""The Explorer page (notebooks/06_explorer.ipynb): FedNNNN's beta and gamma and FedUmf's alpha, moved by a
reader over real runs of a small MNIST federation.

One grid of runs, experiments/explorer_grid.toml, computed and stored like every other experiment, is shown
two ways:

- `static_html`: one self-contained HTML block (inline SVG charts, range inputs and a few lines of inline
  JavaScript, nothing fetched from the network) that flips between the precomputed runs. It works in the
  built book, where no kernel runs.
- `LiveExplorer`: ipywidgets controls that train a new run of the same size (seconds on a CPU) and redraw
  accuracy and N/E with fedcore.results' plots. They need a running Python kernel.

The explorer finds its grid points by the cells' settings (algorithm, partition, beta, gamma, alpha), never
by their names, so adding a value to the TOML adds a slider position.
"""

from __future__ import annotations

import hashlib
import html
import json
import math
import os
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from fedcore import config as C
from fedcore import experiments, reproduce, results, scoreboard

EXPERIMENT = "explorer_grid"
# Runs made on the page (the notebook's parameters, the live controls) go to the repository's runs/, which
# git ignores, never to the committed results/ store. Anchored to the checkout: notebooks run in notebooks/.
RUNS_DIR = reproduce.RUNS_DIR


@dataclass(frozen=True)
class Panel:
    """One family of grid points: an algorithm, the knobs its sliders move, and a title."""

    algorithm: str
    knobs: tuple[str, ...]
    title: str


PANELS = (
    Panel("fednnnn", ("beta", "gamma"), "FedNNNN: norm scale β and server momentum γ (C = 1)"),
    Panel("fedumf", ("alpha",), "FedUmf: fusion coefficient α (C = 0.1; α = 0 is FedAvg)"),
)
BASELINE = "fedavg"  # every frame also draws the FedAvg run with the same partition and C
SYMBOLS = {"beta": "β", "gamma": "γ", "alpha": "α", "partition": "split"}
# Where the sliders start, and what a knob the reader left unset means when looking up the nearest point.
DEFAULTS = {"partition": "shards", "beta": 1.0, "gamma": 0.5, "alpha": 0.5}


def panel_for(algorithm: str) -> Panel:
    return next(p for p in PANELS if p.algorithm == algorithm)


def _fmt(value) -> str:
    """A knob value as the sliders and frame keys spell it: 1.0 -> '1', 0.75 -> '0.75', 'iid' -> 'iid'."""
    return value if isinstance(value, str) else f"{value:g}"


def frame_key(panel: Panel, settings: dict) -> str:
    """The key the static view's JavaScript builds from the slider positions: 'shards|0.75|0.5'."""
    return "|".join(_fmt(settings[k]) for k in ("partition", *panel.knobs))


# --- the grid -------------------------------------------------------------------------------------------

@dataclass
class Grid:
    experiment: experiments.Experiment
    runs: dict[str, dict]  # cell name -> results doc, for the cells that are done

    @property
    def scale(self) -> str:
        return self.experiment.scale

    def points(self, panel: Panel) -> dict[str, str]:
        """{frame key: cell name} of the panel's grid points that have results."""
        return {frame_key(panel, doc["config"]): name for name, doc in self.runs.items()
                if doc["config"]["algorithm"] == panel.algorithm}

    def values(self, panel: Panel) -> dict[str, list]:
        """Each slider's positions: the partitions and knob values present in the panel's grid, sorted."""
        configs = [self.runs[name]["config"] for name in self.points(panel).values()]
        return {k: sorted({c[k] for c in configs}) for k in ("partition", *panel.knobs)}

    def baseline(self, doc: dict) -> dict | None:
        """The FedAvg run with the same partition and C as `doc`, if the grid has one."""
        cfg = doc["config"]
        return next((d for d in self.runs.values() if d["config"]["algorithm"] == BASELINE
                     and d["config"]["partition"] == cfg["partition"]
                     and d["config"]["fraction"] == cfg["fraction"]), None)

    def nearest(self, panel: Panel, **wanted) -> str:
        """The cell nearest to `wanted` (knob values; unset ones mean DEFAULTS): the partition must match
        where the grid has it, then the smallest summed distance over the knobs."""
        want = {k: DEFAULTS[k] if wanted.get(k) is None else wanted[k] for k in ("partition", *panel.knobs)}
        names = list(self.points(panel).values())
        if not names:
            raise LookupError(f"{EXPERIMENT} [{self.scale}] has no {panel.algorithm} results")
        same_split = [n for n in names if self.runs[n]["config"]["partition"] == want["partition"]] or names
        return min(same_split, key=lambda n: sum(abs(self.runs[n]["config"][k] - want[k]) for k in panel.knobs))

    def caption(self) -> str:
        return scoreboard.caption(self.experiment, self.runs)


def load_grid(scale: str, *, recompute: bool = False, device: str = "auto",
              results_dir: Path = reproduce.RESULTS_DIR, log=print) -> Grid:
    """The explorer grid's results at `scale`, from the committed store; missing cells are run first."""
    exp, runs = reproduce.ensure(EXPERIMENT, scale, recompute=recompute, device=device,
                                 results_dir=results_dir, log=log)
    return Grid(exp, runs)


# --- static view: inline SVG charts flipped by range inputs ----------------------------------------------

COLORS = {"run": "#1f77b4", "baseline": "#888888"}
CHART_W, CHART_H = 330, 200
MARGIN = {"left": 46, "right": 10, "top": 18, "bottom": 32}


def _linear_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    raw = (hi - lo) / count
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    return [round(first + i * step, 10) for i in range(int((hi - first) / step + 1e-9) + 1)]


def _log_bounds(lo: float, hi: float) -> tuple[float, float]:
    """The nearest 1-2-5 values at or outside [lo, hi], so that the log axis starts and ends on a tick."""
    candidates = [m * 10.0 ** d for d in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 2)
                  for m in (1, 2, 5)]
    return max(c for c in candidates if c <= lo * (1 + 1e-9)), min(c for c in candidates if c >= hi * (1 - 1e-9))


def _log_ticks(lo: float, hi: float) -> list[float]:
    mults = (1, 2, 5) if hi / lo <= 300 else (1,)
    return [m * 10.0 ** d for d in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in mults if lo * (1 - 1e-9) <= m * 10.0 ** d <= hi * (1 + 1e-9)]


def svg_chart(series: list[dict], *, x_max: float, y_range: tuple[float, float], log_y: bool,
              y_label: str, title: str) -> str:
    """A line chart as inline SVG. series: {"points": [(x, y)], "color", "dash" (SVG dasharray or "")}.
    Lines are clipped to the plot area, so every frame of a panel can share one y range."""
    x0, x1 = MARGIN["left"], CHART_W - MARGIN["right"]
    y0, y1 = CHART_H - MARGIN["bottom"], MARGIN["top"]
    lo, hi = y_range
    to_unit = (lambda v: (math.log10(v) - math.log10(lo)) / (math.log10(hi) - math.log10(lo))) if log_y \
        else (lambda v: (v - lo) / (hi - lo))
    sx = lambda x: x0 + (x1 - x0) * x / x_max  # noqa: E731
    sy = lambda y: y0 - (y0 - y1) * to_unit(y)  # noqa: E731
    clip = "c" + hashlib.sha1(json.dumps([series, title]).encode()).hexdigest()[:10]
    parts = [f'<svg width="{CHART_W}" height="{CHART_H}" '
             f'viewBox="0 0 {CHART_W} {CHART_H}" font-family="sans-serif" font-size="10" fill="currentColor">',
             f'<clipPath id="{clip}"><rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}"/></clipPath>',
             f'<text x="{(x0 + x1) / 2}" y="12" text-anchor="middle" font-weight="bold">{html.escape(title)}</text>']
    for t in (_log_ticks(lo, hi) if log_y else _linear_ticks(lo, hi)):
        y = sy(t)
        parts.append(f'<line x1="{x0}" x2="{x1}" y1="{y:.1f}" y2="{y:.1f}" stroke="currentColor" '
                     f'stroke-opacity="0.15"/><text x="{x0 - 4}" y="{y + 3:.1f}" text-anchor="end">{t:g}</text>')
    for t in _linear_ticks(0, x_max):
        x = sx(t)
        parts.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{y0}" y2="{y0 + 4}" stroke="currentColor"/>'
                     f'<text x="{x:.1f}" y="{y0 + 14}" text-anchor="middle">{t:g}</text>')
    parts.append(f'<rect x="{x0}" y="{y1}" width="{x1 - x0}" height="{y0 - y1}" fill="none" stroke="currentColor" '
                 f'stroke-opacity="0.6"/><text x="{(x0 + x1) / 2}" y="{CHART_H - 4}" text-anchor="middle">'
                 f'communication round</text><text transform="translate(11 {(y0 + y1) / 2}) rotate(-90)" '
                 f'text-anchor="middle">{html.escape(y_label)}</text>')
    for s in series:
        pts = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in s["points"] if not log_y or y > 0)
        dash = f' stroke-dasharray="{s["dash"]}"' if s["dash"] else ""
        parts.append(f'<polyline points="{pts}" fill="none" stroke="{s["color"]}" stroke-width="1.6"{dash} '
                     f'clip-path="url(#{clip})"/>')
    parts.append("</svg>")
    return "".join(parts)


def _points(doc: dict, key: str, first_round: int = 0) -> list[tuple[int, float]]:
    return [(r["round"], r[key]) for r in doc["rounds"] if r["round"] >= first_round and r.get(key) is not None]


def _accuracy_series(doc: dict, baseline: dict | None) -> list[dict]:
    series = [{"points": _points(baseline, "test_acc"), "color": COLORS["baseline"], "dash": ""}] if baseline else []
    series.append({"points": _points(doc, "test_acc"), "color": COLORS["run"], "dash": ""})
    if any(r.get("test_acc_distributed") is not None for r in doc["rounds"]):
        series.append({"points": _points(doc, "test_acc_distributed"), "color": COLORS["run"], "dash": "2 3"})
    return series


def _norm_series(doc: dict, baseline: dict | None) -> list[dict]:
    # round 0 is the initial evaluation: it has no client updates, hence no N or E
    return [{"points": _points(d, name, 1), "color": COLORS[role], "dash": "" if name == "N" else "5 3"}
            for role, d in (("baseline", baseline), ("run", doc)) if d for name in ("N", "E")]


def _shared_ranges(docs: list[dict]) -> tuple[tuple[float, float], tuple[float, float]]:
    """(accuracy, norm) y ranges for every frame of a panel, so moving a slider moves lines, not axes.
    The accuracy axis starts below where runs are after a quarter of the rounds; earlier rounds are clipped."""
    rounds = max(r["round"] for d in docs for r in d["rounds"])
    settled = [a for d in docs for _, a in _points(d, "test_acc", math.ceil(rounds / 4))]
    acc_lo = max(0.0, math.floor(10 * min(settled) - 1e-9) / 10)
    acc_hi = min(1.0, math.ceil(10 * max(a for d in docs for _, a in _points(d, "test_acc")) + 1e-9) / 10)
    norms = [v for d in docs for name in ("N", "E") for _, v in _points(d, name, 1) if v > 0]
    return (acc_lo, max(acc_hi, acc_lo + 0.2)), _log_bounds(min(norms), max(norms))


def _describe(panel: Panel, cfg: dict) -> str:
    return ", ".join([f"{SYMBOLS[k]} = {_fmt(cfg[k])}" for k in panel.knobs] + [f"{cfg['partition']} split"])


def _frame(grid: Grid, panel: Panel, name: str, ranges, visible: bool) -> str:
    doc = grid.runs[name]
    cfg, baseline = doc["config"], grid.baseline(doc)
    acc_range, norm_range = ranges
    compared = f" (FedAvg {baseline['summary']['final_acc']:.3f})" if baseline else ""
    caption = (f"{_describe(panel, cfg)}: final test accuracy {doc['summary']['final_acc']:.3f}{compared} after "
               f"{cfg['rounds']} rounds, C = {_fmt(cfg['fraction'])}; run in {doc['summary']['total_wall_s']:.0f} s")
    charts = (svg_chart(_accuracy_series(doc, baseline), x_max=cfg["rounds"], y_range=acc_range, log_y=False,
                        y_label="test accuracy", title="accuracy")
              + svg_chart(_norm_series(doc, baseline), x_max=cfg["rounds"], y_range=norm_range, log_y=True,
                          y_label="L2 norm (log)", title="N (solid) and E (dashed)"))
    return (f'<div class="fbx-frame" data-key="{html.escape(frame_key(panel, cfg))}"{"" if visible else " hidden"}>'
            f'<div>{html.escape(caption)}</div><div>{charts}</div></div>')


def _control(knob: str, values: list, start) -> str:
    label = html.escape(SYMBOLS[knob])
    if knob == "partition":
        options = "".join(f'<option value="{html.escape(v)}"{" selected" if v == start else ""}>{html.escape(v)}'
                          f"</option>" for v in values)
        return f'<label>{label} <select data-knob="partition">{options}</select></label>'
    spelled = [_fmt(v) for v in values]
    return (f'<label>{label} <input type="range" min="0" max="{len(values) - 1}" step="1" '
            f'value="{values.index(start)}" data-knob="{knob}" data-values="{html.escape(json.dumps(spelled))}">'
            f" <output>{_fmt(start)}</output></label>")


def _panel(grid: Grid, panel: Panel) -> str:
    points = grid.points(panel)
    if not points:
        return f'<p class="fbx-title">{html.escape(panel.title)}</p><p>No {panel.algorithm} runs at this scale.</p>'
    values = grid.values(panel)
    start_name = grid.nearest(panel)
    start = grid.runs[start_name]["config"]
    docs = [grid.runs[n] for n in points.values()]
    docs += [b for b in map(grid.baseline, docs) if b is not None]
    ranges = _shared_ranges(docs)
    controls = "".join(_control(k, values[k], start[k]) for k in ("partition", *panel.knobs))
    legend = (f'<span style="color:{COLORS["run"]}">&#9644; {panel.algorithm} (accuracy of the averaged model, '
              f'the paper\'s)</span>' + (f' <span style="color:{COLORS["run"]}">&#8943; distributed model</span>'
                                          if panel.algorithm == "fednnnn" else "")
              + f' <span style="color:{COLORS["baseline"]}">&#9644; FedAvg, same split and C</span>')
    frames = "".join(_frame(grid, panel, n, ranges, n == start_name) for n in points.values())
    return (f'<div class="fbx-panel"><p class="fbx-title">{html.escape(panel.title)}</p>'
            f'<div class="fbx-controls">{controls}</div><div class="fbx-legend">{legend}</div>{frames}'
            f'<div class="fbx-missing" hidden>No run at this grid point.</div></div>')


# Runs in the built page and in a trusted Jupyter output. The slider and select order is the frame key's.
_SCRIPT = """
(function () {
  var root = document.getElementById("%(id)s");
  root.querySelectorAll(".fbx-panel").forEach(function (panel) {
    var inputs = panel.querySelectorAll("[data-knob]");
    function show() {
      var key = Array.prototype.map.call(inputs, function (el) {
        if (el.tagName === "SELECT") return el.value;
        var value = JSON.parse(el.getAttribute("data-values"))[Number(el.value)];
        el.nextElementSibling.textContent = value;
        return value;
      }).join("|");
      var found = false;
      panel.querySelectorAll(".fbx-frame").forEach(function (frame) {
        frame.hidden = frame.getAttribute("data-key") !== key;
        found = found || !frame.hidden;
      });
      panel.querySelector(".fbx-missing").hidden = found;
    }
    inputs.forEach(function (el) { el.addEventListener("input", show); });
    show();
  });
  var inNotebook = Boolean(window.Jupyter || root.closest(".jp-OutputArea, .output_area") ||
                           document.body.hasAttribute("data-vscode-theme-kind"));
  root.querySelector(".fbx-mode").textContent = inNotebook ?
    "You are in a running notebook: these sliders flip between the precomputed runs, and the live controls " +
    "below train new runs in this notebook's kernel." :
    "You are reading the static page: no Python kernel runs here. These sliders flip between the " +
    "precomputed runs; the live controls need Jupyter (see the last section).";
})();
"""


def static_html(grid: Grid) -> str:
    """The static explorer: every grid point's accuracy and N/E charts, one visible at a time, picked by
    sliders; self-contained (no external scripts, styles or network)."""
    panels = "".join(_panel(grid, p) for p in PANELS)
    root_id = "fbx-" + hashlib.sha1(panels.encode()).hexdigest()[:12]
    header = (f"<b>Static view: precomputed grid of real runs</b> ({html.escape(grid.caption())}). "
              f"Move the sliders; for live recomputation run this notebook in Jupyter.")
    mode = ("Which view is this? This viewer runs no JavaScript (an untrusted notebook or a plain preview), "
            "so the sliders cannot move: you see the starting grid point.")
    return (f'<div id="{root_id}" class="fbx" style="border:1px solid #8884;padding:8px;border-radius:4px">'
            f'<p style="margin:0 0 4px">{header}</p>'
            f'<p class="fbx-mode" style="margin:0 0 8px;font-style:italic">{mode}</p>'
            f'<style>#{root_id} label{{margin-right:1.2em;white-space:nowrap}} '
            f'#{root_id} .fbx-title{{font-weight:bold;margin:10px 0 4px}} '
            f'#{root_id} .fbx-legend{{font-size:0.85em;margin:4px 0}} '
            f'#{root_id} svg{{max-width:49%;height:auto}}</style>'
            f"{panels}"
            f'<p style="font-size:0.85em;margin:6px 0 0">Grid: experiments/{EXPERIMENT}.toml; runs: '
            f"results/{EXPERIMENT}/{html.escape(grid.scale)}/.</p>"
            f"<script>{_SCRIPT % {'id': root_id}}</script></div>")


# --- one run at chosen settings: the notebook's parameters and the live controls --------------------------

def run_at(grid: Grid, algorithm: str, *, device: str = "auto", out_dir: Path = RUNS_DIR, **settings) -> dict:
    """Train one run of the grid's size: `algorithm` with `settings` (RunConfig fields) over the settings
    every grid cell shares. Reused from `out_dir` when the same config already ran there."""
    panel = next((p for p in PANELS if p.algorithm == algorithm), None)
    if panel is not None and grid.points(panel):
        base = grid.nearest(panel, **{k: settings.get(k) for k in ("partition", *panel.knobs)})
    else:  # the cell only lends the shared settings and a file name; the algorithm is set explicitly below
        base = next((n for n, d in grid.runs.items() if d["config"]["algorithm"] == algorithm), next(iter(grid.runs)))
    return reproduce.variant(EXPERIMENT, grid.scale, base, device=device, out_dir=out_dir, algorithm=algorithm,
                             **settings)


def requested_runs(grid: Grid, *, beta=None, gamma=None, alpha=None, seed: int = 0, device: str = "auto",
                   out_dir: Path = RUNS_DIR) -> list[tuple[Panel, dict, str]]:
    """The notebook's parameters: a FedNNNN run if beta or gamma is set, a FedUmf run if alpha is; each as
    (panel, its results, the nearest grid cell's name). Unset knobs take the nearest grid point's value."""
    asked = {"fednnnn": {"beta": beta, "gamma": gamma}, "fedumf": {"alpha": alpha}}
    out = []
    for panel in PANELS:
        knobs = asked[panel.algorithm]
        if all(v is None for v in knobs.values()):
            continue
        nearest = grid.nearest(panel, **knobs)
        cfg = grid.runs[nearest]["config"]
        settings = {k: cfg[k] if v is None else v for k, v in knobs.items()}
        doc = run_at(grid, panel.algorithm, device=device, out_dir=out_dir, partition=cfg["partition"],
                     seed=seed, **settings)
        out.append((panel, doc, nearest))
    return out


def _label(panel: Panel, cfg: dict) -> str:
    return f"{panel.algorithm} " + " ".join(f"{SYMBOLS[k]}={_fmt(cfg[k])}" for k in panel.knobs)


def plot_comparison(grid: Grid, panel: Panel, doc: dict, nearest: str):
    """Accuracy and N/E of a requested run next to the nearest grid point and its FedAvg baseline."""
    import matplotlib.pyplot as plt

    grid_doc = grid.runs[nearest]
    # the run made now is drawn last, on top: at a grid point's values it covers the grid's curve exactly
    runs = {f"grid: {_label(panel, grid_doc['config'])}, seed {grid_doc['config']['seed']}": grid_doc,
            f"{_label(panel, doc['config'])}, seed {doc['config']['seed']} (run now)": doc}
    baseline = grid.baseline(grid_doc)
    fig, (acc_ax, norm_ax) = plt.subplots(1, 2, figsize=(12, 3.8))
    results.plot_accuracy(acc_ax, {**runs, **({"FedAvg (grid)": baseline} if baseline else {})})
    results.plot_norms(norm_ax, runs)
    acc_ax.set_title(f"{doc['config']['partition']} split, C = {_fmt(doc['config']['fraction'])}")
    norm_ax.set_title("N (solid) and E (dashed)")
    fig.suptitle(f"scale {grid.scale}; run now: {results.provenance(doc)}; grid: {results.provenance(grid_doc)}",
                 fontsize=8)
    fig.tight_layout()
    return fig


# --- live view: ipywidgets that train ----------------------------------------------------------------------

LIVE_ALGORITHMS = {"FedNNNN": "fednnnn", "FedUmf": "fedumf", "FedAvg": BASELINE}
LIVE_NOTE = ("<b>Live view</b>: pressing <i>Run</i> trains a new run of the grid's size in this notebook's "
             "Python kernel (seconds on a CPU) and redraws accuracy and N/E, keeping the last {keep} runs for "
             "comparison. Without a running kernel (a saved copy of this notebook) these controls do nothing.")
NO_KERNEL_NOTE = ("<p><b>Live view: not on this page.</b> This is the static book page, where no Python kernel "
                  "runs, so the controls that retrain are left out; the static view above is the one that "
                  "moves. To retrain, open <code>notebooks/06_explorer.ipynb</code> in Jupyter (for example "
                  "<code>.venv/bin/jupyter lab notebooks/06_explorer.ipynb</code> in a checkout after "
                  "<code>make test</code> or <code>make book</code> set up <code>.venv</code>) and run all cells.</p>")


def live_view(grid: Grid, *, device: str = "auto", seed: int = 0):
    """What the notebook shows as its live view: the LiveExplorer's widget, except while the static book is
    built (`make book` sets FEDBOOK_RENDER_ONLY=1). There no reader's kernel will ever be behind the widget,
    and showing a saved widget would need ipywidgets' scripts from the network, so a note says so instead."""
    if os.environ.get("FEDBOOK_RENDER_ONLY") == "1":
        from IPython.display import HTML

        return HTML(NO_KERNEL_NOTE)
    return LiveExplorer(grid, device=device, seed=seed).widget


class LiveExplorer:
    """Sliders for beta, gamma, alpha and C, a split dropdown and a Run button; `widget` is what to display.

    Building it trains nothing, so a headless execution (papermill, nbval) passes straight through.
    """

    def __init__(self, grid: Grid, *, device: str = "auto", seed: int = 0, out_dir: Path = RUNS_DIR, keep: int = 4):
        import ipywidgets as W

        self.grid, self.device, self.seed, self.out_dir, self.keep = grid, device, seed, out_dir, keep
        self.runs: OrderedDict[str, dict] = OrderedDict()  # label -> results, oldest first
        slider = dict(continuous_update=False, readout_format=".2f", style={"description_width": "initial"})
        self.algorithm = W.ToggleButtons(options=list(LIVE_ALGORITHMS), value="FedNNNN", description="algorithm")
        self.beta = W.FloatSlider(value=DEFAULTS["beta"], min=0.1, max=2.0, step=0.05, description="β (norm scale)",
                                  **slider)
        self.gamma = W.FloatSlider(value=DEFAULTS["gamma"], min=0.0, max=0.95, step=0.05,
                                   description="γ (server momentum)", **slider)
        self.alpha = W.FloatSlider(value=DEFAULTS["alpha"], min=0.0, max=1.0, step=0.05,
                                   description="α (fusion)", **slider)
        self.fraction = W.FloatSlider(value=1.0, min=0.05, max=1.0, step=0.05, description="C (fraction)", **slider)
        self.partition = W.Dropdown(options=list(C.PARTITIONS), value=DEFAULTS["partition"], description="split")
        self.run_button = W.Button(description="Run", button_style="primary", icon="play")
        self.status = W.HTML(f"Scale {grid.scale}: {html.escape(grid.experiment.scale_note)}. Press Run.")
        self.output = W.Output()
        self.algorithm.observe(self._algorithm_changed, names="value")
        self.run_button.on_click(self.run)
        self._algorithm_changed()
        self.widget = W.VBox([W.HTML(LIVE_NOTE.format(keep=keep)), self.algorithm,
                              W.HBox([self.beta, self.gamma]), W.HBox([self.alpha, self.fraction]),
                              W.HBox([self.partition, self.run_button]), self.status, self.output])

    def _algorithm_changed(self, _change=None) -> None:
        """Enable the knobs the chosen algorithm has; start C where the grid has that algorithm."""
        algorithm = LIVE_ALGORITHMS[self.algorithm.value]
        self.beta.disabled = self.gamma.disabled = algorithm != "fednnnn"
        self.alpha.disabled = algorithm != "fedumf"
        if algorithm != BASELINE and self.grid.points(panel_for(algorithm)):
            self.fraction.value = self.grid.runs[self.grid.nearest(panel_for(algorithm))]["config"]["fraction"]

    def settings(self) -> tuple[str, dict]:
        """(algorithm, RunConfig overrides) the controls stand at."""
        algorithm = LIVE_ALGORITHMS[self.algorithm.value]
        settings = {"partition": self.partition.value, "fraction": round(self.fraction.value, 4), "seed": self.seed}
        if algorithm == "fednnnn":
            settings.update(beta=round(self.beta.value, 4), gamma=round(self.gamma.value, 4))
        elif algorithm == "fedumf":
            settings["alpha"] = round(self.alpha.value, 4)
        return algorithm, settings

    def label(self, algorithm: str, settings: dict) -> str:
        knobs = [f"{SYMBOLS[k]}={_fmt(settings[k])}" for k in ("beta", "gamma", "alpha") if k in settings]
        return " ".join([algorithm, *knobs, f"C={_fmt(settings['fraction'])}", settings["partition"]])

    def run(self, _button=None) -> dict | None:
        """Train at the current settings, add the run to the plot (dropping the oldest beyond `keep`), redraw.
        None if training failed; the traceback is then in the output area."""
        import matplotlib.pyplot as plt
        from IPython.display import clear_output, display

        algorithm, settings = self.settings()
        label = self.label(algorithm, settings)
        self.run_button.disabled = True
        self.status.value = f"Training {html.escape(label)} ..."
        doc = None
        try:
            # inside the output area, so the progress bar and any error show there (which swallows the error)
            with self.output:
                doc = run_at(self.grid, algorithm, device=self.device, out_dir=self.out_dir, **settings)
        finally:
            self.run_button.disabled = False
        if doc is None:
            self.status.value = f"Training {html.escape(label)} failed: see the error below."
            return None
        self.runs.pop(label, None)
        self.runs[label] = doc
        while len(self.runs) > self.keep:
            self.runs.popitem(last=False)
        fig = self.figure()
        with self.output:
            clear_output(wait=True)
            display(fig)
        plt.close(fig)
        self.status.value = (f"Live: {html.escape(label)} reached test accuracy {doc['summary']['final_acc']:.3f}; "
                             f"scale {self.grid.scale}, {html.escape(results.provenance(doc))}.")
        return doc

    def figure(self):
        """Accuracy and N/E of the runs kept, newest last."""
        import matplotlib.pyplot as plt

        fig, (acc_ax, norm_ax) = plt.subplots(1, 2, figsize=(12, 3.8))
        results.plot_accuracy(acc_ax, self.runs)
        results.plot_norms(norm_ax, self.runs)
        acc_ax.set_title("test accuracy (live runs)")
        norm_ax.set_title("N (solid) and E (dashed)")
        newest = next(reversed(self.runs.values()))
        fig.suptitle(f"scale {self.grid.scale}; newest run: {results.provenance(newest)}", fontsize=8)
        fig.tight_layout()
        return fig
