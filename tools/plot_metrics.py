#!/usr/bin/env python3
"""Draws a launcher --metrics file into one PNG: the loss (training, per epoch, test set), the
test-set accuracy and the training throughput (samples/s), each against the optimizer step.
An epoch's loss is the mean of the epoch's batch losses over every rank (epoch lines with
"loss_batches"), drawn as a level line across the epoch's steps; older files, whose epoch lines
hold the last batch's loss, get a marker at the end of the epoch.

Usage: tools/plot_metrics.py METRICS.jsonl [MORE.jsonl ...] [--out run.png] [--title TEXT]
Several metrics files may be given (e.g. runs with 1, 2 and 4 workers); each gets its own colour.
The lines are those the launcher writes (docs/observability.md): {"kind": "step", ...} at each
logged step, {"kind": "epoch", ...} at the end of an epoch, {"kind": "eval", ...} after a test-set
evaluation, {"kind": "validation", ...} after each --eval-every evaluation; lines of other kinds
(stragglers, ...) are not drawn; lines without "kind" (the older format: epoch, step, loss,
samples_per_s) are steps.
Runs under dpl's Python environment, which has matplotlib (tools/dpl_python.py)."""
import argparse
import json
import sys

import dpl_python

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import matplotlib  # noqa: E402

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402

REQUIRED = {
    "step": ("step", "loss", "samples_per_s"),
    "epoch": ("step", "loss", "epoch"),
    "eval": ("step", "loss", "accuracy"),
    "validation": ("step", "loss", "accuracy"),
}
# Lines of these kinds carry no point of a curve drawn here.
NOT_DRAWN = {"straggler"}


class Run:
    def __init__(self, path):
        self.path = path
        self.steps = []   # (step, loss, samples/s)
        self.epochs = []  # (step, loss, epoch, whether loss is the epoch's mean)
        self.evals = []   # (step, loss, accuracy)
        self.validations = []  # (step, loss, accuracy), every --eval-every steps


def number(value):
    """A JSON number, or None for null (a loss that was not finite)."""
    return None if value is None else float(value)


def read_metrics(path):
    run = Run(path)
    with open(path) as f:
        for line_number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
                kind = row.get("kind", "step")
                if kind in NOT_DRAWN:
                    continue
                if kind not in REQUIRED:
                    raise ValueError(f"unknown kind {kind!r}")
                values = [row[key] for key in REQUIRED[kind]]
                entry = (int(values[0]), number(values[1]), number(values[2]))
                if kind == "epoch":
                    entry += ("loss_batches" in row,)
            except (ValueError, KeyError, TypeError, AttributeError) as error:
                raise SystemExit(f"{path}:{line_number}: not a metrics line ({error}): {line[:80]}")
            {"step": run.steps, "epoch": run.epochs, "eval": run.evals,
             "validation": run.validations}[kind].append(entry)
    if not (run.steps or run.epochs or run.evals or run.validations):
        raise SystemExit(f"{path}: no metrics lines; was the run started with --metrics {path}?")
    return run


def epoch_spans(run):
    """(first step, last step, mean loss) of each epoch line with a mean: from the previous epoch
    line's step (the first epoch of a file from step 0, or from its first logged step when it is
    not epoch 0, as after --resume)."""
    spans = []
    previous = None
    for step, loss, epoch, mean in run.epochs:
        if mean:
            logged = [s for s, _, _ in run.steps if s <= step]
            first = previous if previous is not None else (0 if epoch == 0 else min(logged + [step]))
            spans.append((first, step, loss))
        previous = step
    return spans


def plot_epochs(loss_axis, run, colour, label):
    spans = [span for span in epoch_spans(run) if span[2] is not None]  # null: not finite
    for index, (first, last, loss) in enumerate(spans):
        loss_axis.hlines(loss, first, last, colors=colour, linewidth=3, alpha=0.6,
                         label=f"{label}: epoch mean" if index == 0 else None)
    ends = [(s, l) for s, l, _, mean in run.epochs if not mean]
    if ends:
        loss_axis.plot([s for s, _ in ends], [l for _, l in ends], color=colour, marker="s",
                       linestyle="none", label=f"{label}: end of epoch")


def plot(runs, out, title):
    figure, (loss_axis, accuracy_axis, rate_axis) = plt.subplots(
        3, 1, figsize=(10, 9), sharex=True, gridspec_kw={"height_ratios": [2, 1, 1]})
    for index, run in enumerate(runs):
        colour = f"C{index}"
        label = run.path if len(runs) > 1 else "training"
        if run.steps:
            loss_axis.plot([s for s, _, _ in run.steps], [l for _, l, _ in run.steps],
                           color=colour, label=f"{label} loss")
            rate_axis.plot([s for s, _, _ in run.steps], [r for _, _, r in run.steps],
                           color=colour, label=label)
        plot_epochs(loss_axis, run, colour, label)
        for points, marker, name in ((run.evals, "o", "test set"),
                                     (run.validations, "^", "validation")):
            if not points:
                continue
            loss_axis.plot([s for s, _, _ in points], [l for _, l, _ in points], color=colour,
                           marker=marker, linestyle="--", label=f"{label}: {name} loss")
            accuracy_axis.plot([s for s, _, _ in points], [100.0 * a for _, _, a in points],
                               color=colour, marker=marker, label=f"{label}: {name}")
    loss_axis.set_ylabel("loss")
    loss_axis.set_title(title)
    loss_axis.legend(fontsize="small")
    accuracy_axis.set_ylabel("accuracy (%)")
    if not any(run.evals or run.validations for run in runs):
        accuracy_axis.text(0.5, 0.5, "no evaluation in the metrics (run without --no-eval)",
                           ha="center", va="center", transform=accuracy_axis.transAxes)
    rate_axis.set_ylabel("samples/s")
    rate_axis.set_xlabel("optimizer step")
    for axis in (loss_axis, accuracy_axis, rate_axis):
        axis.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(out, dpi=120)


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.split(".\n")[0] + ".")  # 1st sentence
    parser.add_argument("metrics", nargs="+", help="JSON-lines files written by --metrics")
    parser.add_argument("--out", default="metrics.png", help="PNG to write (default metrics.png)")
    parser.add_argument("--title", default="training run")
    args = parser.parse_args(argv)
    runs = [read_metrics(path) for path in args.metrics]
    plot(runs, args.out, args.title)
    steps = sum(len(run.steps) for run in runs)
    epochs = sum(len(run.epochs) for run in runs)
    evals = sum(len(run.evals) + len(run.validations) for run in runs)
    print(f"wrote {args.out}: {steps} step, {epochs} epoch and {evals} evaluation line(s)")


if __name__ == "__main__":
    main(sys.argv[1:])
