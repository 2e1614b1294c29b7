#!/usr/bin/env python3
"""The launcher's own overhead against torchrun's: how long from the command to the first line of
a training script, and to its first step, with N ranks on this machine.

    tools/bench/launcher_overhead.py [--processes 2] [--repeats 7] [--launcher build/launcher/launcher]

Each repeat runs, back to back (rotating which goes first, as this machine's speed drifts):
  dpl       launcher --num-processes N --threads-per-worker T -- python3 first_step.py
  torchrun  python3 -m torch.distributed.run --nproc-per-node N first_step.py (the pinned torch's
            torchrun command; OMP_NUM_THREADS=T, as dpl sets it)
  python    python3 first_step.py as one rank started by hand with torchrun's variables: no
            launcher at all, the floor under both.
first_step.py prints "rank R started" before it imports anything but os and sys, and "rank R step
1" after its first optimizer step. This script timestamps every line as it arrives: "to first
line" is when the last rank's first line came (every rank is running its script), "to first step"
when the last rank's step line came (the interpreter, `import torch`, the rendezvous and one step
of the recipe's ConvNet included). A ratio is the median over the repeats of each repeat's own
ratio, with the smallest and largest beside it.
"""
import argparse
import os
import re
import socket
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the programs it runs are sys.executable's, the environment's

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
SCRIPT = os.path.join(HERE, "first_step.py")
STARTED = re.compile(rb"rank (\d+) started")
STEPPED = re.compile(rb"rank (\d+) step 1 loss")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def commands(args):
    """side -> (command, extra environment, ranks it starts)."""
    processes, threads = str(args.processes), str(args.threads)
    return {
        "dpl": ([args.launcher, "--num-processes", processes, "--threads-per-worker", threads,
                 "--master-port", "0", "--log-time", "none", "--", sys.executable, SCRIPT],
                {}, args.processes),
        "torchrun": ([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                      processes, "--master-port", str(free_port()), SCRIPT],
                     {"OMP_NUM_THREADS": threads}, args.processes),
        "python": ([sys.executable, SCRIPT],
                   {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
                    "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(free_port()),
                    "OMP_NUM_THREADS": threads}, 1),
    }


def one_run(command, extra, ranks):
    """Seconds from the start of `command` to the last rank's first line and to its step line."""
    env = dict(os.environ, **extra)
    start = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    started, stepped, output = {}, {}, []
    for line in process.stdout:
        now = time.perf_counter() - start
        output.append(line)
        for pattern, seen in ((STARTED, started), (STEPPED, stepped)):
            for match in pattern.finditer(line):  # the ranks' lines may share one
                seen.setdefault(int(match.group(1)), now)
    process.wait()
    if process.returncode != 0 or len(started) != ranks or len(stepped) != ranks:
        text = b"".join(output).decode(errors="replace")
        sys.exit(f"{' '.join(command)} failed (exit {process.returncode}; {len(started)} of "
                 f"{ranks} ranks started, {len(stepped)} stepped):\n{text[-3000:]}")
    return {"first_line": max(started.values()), "first_step": max(stepped.values())}


def spread(values, form):
    return f"{statistics.median(values):{form}} ({min(values):{form}}-{max(values):{form}})"


def report(args, runs):
    print(f"{args.repeats} repeats, {args.processes} ranks of {args.threads} thread(s) each "
          "(python: one rank, no launcher); medians in ms, the smallest and largest in brackets; "
          "ratios the median of the repeats' own ratios")
    print("| command | to first line ms | to first step ms |")
    print("|---|---|---|")
    for side, measured in runs.items():
        print(f"| {side} | " + " | ".join(
            spread([m[key] * 1000 for m in measured], ".0f")
            for key in ("first_line", "first_step")) + " |")
    for key, name in (("first_line", "to first line"), ("first_step", "to first step")):
        ratios = [d[key] / t[key] for d, t in zip(runs["dpl"], runs["torchrun"])]
        print(f"dpl / torchrun {name}: {spread(ratios, '.3f')}")
    # What each launcher adds over starting the script by hand.
    added = [(d["first_line"] - p["first_line"]) / (t["first_line"] - p["first_line"])
             for d, t, p in zip(runs["dpl"], runs["torchrun"], runs["python"])]
    print(f"dpl's own time to first line / torchrun's (each less python's): {spread(added, '.3f')}")


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", default=os.path.join(REPO, "build", "launcher", "launcher"))
    p.add_argument("--processes", type=int, default=2, help="ranks on this machine")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each rank")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    if not os.access(args.launcher, os.X_OK):
        p.error(f"no launcher at {args.launcher}: build dpl (tools/build.sh) or name it with "
                "--launcher")
    if args.repeats < 1 or args.processes < 1 or args.threads < 1:
        p.error("--repeats, --processes and --threads must be at least 1")
    sides = ("dpl", "torchrun", "python")
    runs = {side: [] for side in sides}
    for repeat in range(args.repeats):
        order = sides[repeat % len(sides):] + sides[:repeat % len(sides)]
        for side in order:
            runs[side].append(one_run(*commands(args)[side]))
        print(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(
            f"{side} {runs[side][-1]['first_line'] * 1000:.0f}/"
            f"{runs[side][-1]['first_step'] * 1000:.0f} ms" for side in sides),
            file=sys.stderr, flush=True)
    report(args, runs)


if __name__ == "__main__":
    main()
