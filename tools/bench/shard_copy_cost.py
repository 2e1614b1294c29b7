#!/usr/bin/python3
"""What the copy of each part of the sharded optimizer costs a step (Note [A copy of each part] in
launcher/training/part_copy.hpp): dpl's GPT (`--model gpt`, AdamW) trained by three launchers on
this machine's loopback (three machines of one worker each, gloo), `--shard-optimizer on
--local-reduce backend`, with `--shard-copy on` against `--shard-copy off`.

With the copy, each step also gathers every part's averaged gradients (one allgather as large as
the parameters' gather that ends the step), runs AdamW on a second part (late: at the start of
the next step), and copies the rank's own part's values and state aside before its update (the
snapshot a failure falls back on).

Method: each run trains --first + --window steps; rank 0 logs every step (stamped, --log-time
iso), and the rate is the steps of the window over the time between the line of step --first and
the last. Each repeat runs both sides back to back, alternating which goes first; the ratio is
the median of the repeats' own ratios (steps/s with the copy over without).

--baseline LAUNCHER (with --baseline-plugin-dir, its build's plugins_out) compares instead the
runs with the copy of that launcher (another build) and of --launcher, paired the same way: what a
change to the copy gained.

Smoke:     tools/bench/shard_copy_cost.py --sizes tiny --first 3 --window 5 --repeats 1
Final run: tools/bench/shard_copy_cost.py --sizes gpt-10m,gpt-50m --repeats 3
Two builds: tools/bench/shard_copy_cost.py --sizes gpt-50m --baseline OLD/launcher/launcher \
               --baseline-plugin-dir OLD/plugins_out
"""
import argparse
import datetime
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile

from checkpoint_cost import STEP_LINE, add_run_arguments, chosen_sizes, paired_runs, write_tokens

SIZES = {
    "tiny": dict(layers=2, heads=4, dim=64, block=32, vocab=256, batch=6),
    # The Shakespeare-size GPT of docs/performance.md (10.8M parameters).
    "gpt-10m": dict(layers=6, heads=6, dim=384, block=256, vocab=256, batch=6),
    "gpt-50m": dict(layers=10, heads=10, dim=640, block=256, vocab=256, batch=3),
}
MACHINES = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def command(args, size, data, steps, copy, machine, port, launcher):
    """`launcher`: (the launcher, its plugin folder)."""
    model = ",".join(f"{k}={size[k]}" for k in ("layers", "heads", "dim", "block"))
    return [launcher[0], "--plugin-dir", launcher[1], "--model", "gpt", "--model-options",
            model, "--data", "tokens", "--data-dir", data, "--data-options",
            f"block={size['block']},vocab={size['vocab']}", "--data-cache", "none",
            "--backend", "gloo", "--num-machines", str(MACHINES), "--machine-id", str(machine),
            "--master-addr", "127.0.0.1", "--master-port", str(port), "--num-processes", "1",
            "--threads-per-worker", str(args.threads), "--batch-size", str(size["batch"]),
            "--max-steps", str(steps), "--optimizer", "adamw", "--lr", "1e-3",
            "--weight-decay", "0.1", "--seed", "0", "--shard-optimizer", "on", "--local-reduce",
            "backend", "--shard-copy", "on" if copy else "off", "--no-progress", "--no-eval",
            "--log-interval", "1", "--log-time", "iso"]


def run_launchers(commands, steps, first):
    """Starts one launcher per command at once (the machines of one job); steps/s of rank 0 over
    the steps after `first`, from its stamped step lines."""
    launchers = [subprocess.Popen(c, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
                 for c in commands]
    outputs = [launcher.communicate(timeout=3600)[0] for launcher in launchers]
    for launcher, output in zip(launchers, outputs):
        if launcher.returncode != 0:
            sys.exit(f"a launcher failed ({launcher.returncode}):\n{output[-4000:]}")
    times = [datetime.datetime.fromisoformat(m.group(1)).timestamp()
             for output in outputs for m in map(STEP_LINE.match, output.splitlines()) if m]
    if len(times) < steps:
        sys.exit(f"{len(times)} step lines, {steps} steps trained:\n{outputs[0][-4000:]}")
    return (steps - first) / (times[-1] - times[first - 1])


def print_paired_row(name, pairs):
    """A table row: the medians of both sides' steps/s, and of the repeats' own ratios."""
    ratios = [b / a for a, b in pairs]
    print(f"| {name} | {statistics.median(a for a, _ in pairs):.3f} | "
          f"{statistics.median(b for _, b in pairs):.3f} | "
          f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}) |", flush=True)


def run_once(args, size, data, steps, copy, launcher):
    port = free_port()
    return run_launchers([command(args, size, data, steps, copy, machine, port, launcher)
                          for machine in range(MACHINES)], steps, args.first)


def window_parser(description):
    """The flags of a paired benchmark that measures --window steps after --first."""
    parser = argparse.ArgumentParser(description=description,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, "gpt-10m,gpt-50m", first=5, threads=1)
    parser.add_argument("--window", type=int, default=15, help="steps measured")
    return parser


def window_sizes(args):
    """The sizes asked for, once --first and --window are checked."""
    if args.first < 1 or args.window < 1:
        sys.exit("--first and --window must be at least 1")
    return chosen_sizes(args.sizes, SIZES)


def main():
    parser = window_parser(__doc__)
    parser.add_argument("--baseline", help="another build's launcher: the copy's runs of both")
    parser.add_argument("--baseline-plugin-dir", help="the baseline build's plugins_out")
    args = parser.parse_args()
    if bool(args.baseline) != bool(args.baseline_plugin_dir):
        sys.exit("--baseline and --baseline-plugin-dir go together")
    sizes = window_sizes(args)
    root = tempfile.mkdtemp(prefix="dpl-shard-copy-cost-")
    steps = args.first + args.window
    this = (args.launcher, args.plugin_dir)
    if args.baseline:
        # Both sides with the copy: the baseline build's (False) and this one's (True).
        header = "steps/s, baseline | steps/s, this launcher | this / baseline"
        labels = ("this launcher", "baseline")

        def side(this_one):
            return True, this if this_one else (args.baseline, args.baseline_plugin_dir)
    else:
        header = "steps/s without the copy | steps/s with | with / without"
        labels = ("with", "without")

        def side(copy):
            return copy, this
    print(f"| size | {header} (median, range) |\n| --- | --- | --- | --- |")
    try:
        for name in sizes:
            size = SIZES[name]
            data = os.path.join(root, name)
            write_tokens(data, size, steps)
            print_paired_row(name, paired_runs(
                args.repeats, name, lambda flag: run_once(args, size, data, steps, *side(flag)),
                lambda rate: rate, labels))
    finally:
        shutil.rmtree(root, ignore_errors=True)

if __name__ == "__main__":
    main()
