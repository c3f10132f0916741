"""`DIR/tune.png`: how the study went, redrawn as each trial ends. The first panel is the
optimization history (each trial's value by number, and the best so far); then one panel a
searched parameter, each trial's value against the value it tried, so what each parameter
did shows at a glance. A pruned trial is drawn at its last report, as an x."""

from __future__ import annotations

from tfyard.replace import replacing_file

COLUMNS = 4   # panels a row


def plot_study(trials, path: str, metric: str, maximize: bool) -> None:
    """Draw `trials` (Optuna FrozenTrials) into the PNG at `path`, replaced whole."""
    from matplotlib import pyplot as plt

    figure = drawn(trials, metric, maximize)
    with replacing_file(path, "wb") as stream:
        figure.savefig(stream, format="png", dpi=80)
    plt.close(figure)


def drawn(trials, metric: str, maximize: bool):
    """The figure of `trials`: the history, then a panel a searched parameter."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    points = [(t, _value(t)) for t in trials]
    points = [(t, value) for t, value in points if value is not None]
    names = sorted({name for t, _ in points for name in t.params})
    panels = 1 + len(names)
    rows, columns = -(-panels // COLUMNS), min(panels, COLUMNS)
    figure, axes = plt.subplots(rows, columns, figsize=(4.5 * columns, 3.6 * rows),
                                squeeze=False)
    axes = axes.ravel()
    _history(axes[0], points, metric, maximize)
    for ax, name in zip(axes[1:], names, strict=False):
        _parameter(ax, name, [(t, value) for t, value in points if name in t.params], metric)
    for ax in axes[panels:]:
        ax.set_visible(False)
    figure.tight_layout()
    return figure


def _value(trial) -> float | None:
    """A finished trial's value, a pruned one's last report; None for the rest."""
    if trial.state.name == "COMPLETE":
        return trial.value
    if trial.state.name == "PRUNED" and trial.intermediate_values:
        return trial.intermediate_values[max(trial.intermediate_values)]
    return None


def _scatter(ax, points, x) -> None:
    for state, marker in (("COMPLETE", "o"), ("PRUNED", "x")):
        shown = [(x(t), value) for t, value in points if t.state.name == state]
        if shown:
            ax.scatter(*zip(*shown, strict=True), marker=marker, alpha=0.8,
                       label=state.lower())


def _history(ax, points, metric: str, maximize: bool) -> None:
    _scatter(ax, points, lambda t: t.number)
    finished = sorted((t.number, value) for t, value in points if t.state.name == "COMPLETE")
    best, line = None, []
    for number, value in finished:
        best = value if best is None else (max if maximize else min)(best, value)
        line.append((number, best))
    last = max((t.number for t, _ in points), default=None)
    if line and last > line[-1][0]:   # the best so far holds to the last trial drawn
        line.append((last, line[-1][1]))
    if len(line) > 1:   # a lone point draws no line: no legend entry for it either
        ax.step(*zip(*line, strict=True), where="post", color="black", label="best")
    ax.set_title("optimization history")
    ax.set_xlabel("trial")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    if points:
        ax.legend(fontsize="small")


def _parameter(ax, name: str, points, metric: str) -> None:
    """`metric` against `name`'s values: a log axis for a log range, a choice's values in
    the space's order."""
    distribution = points[0][0].distributions[name] if points else None
    choices = getattr(distribution, "choices", None)
    if choices is not None:
        labels = [str(choice) for choice in choices]
        _scatter(ax, points, lambda t: labels.index(str(t.params[name])))
        ax.set_xticks(range(len(labels)), labels, rotation=30, fontsize="small")
    else:
        _scatter(ax, points, lambda t: t.params[name])
        if getattr(distribution, "log", False):
            _log_axis(ax.xaxis)
    ax.set_title(name)
    ax.set_xlabel(name)
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)


def _log_axis(axis) -> None:
    """A log axis labelled at 1, 2 and 5 of each decade, as plain numbers, and no label on
    the minor ticks: matplotlib's default labels them too over a range shorter than a
    decade, and they run into each other."""
    from matplotlib import ticker

    axis.axes.set_xscale("log")
    axis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(ticker.FuncFormatter(lambda value, _: f"{value:g}"))
    axis.set_minor_formatter(ticker.NullFormatter())
