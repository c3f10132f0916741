"""`tfyard plot`: loss, accuracy and images/sec over steps, from metrics.jsonl, as curves.png;
and which figures of a report are the objective's (the console shows the same ones)."""

from __future__ import annotations

import io

from tfyard.errors import UserError
from tfyard.runfiles.layout import RunDirectory
from tfyard.storage.stream import REPORTED
from tfyard.train.rundir.directory import read_json_lines

# What the loop adds to a chunk's figures and a metrics.jsonl record's own fields; the rest
# are the objective's (loss, top1, top5, or a compiled model's metrics).
LOOP_FIGURES = frozenset({"lr", "images_per_sec", "step_time", "input_wait",
                          "nonfinite_steps", "first_nonfinite_step", "skipped_steps",
                          "skipped_in_a_row", *REPORTED,
                          "step", "epoch", "time"})


def objective_figures(metrics: dict) -> list[tuple[str, float]]:
    """The objective's figures of a report (loss first), in the objective's order."""
    return [(k, v) for k, v in metrics.items()
            if k not in LOOP_FIGURES and isinstance(v, int | float)]


def read_metrics(output_dir: str) -> list[dict]:
    run = RunDirectory(output_dir)
    path = run.metrics
    if not run.files.has(path):
        raise UserError(f"{path} not found; point --output_dir at a directory written by "
                        "`tfyard train`")
    return read_json_lines(path)


def plot_run(output_dir: str) -> str:
    """Write `<output_dir>/curves.png` (drawn in memory, then written whole through the
    run's files, as every output is) and return its path."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    records = read_metrics(output_dir)
    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    if not train:
        raise UserError(f"{RunDirectory(output_dir).metrics} has no training reports yet")
    steps = [r["step"] for r in train]
    figure, axes = plt.subplots(1, 3, figsize=(15, 4))
    axes[0].plot(steps, [r["loss"] for r in train], label="train")
    # the accuracy panel: top-1 and top-5, or a compiled model's metrics
    shown = [name for name, _ in objective_figures(train[-1]) if name != "loss"][:2]
    for name in shown[:1]:
        axes[1].plot(steps, [r.get(name) for r in train], label=f"train {name}")
    if evals:
        eval_steps = [r["step"] for r in evals]
        axes[0].plot(eval_steps, [r["loss"] for r in evals], "o-", label="validation")
        for name, style in zip(shown, ("o-", "o--"), strict=False):
            axes[1].plot(eval_steps, [r.get(name) for r in evals], style,
                         label=f"validation {name}")
    axes[2].plot(steps, [r["images_per_sec"] for r in train])
    for ax, title in zip(axes, ("loss", ", ".join(shown) or "metrics", "images/sec"),
                         strict=True):
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend()
    axes[1].legend()
    figure.tight_layout()
    run = RunDirectory(output_dir)
    png = io.BytesIO()
    figure.savefig(png, format="png", dpi=100)
    plt.close(figure)
    run.files.write_whole(run.curves, png.getvalue())   # whole: a reader never sees half
    return run.curves
