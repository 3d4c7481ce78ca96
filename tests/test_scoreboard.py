"""The scoreboard: paper vs ours tables from the committed results, and what the book's pages show."""

import functools

import pytest

from fedcore import data, experiments, reproduce, results, scoreboard
from fedcore.errors import ConfigError

ALL = experiments.names()


def test_a_page_shows_committed_paper_scale_runs_beside_its_own_scale(monkeypatch):
    import IPython.display

    shown = []
    monkeypatch.setenv("FEDBOOK_RENDER_ONLY", "1")  # read the committed results, compute nothing
    monkeypatch.setattr(IPython.display, "display", shown.append)
    name = next(n for n in ALL if reproduce.load_runs(n, "paper"))
    scoreboard.show(name, "cpu")
    captions = [obj.data for obj in shown if isinstance(obj, IPython.display.Markdown)]
    assert len(captions) == 2 and "at paper scale" in captions[1] and "scale: paper" in captions[1]


def test_a_figure_draws_the_pages_own_runs_and_the_committed_paper_scale_ones():
    with_paper = next(n for n in ALL if reproduce.load_runs(n, "paper"))
    without = next(n for n in ALL if not reproduce.load_runs(n, "paper"))
    page_runs = {"a run the reader added": {}}
    shown = scoreboard.runs_per_scale(with_paper, "cpu", page_runs)
    assert list(shown) == ["cpu", "paper"] and shown["cpu"] is page_runs
    assert shown["paper"].keys() == reproduce.load_runs(with_paper, "paper").keys()
    assert scoreboard.figure_runs(with_paper, "cpu", page_runs)[0] == "paper"
    assert scoreboard.runs_per_scale(without, "cpu", page_runs) == {"cpu": page_runs}
    assert scoreboard.figure_runs(without, "cpu", page_runs) == ("cpu", page_runs)


def test_ours_vs_paper_plot_puts_one_sided_cells_on_the_edge_and_leaves_out_cells_not_run_or_unpublished():
    import matplotlib
    import pandas as pd

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    board = pd.DataFrame({"cell": ["iid-a", "iid-b", "shards-c", "shards-d", "shards-e"], "column": "0.97",
                          "paper": [100, 300, "—", 50, None], "ours": [40, None, 200, None, 30],
                          "status": ["done", "done: not reached in 2000 rounds", "done", "not run", "done"]})
    fig, ax = plt.subplots()
    results.plot_ours_vs_paper(ax, {"paper": board})
    points = {(float(line.get_xdata()[0]), float(line.get_ydata()[0])) for line in ax.lines
              if len(line.get_xdata()) == 1}
    hi = 300 * 1.5
    assert points == {(100.0, 40.0), (300.0, hi), (hi, 200.0)}
    plt.close(fig)


def test_method_tables_line_methods_up_per_setting_and_subtract_the_baseline():
    exp = experiments.load("fedumf_table1", "smoke")
    row = lambda cell, column, paper, ours: {"cell": cell, "column": column, "paper": paper, "ours": ours,  # noqa: E731
                                             "diff": None, "status": "done"}
    rows = [row("noniid-fedavg", "0.9", 40, 55), row("noniid-fedumf", "0.9", 30, None),
            row("iid-fedavg", "0.9", "—", 20), row("iid-fedumf", "0.9", 10, 12)]
    table = scoreboard.method_table(exp, rows)
    assert list(table.index) == [("noniid", "0.9"), ("iid", "0.9")]  # the experiment's order, not sorted
    assert list(table.columns) == [(w, m) for w in ("paper", "ours") for m in ("fedavg", "fedumf")]
    assert table.loc[("iid", "0.9"), ("ours", "fedumf")] == 12
    saved = scoreboard.differences(exp, baseline="fedumf", rows=rows)["fedavg"]  # rounds saved by FedUmf
    assert saved.loc[("noniid", "0.9"), "paper"] == 10 and saved.loc[("iid", "0.9"), "ours"] == 8
    assert saved[["paper", "ours"]].isna().to_numpy().tolist() == [[False, True], [True, False]]  # "—", not reached


def _seed_row(setting, seed, paper, ours, run=True, *, column):
    """A scoreboard row of a seed study (compare's fields that the seed tables read)."""
    return {"setting": setting, "seed": seed, "column": column, "paper": paper, "ours": ours,
            "run": f"{setting}-seed{seed}" if run else None}


