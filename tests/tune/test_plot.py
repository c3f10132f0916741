"""tune.png reads well: the best line only where there is one, and a log axis labelled once
a tick, as plain numbers."""

import pytest

from tfyard.tune.plot import drawn

optuna = pytest.importorskip("optuna")


def _trials(values: list[tuple[float, float | None]]):
    """Finished trials (learning rate, value) of a log-uniform range; None: pruned."""
    lr = optuna.distributions.FloatDistribution(0.01, 0.8, log=True)
    study = optuna.create_study(direction="maximize")
    for rate, value in values:
        state = optuna.trial.TrialState.COMPLETE if value is not None else \
            optuna.trial.TrialState.PRUNED
        study.add_trial(optuna.trial.create_trial(
            params={"learning_rate": rate}, distributions={"learning_rate": lr},
            value=value, state=state, intermediate_values={1: 0.3}))
    return study.get_trials()


def test_a_lone_finished_trial_draws_no_best_line_and_no_empty_legend_entry():
    history = drawn(_trials([(0.05, 0.7)]), "validation/top1", True).axes[0]
    assert history.get_legend_handles_labels()[1] == ["complete"]


def test_the_best_so_far_holds_to_the_last_trial():
    history = drawn(_trials([(0.05, 0.7), (0.1, None), (0.2, None)]), "validation/top1",
                    True).axes[0]
    assert sorted(history.get_legend_handles_labels()[1]) == ["best", "complete", "pruned"]
    best = history.get_lines()[0]
    assert list(best.get_xdata()) == [0, 2] and list(best.get_ydata()) == [0.7, 0.7]


def test_a_log_range_is_labelled_at_one_two_and_five_as_plain_numbers():
    figure = drawn(_trials([(0.01, 0.2), (0.03, 0.5), (0.3, 0.6), (0.8, 0.4)]),
                   "validation/top1", True)
    axis = figure.axes[1]
    figure.canvas.draw()
    low, high = axis.get_xlim()
    labels = [t.get_text() for t, at in zip(axis.get_xticklabels(), axis.get_xticks(),
                                            strict=True) if low <= at <= high]
    assert axis.get_xscale() == "log"
    assert set(labels) <= {"0.01", "0.02", "0.05", "0.1", "0.2", "0.5", "1"}, labels
    assert len(labels) >= 4
    assert not [t.get_text() for t in axis.get_xticklabels(minor=True) if t.get_text()]
