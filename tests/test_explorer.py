"""The Explorer page: the static view holds one frame per grid point that its sliders can reach and fetches
nothing; the grid lookups pick the right point; the live widget builds without a kernel and a click trains
one real run. The grid used is the explorer's smoke scale, trained on real MNIST (seconds)."""

import itertools
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser

import pytest

from fedcore import experiments, explorer, reproduce
from tests.helpers import needs_mnist

BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.fixture(scope="module")
def grid(tmp_path_factory):
    return explorer.load_grid("smoke", device="cpu", results_dir=tmp_path_factory.mktemp("results"),
                              log=lambda *a: None)


class _Elements(HTMLParser):
    """Every start tag as (tag, attributes), in document order."""

    def __init__(self, text):
        super().__init__()
        self.tags = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))


def _panels(page: str) -> list[str]:
    return page.split('<div class="fbx-panel">')[1:]


@needs_mnist
def test_static_view_has_sliders_and_one_frame_per_grid_point_and_fetches_nothing(grid):
    page = explorer.static_html(grid)
    tags = _Elements(page).tags
    ranges = [a for t, a in tags if t == "input" and a.get("type") == "range"]
    assert [a["data-knob"] for a in ranges] == ["beta", "gamma", "alpha"]
    assert sum(t == "select" for t, _ in tags) == len(explorer.PANELS)
    frames = [a for t, a in tags if "fbx-frame" in a.get("class", "")]
    cells = [n for n, d in grid.runs.items() if d["config"]["algorithm"] != explorer.BASELINE]
    assert len(frames) == len(cells) == 6
    assert sum("hidden" not in a for a in frames) == len(explorer.PANELS)  # one starting frame per panel
    assert "http" not in page
    assert not any(t in ("img", "link", "iframe") or a.get("src") for t, a in tags)
    assert "Static view: precomputed grid of real runs" in page and "scale: smoke" in page
    assert len(page) < 200_000


@needs_mnist
def test_every_slider_position_names_exactly_one_frame_of_its_panel(grid):
    for panel, text in zip(explorer.PANELS, _panels(explorer.static_html(grid))):
        tags = _Elements(text).tags
        positions = [[o["value"] for t, o in tags if t == "option"]]
        positions += [json.loads(a["data-values"]) for t, a in tags if t == "input"]
        keys = [a["data-key"] for _, a in tags if "data-key" in a]
        assert sorted("|".join(p) for p in itertools.product(*positions)) == sorted(keys)
        for key, name in grid.points(panel).items():
            assert key == explorer.frame_key(panel, grid.runs[name]["config"])


@needs_mnist
def test_nearest_grid_point(grid):
    fednnnn, fedumf = explorer.PANELS
    assert grid.nearest(fednnnn, beta=0.6, gamma=0.1) == "fednnnn-shards-b0.5-g0"
    assert grid.nearest(fednnnn, beta=0.9, gamma=0.7) == "fednnnn-shards-b1-g0.8"
    assert grid.nearest(fednnnn, beta=0.5) == "fednnnn-shards-b0.5-g0.8"  # unset gamma: the default, 0.5
    assert grid.nearest(fedumf, alpha=0.2, partition="iid") == "fedumf-shards-a0"  # smoke grid: shards only
    assert grid.baseline(grid.runs["fedumf-shards-a1"])["config"]["fraction"] == 0.1


@needs_mnist
@pytest.mark.skipif(BROWSER is None, reason="no headless Chromium to run the static view's JavaScript")
def test_sliders_show_the_frame_of_their_position_in_a_browser(grid, tmp_path):
    probe = """<script>
      var shown = [];
      document.querySelectorAll('.fbx-panel').forEach(function (panel) {
        panel.querySelectorAll('input[type=range]').forEach(function (el) {
          el.value = 0; el.dispatchEvent(new Event('input'));
        });
        panel.querySelectorAll('.fbx-frame').forEach(function (f) {
          if (!f.hidden) shown.push(f.getAttribute('data-key'));
        });
      });
      document.body.setAttribute('data-shown', shown.join(';'));
    </script>"""
    page = tmp_path / "explorer.html"
    page.write_text(f"<html><body>{explorer.static_html(grid)}{probe}</body></html>")
    dom = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert re.search(r'data-shown="([^"]*)"', dom).group(1) == "shards|0.5|0;shards|0"
    assert "You are reading the static page" in dom


@needs_mnist
def test_live_explorer_builds_without_a_kernel_and_a_click_trains_one_run(grid, tmp_path):
    live = explorer.LiveExplorer(grid, device="cpu", seed=3, out_dir=tmp_path)
    assert not live.runs and "Without a running kernel" in live.widget.children[0].value
    live.algorithm.value = "FedUmf"
    assert live.beta.disabled and not live.alpha.disabled and live.fraction.value == 0.1
    live.alpha.value, live.partition.value = 0.3, "iid"
    live.run_button.click()
    (label, doc), = live.runs.items()
    assert label == "fedumf α=0.3 C=0.1 iid"
    assert {k: doc["config"][k] for k in ("algorithm", "alpha", "partition", "fraction", "seed")} == \
        {"algorithm": "fedumf", "alpha": 0.3, "partition": "iid", "fraction": 0.1, "seed": 3}
    assert doc["config"]["rounds"] == grid.runs["fedumf-shards-a1"]["config"]["rounds"]
    assert live.status.value.startswith("Live: ") and "scale smoke" in live.status.value


@needs_mnist
def test_static_book_build_shows_a_note_instead_of_live_controls(grid, monkeypatch):
    import ipywidgets

    assert isinstance(explorer.live_view(grid, device="cpu"), ipywidgets.VBox)
    monkeypatch.setenv("FEDBOOK_RENDER_ONLY", "1")
    note = explorer.live_view(grid, device="cpu")
    assert "static book page" in note.data and "06_explorer.ipynb" in note.data


@needs_mnist
def test_requested_beta_trains_fednnnn_beside_the_nearest_grid_point(grid, tmp_path):
    (panel, doc, nearest), = explorer.requested_runs(grid, beta=0.7, device="cpu", out_dir=tmp_path)
    assert panel.algorithm == "fednnnn" and nearest == "fednnnn-shards-b0.5-g0.8"
    assert (doc["config"]["beta"], doc["config"]["gamma"]) == (0.7, 0.8)
    fig = explorer.plot_comparison(grid, panel, doc, nearest)
    assert "scale smoke" in fig._suptitle.get_text()
    assert len(fig.axes[0].lines) == 3  # this run, the grid point, FedAvg


def test_committed_cpu_grid_is_complete_and_current():
    """The book renders the page from these files without training: all must be there and up to date."""
    exp = experiments.load(explorer.EXPERIMENT, "cpu")
    statuses = [st for cell in exp.cells for st in reproduce.inspect(exp, cell, reproduce.RESULTS_DIR)]
    if any(st.status == "no-data" for st in statuses):
        pytest.skip("MNIST is not available offline")
    stale = [f"{st.run_id}: {st.status}" for st in statuses if st.status != "done"]
    assert not stale, f"rerun `fedcore reproduce {explorer.EXPERIMENT} --scale cpu`: {stale}"
