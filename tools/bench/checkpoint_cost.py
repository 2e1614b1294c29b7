#!/usr/bin/python3
"""What checkpoints cost a training run's throughput (Note [Checkpoints that do not stop
training] in launcher/training/checkpoint_writer.hpp): dpl's GPT (`--model gpt`, AdamW) trained
with a checkpoint every --every steps against the same run without checkpoints, on this machine.

Sizes: gpt-50m (10 layers, 640 dims, block 256, byte vocabulary: 49.6M parameters, the 50M GPT
of docs/performance.md's size sweep) and gpt2-124m (GPT-2 small: 12 layers, 12 heads, 768 dims,
vocabulary 50304, 124M parameters; block 256 instead of 1024 on the CPU, batch 1); tiny for a
smoke run. AdamW keeps two tensors a parameter, so a checkpoint holds three times the
parameters: 0.6 GB at 50M, 1.5 GB at 124M.

Method: each run trains --first + 3 x --every steps, rank 0 logging every step (the launcher
stamps each line, --log-time iso); the rate is the steps from the line of step --first to the
last over the time between them, so the window holds three checkpoints (their copies, and their
writes overlapping the steps after them) and not the start-up. The last checkpoint, at the end,
is outside it. Each repeat runs both sides back to back, alternating which goes first; the ratio
is the median of the repeats' own ratios. The training pauses and the writes' durations come from
rank 0's lines "checkpoint of step N: PATH (written in W while training went on, which paused P
to copy it)".

Smoke:     tools/bench/checkpoint_cost.py --sizes tiny --every 5 --first 3 --repeats 1
Final run: tools/bench/checkpoint_cost.py --sizes gpt-50m,gpt2-124m --every 20 --repeats 3
"""
import argparse
import array
import datetime
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SIZES = {
    "tiny": dict(layers=2, heads=4, dim=64, block=32, vocab=256, batch=8),
    "gpt-50m": dict(layers=10, heads=10, dim=640, block=256, vocab=256, batch=4),
    "gpt2-124m": dict(layers=12, heads=12, dim=768, block=256, vocab=50304, batch=1),
}
STEP_LINE = re.compile(r"^(\S+) \[rank 0\] epoch: \d+ \[\d+/\d+\] training loss")
CHECKPOINT_LINE = re.compile(r"\[rank 0\] checkpoint of step \d+: .* \(written in ([0-9.]+) "
                             r"(ms|s) while training went on, which paused ([0-9.]+) (ms|s)")


def seconds(value, unit):
    return float(value) / 1000.0 if unit == "ms" else float(value)


