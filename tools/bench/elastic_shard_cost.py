#!/usr/bin/python3
"""What an elastic job pays a step for keeping its sharded optimizer alive over a regroup in place
on the shared-memory sums (Note [A machine's shared memory over a regroup] in
launcher/training/collectives/local_reduce.cpp, PartSnapshot in launcher/training/part_copy.hpp):
dpl's GPT (`--model gpt`, AdamW) trained by two launchers on this machine's loopback, two workers
each, `--shard-optimizer on --local-reduce shm`, as an elastic job (`--num-machines 2:3`, both
machines there from the start) against the same job of a fixed size (`--num-machines 2`).

The fixed job's workers of a machine update its one shared copy of the parameters, each its part.
The elastic job's workers keep values of their own instead (an abort must not leave a machine's
one copy half updated), so each also copies every part the machine's workers updated into its own
values, and copies its part's values and state aside before its update (the snapshot a failure
falls back on).

Method: as shard_copy_cost.py (paired, alternating which side goes first; the ratio is the median
of the repeats' own ratios, steps/s elastic over fixed).

Smoke:     tools/bench/elastic_shard_cost.py --sizes tiny --first 3 --window 5 --repeats 1
Final run: tools/bench/elastic_shard_cost.py --sizes gpt-10m,gpt-50m --repeats 3
"""
import os
import shutil
import tempfile

from checkpoint_cost import paired_runs, write_tokens
from shard_copy_cost import (SIZES, free_port, print_paired_row, run_launchers, window_parser,
                             window_sizes)

MACHINES = 2
WORKERS = 2


def command(args, size, data, steps, elastic, machine, port, checkpoints):
    model = ",".join(f"{k}={size[k]}" for k in ("layers", "heads", "dim", "block"))
    # An elastic job must name a checkpoint folder (its fallback); none is written in the window.
    elastic_flags = ["--num-machines", f"{MACHINES}:{MACHINES + 1}", "--join-grace", "1",
                     "--checkpoint-dir", checkpoints] if elastic else ["--num-machines",
                                                                      str(MACHINES)]
    # Both launchers start at once; the elastic job waits --join-grace for a third.
    return [args.launcher, "--plugin-dir", args.plugin_dir, "--model", "gpt", "--model-options",
            model, "--data", "tokens", "--data-dir", data, "--data-options",
            f"block={size['block']},vocab={size['vocab']}", "--data-cache", "none",
            "--backend", "gloo", *elastic_flags, "--machine-id", str(machine), "--master-addr", "127.0.0.1", "--master-port",
            str(port), "--num-processes", str(WORKERS), "--threads-per-worker", str(args.threads),
            "--batch-size", str(size["batch"]), "--max-steps", str(steps), "--optimizer",
            "adamw", "--lr", "1e-3", "--weight-decay", "0.1", "--seed", "0", "--shard-optimizer",
            "on", "--local-reduce", "shm", "--no-progress", "--no-eval", "--log-interval", "1",
            "--log-time", "iso"]


def run_once(args, size, data, steps, elastic):
    port = free_port()
    checkpoints = tempfile.mkdtemp(prefix="checkpoints-", dir=data)
    return run_launchers([command(args, size, data, steps, elastic, machine, port, checkpoints)
                          for machine in range(MACHINES)], steps, args.first)


def main():
    parser = window_parser(__doc__)
    parser.add_argument("--batch-size", type=int, default=12,
                        help="the global batch, whole at 4 and 6 workers (default 12)")
    args = parser.parse_args()
    sizes = window_sizes(args)
    root = tempfile.mkdtemp(prefix="dpl-elastic-shard-cost-")
    steps = args.first + args.window
    print("| size | steps/s, fixed job | steps/s, elastic job | elastic / fixed (median, range) |"
          "\n| --- | --- | --- | --- |")
    try:
        for name in sizes:
            size = dict(SIZES[name], batch=args.batch_size)
            data = os.path.join(root, name)
            write_tokens(data, size, steps)
            print_paired_row(name, paired_runs(
                args.repeats, name, lambda elastic: run_once(args, size, data, steps, elastic),
                lambda rate: rate, ("elastic", "fixed")))
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