def test_a_seed_study_table_has_a_column_per_seed_and_its_spread_tells_not_run_from_not_reached():
    exp = experiments.load("mcmahan_seeds_2nn", "smoke")
    row = functools.partial(_seed_row, column="0.97")
    rows = [row("iid", 0, 87, 30.0), row("iid", 1, 87, 36.0), row("iid", 2, 87, 33.0),
            row("shards", 0, 664, 150.0), row("shards", 1, 664, None), row("shards", 2, 664, None, run=False),
            row("omitted", None, 5, None, run=False)]  # a setting this scale leaves out has no seed
    table = scoreboard.seed_table(exp, rows)
    assert list(table.index) == [("iid", "0.97"), ("shards", "0.97"), ("omitted", "0.97")]
    assert list(table.columns) == [0, 1, 2] and table.loc[("omitted", "0.97")].isna().all()
    summary = scoreboard.seed_spread(exp, rows)
    assert summary.loc[("iid", "0.97")].to_dict() == {"paper": 87, "seeds": 3, "with_number": 3, "min": 30.0,
                                                      "median": 33.0, "max": 36.0, "max/min": 1.2}
    shards = summary.loc[("shards", "0.97")]  # seed 1 ran and fell short, seed 2 has not run
    assert (shards["seeds"], shards["with_number"], shards["median"]) == (2, 1, 150.0)
    assert summary.loc[("omitted", "0.97"), "seeds"] == 0
    # differences of rows (e.g. rounds one method saves over another) summarise the same way
    saved = scoreboard.spread(table.loc[["shards"]].droplevel(0) - table.loc[["iid"]].droplevel(0))
    assert saved.loc["0.97", "with_number"] == 1 and saved.loc["0.97", "min"] == 120.0


def test_seed_differences_pair_each_method_with_the_baseline_of_the_same_seed():
    exp = experiments.load("fedumf_seeds", "smoke")
    row = functools.partial(_seed_row, column="0.95")
    rows = [row("lr-fedavg", 0, 15, 40.0), row("lr-fedavg", 1, 15, 50.0), row("lr-fedavg", 2, 15, 45.0),
            row("lr-fedumf", 0, 10, 30.0), row("lr-fedumf", 1, 10, None), row("lr-fedumf", 2, 10, None, run=False)]
    per_seed, both_ran, paper = scoreboard.seed_differences(exp, baseline="fedumf", rows=rows)
    key = ("fedavg", "lr", "0.95")
    assert per_seed.loc[key].tolist()[0] == 10.0  # seed 0: 40 - 30 rounds saved
    assert per_seed.loc[key].isna().tolist() == [False, True, True]  # seed 1: FedUmf fell short; seed 2: not run
    assert both_ran.loc[key].tolist() == [True, True, False] and paper.loc[key] == 5
    summary = scoreboard.spread(per_seed, both_ran).loc[key]
    assert (summary["seeds"], summary["with_number"]) == (2, 1)


def test_seed_spread_plot_draws_every_seed_the_median_and_the_papers_number_and_counts_seeds_short_of_it():
    import matplotlib
    import numpy as np
    import pandas as pd

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    per_seed = pd.DataFrame({0: [30.0, 150.0, np.nan], 1: [36.0, np.nan, np.nan], 2: [33.0, 200.0, np.nan],
                             3: [np.nan, np.nan, np.nan]}, index=["iid", "shards", "not run"])
    ran = pd.DataFrame({0: True, 1: True, 2: True, 3: False}, index=per_seed.index)
    ran.loc["not run"] = False
    fig, ax = plt.subplots()
    results.plot_seed_spread(ax, per_seed, pd.Series([np.int64(87), "—", 5], index=per_seed.index), ran=ran,
                             what="rounds", log=True)
    points = lambda label: [(x, y) for line in ax.lines if line.get_label() == label  # noqa: E731
                            for x, y in zip(line.get_xdata(), line.get_ydata())]
    assert sorted(y for _, y in points("ours, one seed each")) == [30, 33, 36, 150, 200]
    assert [y for _, y in points("median over seeds")] == [33, 33, 175, 175]
    assert points("paper (one run)") == [(0, 87)]  # numpy's numbers count, the paper's "—" does not
    assert [t.get_text() for t in ax.texts] == ["1 of 3\nnot reached"] and ax.get_yscale() == "log"  # seed 3: not run
    assert [t.get_text() for t in ax.get_xticklabels()] == ["iid", "shards"]  # a row without runs is left out
    plt.close(fig)


