#!/usr/bin/env python3
"""The cost of --trace: paired runs of the launcher with and without it, back to back.

Each pair trains the same job twice, once with --trace FILE and once without, the order rotating
from pair to pair; the machine's speed drifts over minutes (a shared VM), so the figure is the
median over the pairs of each pair's own ratio, not a ratio of medians taken minutes apart.
Three figures per run:
  * training throughput: the samples/s of the launcher's "training done: ..." line (from the
    first step to the last: what recording costs inside the loop);
  * wall time of the whole launcher (start-up, the clock alignment, sending every rank's trace
    through the store and writing the merged file included);
  * CPU time of the launcher and all its workers (user + system, from the children's rusage):
    what recording costs in work, much less disturbed than the clock by other processes on a
    shared machine.

Usage: tools/bench/trace_overhead.py [--pairs 8] [--steps 60] [--processes 2] [--model convnet]
       [--launcher build/launcher/launcher] [-- extra launcher flags]
"""
import argparse
import os
import resource
import re
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the programs it runs are sys.executable's, the environment's

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DONE = re.compile(r"training done: (\d+) steps, ([0-9.]+) s, ([0-9.]+) samples/s")


def run(launcher, flags, trace_file):
    command = [launcher] + flags + (["--trace", trace_file] if trace_file else [])
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.monotonic()
    finished = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, check=False)
    wall = time.monotonic() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    match = DONE.search(finished.stdout)
    if finished.returncode != 0 or not match:
        sys.exit(f"{' '.join(command)} failed ({finished.returncode}):\n{finished.stdout}")
    return float(match.group(3)), wall, cpu


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--model", default="convnet")
    parser.add_argument("--launcher", default=os.path.join(REPO, "build/launcher/launcher"))
    parser.add_argument("extra", nargs="*", help="more launcher flags (after --)")
    args = parser.parse_args(argv)
    flags = ["--model", args.model, "--num-processes", str(args.processes), "--max-steps",
             str(args.steps), "--no-eval", "--no-progress", "--master-port", "0",
             "--threads-per-worker", "1", "--log-time", "none"] + args.extra
    rate_ratios, wall_ratios, cpu_ratios = [], [], []
    with tempfile.TemporaryDirectory() as folder:
        trace_file = os.path.join(folder, "trace.json")
        for pair in range(args.pairs):
            order = [None, trace_file] if pair % 2 == 0 else [trace_file, None]
            results = {}
            for trace in order:
                results[bool(trace)] = run(args.launcher, flags, trace)
            (rate_off, wall_off, cpu_off), (rate_on, wall_on, cpu_on) = results[False], results[True]
            rate_ratios.append(rate_on / rate_off)
            wall_ratios.append(wall_on / wall_off)
            cpu_ratios.append(cpu_on / cpu_off)
            print(f"pair {pair}: samples/s {rate_off:8.1f} / {rate_on:8.1f}, wall {wall_off:6.2f} / "
                  f"{wall_on:6.2f} s, CPU {cpu_off:6.2f} / {cpu_on:6.2f} s (without / with --trace)",
                  flush=True)
        trace_bytes = os.path.getsize(trace_file)
    throughput_cost = (1.0 - statistics.median(rate_ratios)) * 100.0
    wall_cost = (statistics.median(wall_ratios) - 1.0) * 100.0
    cpu_cost = (statistics.median(cpu_ratios) - 1.0) * 100.0
    print(f"--trace costs {throughput_cost:+.2f} % of the training throughput, "
          f"{wall_cost:+.2f} % of the wall time and {cpu_cost:+.2f} % of the CPU time "
          f"(medians of {args.pairs} pairs' ratios; "
          f"{args.processes} processes x {args.steps} steps of {args.model}; "
          f"trace file {trace_bytes} bytes)")


if __name__ == "__main__":
    main(sys.argv[1:])
