from hypothesis import given, settings
from hypothesis import strategies as st

from fedcore.metrics import cannot_beat, first_round_at, rounds_to_target_interpolated


def test_interpolates_between_evaluations_on_the_running_max():
    # The dip at round 20 does not count: the running max stays 0.96, then 0.98 at round 30.
    rounds, accs = [0, 10, 20, 30], [0.5, 0.96, 0.90, 0.98]
    assert rounds_to_target_interpolated(rounds, accs, 0.97) == 25.0


def test_target_reached_at_an_evaluation_point():
    assert rounds_to_target_interpolated([0, 5, 10], [0.1, 0.97, 0.99], 0.97) == 5.0


def test_target_never_reached():
    assert rounds_to_target_interpolated([0, 1], [0.1, 0.2], 0.97) is None
    assert first_round_at([0, 1], [0.1, 0.2], 0.97) is None


def test_first_round_rule_takes_the_first_evaluation_at_or_above():
    assert first_round_at([0, 10, 20, 30], [0.5, 0.96, 0.97, 0.98], 0.97) == 20


def test_lr_grid_keeps_the_fastest_to_target_then_the_most_accurate():
    from fedcore.metrics import lr_grid_score

    def summary(rounds, best):
        return {"rounds_to_target": {"0.97": {"interpolated": rounds}}, "best_acc": best, "final_acc": best}

    fast, slow, never_good, never_bad = summary(12.5, 0.98), summary(30.0, 0.99), summary(None, 0.96), summary(None, 0.9)
    ranked = sorted([never_bad, slow, fast, never_good], key=lambda s: lr_grid_score(s, "0.97"), reverse=True)
    assert ranked == [fast, slow, never_good, never_bad]
    assert lr_grid_score(slow, None) > lr_grid_score(fast, None)  # final-accuracy tables


def test_commit_named_in_the_environment_wins_else_unknown_without_git(monkeypatch):
    import subprocess

    from fedcore import results

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(subprocess, "run", no_git)
    monkeypatch.setenv("FEDCORE_GIT_COMMIT", "abc123")
    assert results.git_commit() == "abc123"
    monkeypatch.delenv("FEDCORE_GIT_COMMIT")
    assert results.git_commit() == "unknown"


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5), st.floats(0, 1)), min_size=1, max_size=12),
       st.integers(0, 12), st.floats(0.05, 1), st.floats(0, 40))
def test_a_run_that_cannot_beat_the_leader_never_does_whatever_comes_next(steps, cut, target, leader_rounds):
    # evaluations at increasing rounds; the run is judged on the first `cut` of them, then goes on anyhow
    rounds = [sum(gap for gap, _ in steps[:i + 1]) for i in range(len(steps))]
    accs = [a for _, a in steps]
    seen = list(zip(rounds, accs))[:cut]
    if cannot_beat(seen, target, leader_rounds):
        later = rounds_to_target_interpolated(rounds, accs, target)
        first = first_round_at(rounds, accs, target)
        assert later is None or later > leader_rounds
        assert first is None or first > leader_rounds
    elif seen and max(accs[:cut]) < target:
        assert seen[-1][0] < leader_rounds  # not yet past the leader: it may still get there sooner


def test_cannot_beat_needs_an_evaluation_past_the_leaders_rounds_below_the_target():
    assert cannot_beat([(0, 0.1), (10, 0.9)], 0.97, 10.0)
    assert not cannot_beat([(0, 0.1), (10, 0.9)], 0.97, 10.5)
    assert not cannot_beat([(0, 0.1), (10, 0.98)], 0.97, 5.0)  # reached: its own rounds decide
    assert not cannot_beat([], 0.97, 0.0)