def test_a_page_shows_a_seed_study_as_its_spread_over_seeds(monkeypatch):
    import IPython.display
    import pandas as pd

    shown = []
    monkeypatch.setenv("FEDBOOK_RENDER_ONLY", "1")
    monkeypatch.setattr(IPython.display, "display", shown.append)
    exp, runs = scoreboard.show("mcmahan_seeds_2nn", "cpu")
    tables = [obj for obj in shown if isinstance(obj, pd.DataFrame)]
    assert exp.seeds and tables and all({"paper", "seeds", "with_number", "median"} <= set(t.columns) for t in tables)
    assert tables[0].loc[("iid-B10-C0.1", "0.97"), "seeds"] == len(exp.seeds)
    text = scoreboard.format_text(exp, scoreboard.compare(exp))  # `fedcore reproduce --scoreboard`
    assert "iid-B10-C0.1-seed9" in text and "over the seeds" in text and "with_number" in text


# McMahan et al.'s printed speedups (shared/papers/mcmahan_fedavg_facts.md sec. 2), each baseline / entry
# rounded to one decimal: the layouts must place every cell and pick every baseline as the paper did.
PRINTED_SPEEDUPS = {
    "mcmahan_table1_2nn": {("iid", "∞"): [1.0, 0.9], ("iid", 10): [3.6, 4.1, 4.2, 4.5],
                           ("shards", "∞"): [2.4, 2.8], ("shards", 10): [4.9, 5.3, 7.4, 8.6]},
    "mcmahan_table1_cnn": {("iid", "∞"): [1.1, 1.1, 2.4, 1.6], ("iid", 10): [2.8, 2.8, 2.8, 3.1],
                           ("shards", "∞"): [1.1, 1.2, 1.1], ("shards", 10): [4.6, 4.8, 3.7, 9.9]},
    "mcmahan_table2_cnn": {("iid",): [3.5, 9.6, 2.7, 18.4, 21.6, 19.6, 31.3, 34.8],
                           ("shards",): [0.5, 0.8, 0.7, 1.4, 1.4, 1.1, 2.1, 2.8]},
    "mcmahan_table4_2nn": {("iid",): [9.4, 10.2, 16.0, 16.0, 32.6, 37.6, 43.2, 45.9],
                           ("shards",): [1.7, 1.5, 1.9, 2.2, 2.1, 2.2, 3.7, 2.5]},
}


@pytest.mark.parametrize("name", sorted(PRINTED_SPEEDUPS))
def test_the_papers_layout_reproduces_every_printed_speedup_from_the_published_rounds(name):
    table = scoreboard.speedups(experiments.load(name, "paper"))
    for column, printed in PRINTED_SPEEDUPS[name].items():
        speedups = table[(*column, "paper speedup")].dropna().round(1).tolist()
        assert speedups == printed, column
    if name.startswith(("mcmahan_table2", "mcmahan_table4")):  # rows by u = E n / (K B), as printed
        u = table.index.get_level_values("u").tolist()
        assert u == ([1, 5, 12, 20, 60, 60, 240, 300, 1200] if "cnn" in name
                     else [1, 10, 12, 20, 60, 120, 240, 600, 1200])


def test_our_speedups_use_our_own_baseline_and_entries_without_a_number_say_why():
    exp = experiments.load("mcmahan_table4_2nn", "smoke")  # two cells run at smoke scale, the rest left out
    ran = {"iid-fedsgd-E1-Binf": (300.0, "done"),
           "iid-fedavg-E10-B10": (12.5, "partial: 4 of 5 learning rates"),  # not run at smoke scale: a stand-in
           "shards-fedavg-E10-B10": (None, "partial: 2 of 5 learning rates: not reached in 2 rounds")}
    rows = [r for r in scoreboard.compare(exp) if r["cell"] not in ran]
    rows += [{"cell": cell, "setting": cell, "column": "0.97", "paper": exp.published[cell]["0.97"], "ours": ours,
              "diff": None, "status": status} for cell, (ours, status) in ran.items()]
    numbers = scoreboard.speedups(exp, rows)
    assert numbers.loc[(10, 10, 100), ("iid", "ours speedup")] == 24.0  # 300 / 12.5, against our FedSGD
    assert numbers[("iid", "ours speedup")].notna().sum() == 1  # none on the baseline row itself
    printed = scoreboard.speedup_table(exp, rows)
    assert printed.loc[(10, 10, 100), ("iid", "ours")] == "12.5 (24.0×) *"  # best of a partial grid
    assert printed.loc[(1, "∞", 1), ("iid", "ours")] == "300"
    assert printed.loc[(10, 10, 100), ("shards", "ours")] == "not reached *"
    assert printed.loc[(1, 50, 2), ("shards", "ours")] == "not in this scale"
    assert printed.loc[(10, 10, 100), ("iid", "paper")] == "34 (43.2×)"
    text = scoreboard.format_text(exp, rows)  # `fedcore reproduce --scoreboard`
    assert "as the paper prints it" in text and "34 (43.2×)" in text