def write_tokens(folder, size, steps):
    """train.bin and val.bin of seeded random token ids (uint16), enough for `steps` steps."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(0)
    length = (steps * size["batch"] + 16) * size["block"] + 2
    ids = array.array("H", (rng.randrange(size["vocab"]) for _ in range(length)))
    with open(os.path.join(folder, "train.bin"), "wb") as f:
        ids.tofile(f)
    with open(os.path.join(folder, "val.bin"), "wb") as f:
        ids[:4 * size["block"] + 1].tofile(f)


def command(args, size, data, steps, checkpoints):
    model = ",".join(f"{k}={size[k]}" for k in ("layers", "heads", "dim", "block"))
    line = [args.launcher, "--plugin-dir", args.plugin_dir, "--model", "gpt", "--model-options",
            model, "--data", "tokens", "--data-dir", data, "--data-options",
            f"block={size['block']},vocab={size['vocab']}", "--data-cache", "none",
            "--num-processes", "1", "--threads-per-worker", str(args.threads),
            "--batch-size", str(size["batch"]), "--max-steps", str(steps), "--optimizer",
            "adamw", "--lr", "1e-3", "--weight-decay", "0.1", "--seed", "0",
            "--master-port", "0", "--no-progress", "--no-eval", "--log-interval", "1",
            "--log-time", "iso"]
    if checkpoints:
        line += ["--checkpoint-dir", checkpoints, "--checkpoint-every", str(args.every)]
    return line


def run_once(args, size, data, steps, checkpoints):
    done = subprocess.run(command(args, size, data, steps, checkpoints), capture_output=True,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"the run failed ({done.returncode}):\n{done.stdout[-4000:]}{done.stderr}")
    times = [datetime.datetime.fromisoformat(m.group(1)).timestamp()
             for m in map(STEP_LINE.match, done.stdout.splitlines() + done.stderr.splitlines())
             if m]
    if len(times) < steps:
        sys.exit(f"{len(times)} step lines, {steps} steps trained:\n{done.stderr[-4000:]}")
    rate = (steps - args.first) / (times[-1] - times[args.first - 1])
    written = [(seconds(m.group(1), m.group(2)), seconds(m.group(3), m.group(4)))
               for m in CHECKPOINT_LINE.finditer(done.stderr + done.stdout)]
    if checkpoints:
        shutil.rmtree(checkpoints, ignore_errors=True)
    return {"steps_per_s": rate, "writes_s": [w for w, _ in written],
            "pauses_s": [p for _, p in written]}


def add_run_arguments(parser, sizes, first, threads):
    """The flags every GPT throughput benchmark of this folder takes."""
    parser.add_argument("--sizes", default=sizes)
    parser.add_argument("--first", type=int, default=first, help="steps before the window")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=threads, help="--threads-per-worker")
    parser.add_argument("--launcher", default=os.path.join(REPO, "build", "launcher", "launcher"))
    parser.add_argument("--plugin-dir", default=os.path.join(REPO, "build", "plugins_out"))


def chosen_sizes(text, known):
    """The sizes of a --sizes list, each one of `known`."""
    sizes = [s for s in text.split(",") if s]
    unknown = [s for s in sizes if s not in known]
    if unknown:
        sys.exit(f"unknown size(s) {unknown}: choose from {', '.join(known)}")
    return sizes


def paired_runs(repeats, name, run, rate, labels=("with", "without")):
    """Each repeat runs run(False) and run(True) back to back, alternating which goes first;
    [(without, with)] of every repeat. `rate` reads steps/s from a run's result, and `labels`
    name the True and the False side, for the log."""
    pairs = []
    for repeat in range(repeats):
        sides = [False, True] if repeat % 2 == 0 else [True, False]
        runs = {side: run(side) for side in sides}
        pairs.append((runs[False], runs[True]))
        print(f"{name} repeat {repeat + 1}: {rate(runs[True]):.3f} {labels[0]}, "
              f"{rate(runs[False]):.3f} {labels[1]}", file=sys.stderr, flush=True)
    return pairs


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_arguments(parser, "gpt-50m,gpt2-124m", first=10, threads=2)
    parser.add_argument("--every", type=int, default=20, help="steps between checkpoints")
    args = parser.parse_args()
    sizes = chosen_sizes(args.sizes, SIZES)
    if args.first < 1 or args.every < 1:
        sys.exit("--first and --every must be at least 1")
    root = tempfile.mkdtemp(prefix="dpl-checkpoint-cost-")
    steps = args.first + 3 * args.every
    print("| size | steps/s without | steps/s with | with / without | pause per checkpoint (s) "
          "| write (s) |\n| --- | --- | --- | --- | --- | --- |")
    try:
        for name in sizes:
            size = SIZES[name]
            data = os.path.join(root, name)
            write_tokens(data, size, steps)
            pairs = paired_runs(
                args.repeats, name,
                lambda with_: run_once(args, size, data, steps,
                                       os.path.join(root, "checkpoints") if with_ else ""),
                lambda run: run["steps_per_s"])
            without = statistics.median(a["steps_per_s"] for a, _ in pairs)
            with_ = statistics.median(b["steps_per_s"] for _, b in pairs)
            ratio = statistics.median(b["steps_per_s"] / a["steps_per_s"] for a, b in pairs)
            pauses = [p for _, b in pairs for p in b["pauses_s"]]
            writes = [w for _, b in pairs for w in b["writes_s"]]
            print(f"| {name} | {without:.3f} | {with_:.3f} | {ratio:.3f} | "
                  f"{statistics.median(pauses) if pauses else 0:.3f} | "
                  f"{statistics.median(writes) if writes else 0:.2f} |", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
