#!/usr/bin/python3
"""Turns a launcher --metrics file (one JSON object a line: epoch, step, loss, samples_per_s,
time_s) into a PNG of the training loss over steps, with throughput on a second axis.

Usage: tools/plot_metrics.py METRICS.jsonl [MORE.jsonl ...] [--out loss.png] [--title TEXT]
Several metrics files may be given (e.g. runs with 1, 2 and 4 workers); each is one curve.
Needs python3-matplotlib (apt-get install python3-matplotlib)."""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")  # files only; no display needed
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path):
    rows = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
                rows.append((int(row["step"]), float(row["loss"]), float(row["samples_per_s"])))
            except (ValueError, KeyError) as error:
                raise SystemExit(f"{path}:{number}: not a metrics line ({error}): {line[:80]}")
    if not rows:
        raise SystemExit(f"{path}: no metrics lines; was the run started with --metrics {path}?")
    return rows


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("metrics", nargs="+", help="JSON-lines files written by --metrics")
    parser.add_argument("--out", default="loss.png", help="PNG to write (default loss.png)")
    parser.add_argument("--title", default="training loss")
    args = parser.parse_args(argv)

    figure, loss_axis = plt.subplots(figsize=(8, 4.5))
    rate_axis = loss_axis.twinx()
    for path in args.metrics:
        rows = read_metrics(path)
        steps = [r[0] for r in rows]
        loss_axis.plot(steps, [r[1] for r in rows], label=f"{path} loss")
        rate_axis.plot(steps, [r[2] for r in rows], linestyle=":", alpha=0.6,
                       label=f"{path} samples/s")
    loss_axis.set_xlabel("optimizer step")
    loss_axis.set_ylabel("training loss")
    rate_axis.set_ylabel("samples/s")
    loss_axis.set_title(args.title)
    lines = loss_axis.get_legend_handles_labels()
    rates = rate_axis.get_legend_handles_labels()
    loss_axis.legend(lines[0] + rates[0], lines[1] + rates[1], fontsize="small")
    figure.tight_layout()
    figure.savefig(args.out, dpi=120)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