def test_a_layout_that_misnames_a_setting_or_puts_two_cells_in_one_place_is_a_clear_error(tmp_path):
    d = tmp_path / "experiments"
    d.mkdir()
    (d / "published.toml").write_text("")
    base = ('title = "t"\nreference = "r"\nmetric = "rounds_to_target"\ntargets = [0.9]\n'
            '[[cells]]\nname = "a"\nfraction = 0.0\n[[cells]]\nname = "b"\nfraction = 0.1\n')
    for layout, message in [('rows = ["clients_fraction"]\ncolumns = ["partition"]\nbaseline = {}', "layout.rows"),
                            ('rows = ["fraction"]\ncolumns = ["partition"]\nbaseline = { lr = 1 }',
                             "layout.baseline"),
                            ('rows = ["partition"]\ncolumns = ["lr"]\nbaseline = { partition = "iid" }',
                             "cells a and b")]:  # both cells: iid, lr 0.1
        (d / "t.toml").write_text(base + "[layout]\n" + layout + "\n")
        with pytest.raises(ConfigError, match=message) as err:
            experiments.load("t", "paper", d)
        assert "t.toml" in str(err.value)
    layout = '[layout]\nrows = ["fraction"]\ncolumns = ["partition"]\nbaseline = { fraction = 0.0 }\n'
    (d / "t.toml").write_text(base.replace("rounds_to_target", "final_acc") + layout)
    with pytest.raises(ConfigError, match="t.toml: a .layout. prints rounds"):
        experiments.load("t", "paper", d)
    (d / "t.toml").write_text(base + layout)
    assert set(experiments.load("t", "paper", d).layout.configs) == {"a", "b"}


def test_a_page_shows_the_papers_layout_at_its_scale_and_at_paper_scale(monkeypatch):
    import IPython.display
    import pandas as pd

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    scoreboard.show_speedups("mcmahan_table1_2nn", "cpu")
    captions = [obj.data for obj in shown if isinstance(obj, IPython.display.Markdown)]
    assert [c.split("it, ")[1].split(" scale")[0] for c in captions] == ["cpu", "paper"]
    assert "speedup over C = 0.0" in captions[0]
    tables = [obj for obj in shown if not isinstance(obj, IPython.display.Markdown)]
    assert len(tables) == 2 and all(isinstance(t, pd.DataFrame) and t.shape == (5, 8) for t in tables)  # C x (split, B)


def test_a_page_leaves_missing_numbers_blank_and_keeps_the_reason_in_the_status():
    exp = experiments.load("mcmahan_table1_2nn", "cpu")  # FedSGD cells: not reached in the cpu scale's rounds
    table = scoreboard.page_table(exp)
    missing = table[table["status"].str.contains("not reached")]
    assert len(missing) and (missing[["ours", "diff"]] == "").all().all()
    assert (table.loc[table["status"] == "done", "ours"] != "").all()


def test_the_training_set_sizes_behind_u_are_the_datasets_own():
    offline = [name for name in data.TRAIN_SIZES if data.available(name)]
    if not offline:
        pytest.skip("no dataset under the data root")
    for name in offline:
        assert len(data.load(name).train_y) == data.TRAIN_SIZES[name], name


def test_curve_plots_keep_a_runs_colour_across_panels_that_show_different_runs():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    def doc(scale):
        return {"rounds": [{"round": r, "test_acc": 0.5 * scale, "N": scale, "E": 2 * scale} for r in range(3)]}

    colors = {"single-client": "C0", "iid": "C1", "noniid": "C2"}
    fig, (left, mid, right) = plt.subplots(1, 3)
    results.plot_norms(left, {"single-client": doc(1), "iid": doc(2), "noniid": doc(3)}, colors=colors)
    results.plot_norms(mid, {"iid": doc(2), "noniid": doc(3)}, colors=colors)  # a scale without the first cell
    results.plot_accuracy(right, {"iid": doc(2), "noniid": doc(3)}, colors=colors)
    for ax in (left, mid, right):
        for line in ax.lines:
            run = line.get_label().split()[0]
            assert matplotlib.colors.same_color(line.get_color(), colors[run])
    plt.close(fig)
