"""The scoreboard: paper vs ours tables from the committed results, and what the book's pages show."""

from fedcore import experiments, reproduce, results, scoreboard

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
