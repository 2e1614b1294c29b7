#!/usr/bin/env python3
"""Compiled-step benchmark: samples/s of torchvision's ResNet-18 at CIFAR-10's shapes, dpl's
`--model compiled` (a package of tools/compile_model.py) against the PyTorch DDP peer
(resnet_ddp.py) eager and torch.compile'd, on the same data, model, global batch and SGD.

Sides (2 processes of 1 thread each, gloo, fp32 by default):
  compiled       dpl with --model compiled (the package made once, from the tool's cache);
  peer           resnet_ddp.py: DDP, eager;
  peer-compiled  resnet_ddp.py --compile: DDP over torch.compile, its Inductor cache warmed by a
                 run before the measured ones (the warm-cache start-up a user sees).
The data: CIFAR-10 binary records of seeded random pixels (the cost of a step does not depend on
them). The method is bench_lm.py's: loss lines timestamped as they arrive, steady samples/s from
the line at --first to the last, start-up = arrival of the --first line - the time those steps
take at the steady rate, ratios the median of each repeat's own ratios, the sides rotated.

    tools/python tools/bench/bench_resnet.py --repeats 5
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import numpy as np  # noqa: E402

sys.path.insert(0, HERE)
import bench_lm  # noqa: E402
from bench_vs_peer import PHASES, timed_run  # noqa: E402

SIDES = ("compiled", "peer", "peer-compiled")


def write_cifar(folder, samples):
    """data_batch_1..5.bin and test_batch.bin of seeded random records."""
    os.makedirs(folder, exist_ok=True)
    rng = np.random.default_rng(0)
    per_file = (samples + 4) // 5
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        records = rng.integers(0, 256, (per_file, 3073), dtype=np.uint8)
        records[:, 0] %= 10
        records.tofile(os.path.join(folder, name))


def make_package(args, folder):
    path = os.path.join(folder, "resnet18.pt2")
    made = subprocess.run([sys.executable, os.path.join(REPO, "tools", "compile_model.py"), path,
                           "--module", "torchvision.models:resnet18", "--kwargs",
                           '{"num_classes": 10}', "--input-shape", "3,32,32"],
                          capture_output=True, text=True)
    if made.returncode != 0:
        sys.exit(f"tools/compile_model.py failed:\n{made.stdout}{made.stderr}")
    print(made.stdout.splitlines()[0], file=sys.stderr)
    return path


def command(args, side, data, package):
    if side == "compiled":
        return [args.launcher, "--model", "compiled", "--model-options", f"file={package}",
                "--backend", "gloo", "--num-processes", str(args.processes),
                "--threads-per-worker", "1", "--batch-size", str(args.batch), "--data", "cifar10",
                "--data-dir", data, "--data-cache", "none", "--optimizer", "sgd", "--lr", "0.05",
                "--momentum", "0.9", "--max-steps", str(args.steps), "--epochs", "100",
                "--seed", "0", "--master-port", "0", "--no-progress", "--no-eval",
                "--log-interval", str(args.log_every)]
    return [sys.executable, os.path.join(HERE, "resnet_ddp.py"), "--data", data,
            "--num-processes", str(args.processes), "--batch-size",
            str(args.batch // args.processes), "--max-batches", str(args.steps), "--log-every",
            str(args.log_every), "--port", str(bench_lm.free_port())] + (
        ["--compile"] if side == "peer-compiled" else [])


def measure(args, side, data, package, env):
    worker = (lambda c: b"--worker" in c) if side == "compiled" else (
        lambda c: b"multiprocessing" in c)
    return bench_lm.measure(command(args, side, data, package), env, worker, args.first,
                            args.batch)


def report(args, runs):
    def median(side, key):
        return statistics.median(m[key] for m in runs[side]) if runs.get(side) else None

    def paired(a, b):
        if not runs.get(a) or not runs.get(b):
            return None
        return statistics.median(x["rate"] / y["rate"] for x, y in zip(runs[a], runs[b]))

    def cell(value, form):
        return "-" if value is None else format(value, form)

    print(f"ResNet-18 (torchvision, 10 classes) at CIFAR-10's shapes, {args.processes}x1 gloo, "
          f"fp32, global batch {args.batch}, steady rate from step {args.first} to "
          f"{args.steps}, {args.repeats} repeats")
    print("| side | samples/s | start-up s | RSS MiB | compiled/side |")
    print("|---|---|---|---|---|")
    for side in args.sides:
        print(f"| {side} | {cell(median(side, 'rate'), '.1f')} | "
              f"{cell(median(side, 'startup'), '.2f')} | {cell(median(side, 'rss_mib'), '.0f')} | "
              f"{cell(paired('compiled', side), '.2f')} |")
    if runs.get("compiled") and all(p in m for m in runs["compiled"] for p in PHASES):
        print("dpl's time per step (ms, medians): " +
              ", ".join(f"{p} {median('compiled', p):.1f}" for p in PHASES))


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", default=os.path.join(REPO, "build", "launcher", "launcher"))
    p.add_argument("--sides", default=",".join(SIDES), help="comma list of " + ", ".join(SIDES))
    p.add_argument("--processes", type=int, default=2)
    p.add_argument("--batch", type=int, default=128, help="the global batch (default 128)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--first", type=int, default=10)
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    args.sides = args.sides.split(",")
    if any(side not in SIDES for side in args.sides) or args.batch % args.processes:
        p.error(f"--sides takes {', '.join(SIDES)}; --batch must divide among the processes")
    scratch = tempfile.TemporaryDirectory(prefix="bench_resnet-")
    data = os.path.join(scratch.name, "cifar")
    write_cifar(data, args.batch * (args.steps + 2))
    package = make_package(args, scratch.name) if "compiled" in args.sides else None
    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if "peer-compiled" in args.sides:  # torch.compile's cache warmed, not measured
        timed_run(command(args, "peer-compiled", data, None), env, lambda c: False, lambda s: s)
    runs = {side: [] for side in args.sides}
    for repeat in range(args.repeats):
        order = args.sides[repeat % len(args.sides):] + args.sides[:repeat % len(args.sides)]
        for side in order:
            runs[side].append(measure(args, side, data, package, env))
        print(f"repeat {repeat + 1}/{args.repeats}: " + ", ".join(
            f"{side} {runs[side][-1]['rate']:.1f} samples/s" for side in args.sides),
            file=sys.stderr, flush=True)
    report(args, runs)


if __name__ == "__main__":
    main()
