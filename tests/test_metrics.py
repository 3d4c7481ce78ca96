from fedcore.metrics import first_round_at, rounds_to_target_interpolated


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
