#!/usr/bin/env python3
"""What splitting a machine's cores into processes costs before any communication.

A data-parallel run of P processes x 1 thread does, per step, what one process of P threads does:
forward and backward of the global batch, then the optimizer. Even with free communication it
is only as fast as P one-thread processes computing forward+backward side by side on 1/P of the
batch each, against one P-thread process on the whole batch. This measures exactly that, with
no launcher, no backend and no optimizer: the same TorchScript module, the same inputs, plain
torch in Python, so the ratio is a ceiling for any P x 1 / 1 x P throughput on this machine and
this libtorch, dpl's or the peer's.

Each repeat runs both layouts back to back (rotating which goes first); the P processes of the
split layout start together and each times its own steps. Figures are medians over the steps
after a warm-up and over the repeats; the ratio is the median of the repeats' own ratios, and
also the best repeat of one layout against the best of the other.

    # the 10M MLP of the scaling issue (written once by tools/export_model.py, as scale_sweep.py)
    tools/bench/split_ceiling.py --size 10M --batch 128
    # any module: image-like float input, or token ids for a language model
    tools/bench/split_ceiling.py --module net.pt --input-shape 1,28,28
    tools/bench/split_ceiling.py --module gpt.pt --input-shape 256 \\
        --token-ids 256 --batch 4

The split layout's step time is also the floor of a P x 1 run's step: a data-parallel program
cannot take less per step than its processes' forward+backward on those cores.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the programs it runs are sys.executable's, the environment's

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import sized_mlp  # noqa: E402
from bench_vs_peer import TUNED_MALLOC  # noqa: E402


def worker(args):
    """One process: forward+backward `args.steps` times on its share of the batch; prints the
    median step time in ms after the warm-up as one JSON line."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    module = torch.jit.load(args.module)
    shape = [args.batch] + [int(v) for v in args.input_shape.split(",")]
    if args.token_ids:
        inputs = torch.randint(0, args.token_ids, shape)
        targets = torch.randint(0, args.token_ids, shape)
    else:
        inputs = torch.randn(shape)
        targets = torch.randint(0, args.classes, (args.batch,))
    times = []
    for _ in range(args.warmup + args.steps):
        start = time.perf_counter()
        for parameter in module.parameters():
            parameter.grad = None
        out = module(inputs)
        loss = F.cross_entropy(out.reshape(-1, out.size(-1)), targets.reshape(-1))
        loss.backward()
        times.append(time.perf_counter() - start)
    print(json.dumps({"ms": statistics.median(times[args.warmup:]) * 1e3}), flush=True)


def run_layout(args, processes, threads):
    """P processes of `threads` threads on batch / P each, started together: the slowest
    process's median step time in ms (the step of a data-parallel run waits for it)."""
    command = [sys.executable, os.path.abspath(__file__), "--worker", "--module", args.module,
               "--input-shape", args.input_shape, "--batch", str(args.batch // processes),
               "--threads", str(threads), "--steps", str(args.steps),
               "--warmup", str(args.warmup), "--classes", str(args.classes),
               "--token-ids", str(args.token_ids)]
    # glibc's thresholds raised, as for the tuned peer: fresh gradients every step would otherwise
    # be new mappings, and their page faults would be measured as compute.
    env = dict(os.environ, **TUNED_MALLOC)
    children = [subprocess.Popen(command + ["--seed", str(rank)], stdout=subprocess.PIPE,
                                 text=True, env=env) for rank in range(processes)]
    results = []
    for child in children:
        out, _ = child.communicate()
        if child.returncode != 0:
            sys.exit(f"a worker of {processes}x{threads} failed (exit {child.returncode}); "
                     f"its command: {' '.join(command)}")
        results.append(json.loads(out.strip().splitlines()[-1])["ms"])
    return max(results)


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--module", help="a TorchScript file (tools/export_model.py writes one)")
    which.add_argument("--size", help="scale_sweep.py's MLP of about this many parameters "
                       "(10M, 100M, ...), exported once into --cache")
    p.add_argument("--cache", default=os.path.join(tempfile.gettempdir(), "dpl-split-ceiling"),
                   help="folder for the --size modules (default: %(default)s)")
    p.add_argument("--input-shape", default="1,28,28", help="one sample's shape")
    p.add_argument("--token-ids", type=int, default=0, metavar="N",
                   help="int64 ids below N in, a target id per position (a language model)")
    p.add_argument("--classes", type=int, default=10, help="classes of a float-input model")
    p.add_argument("--batch", type=int, default=128, help="the global batch (default 128)")
    p.add_argument("--processes", type=int, default=2, help="P: the cores split into P "
                   "one-thread processes against one process of P threads (default 2)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.processes < 2 or args.batch % args.processes:
        p.error(f"--batch {args.batch} must split evenly over --processes {args.processes} >= 2")
    if args.size:
        try:
            args.hidden = sized_mlp.hidden_width(sized_mlp.parse_size(args.size))
        except ValueError as error:
            p.error(f"--size: {error}")
    if args.module and not os.path.isfile(args.module):
        p.error(f"--module {args.module}: no such file (tools/export_model.py writes one)")
    return args


def main(argv):
    args = parse_args(argv)
    if args.worker:
        return worker(args)
    if args.size:
        os.makedirs(args.cache, exist_ok=True)
        args.module = sized_mlp.written_module(args.hidden, args.cache)
    p = args.processes
    layouts = [(1, p), (p, 1)]
    times = {layout: [] for layout in layouts}
    for repeat in range(args.repeats):
        for layout in layouts[repeat % 2:] + layouts[:repeat % 2]:
            times[layout].append(run_layout(args, *layout))
        print(f"repeat {repeat + 1}/{args.repeats}: " +
              ", ".join(f"{a}x{b} {times[(a, b)][-1]:.1f} ms" for a, b in layouts),
              file=sys.stderr, flush=True)
    print(f"{os.path.basename(args.module)}, global batch {args.batch}, forward+backward only, "
          f"medians of {args.repeats} repeats:")
    for a, b in layouts:
        ms = statistics.median(times[(a, b)])
        print(f"  {a} process(es) x {b} thread(s): {ms:.1f} ms a step, "
              f"{args.batch / ms * 1e3:,.0f} samples/s")
    ratio = statistics.median(one / split for one, split in zip(times[(1, p)], times[(p, 1)]))
    # The best repeats too: where one layout's speed has modes (on a virtual machine a P-thread
    # step waits for its slowest vCPU), the two bests compare each layout at its fastest.
    best = min(times[(1, p)]) / min(times[(p, 1)])
    print(f"ceiling of {p}x1 / 1x{p} throughput: {ratio:.3f} (median of the repeats' ratios), "
          f"{best:.3f} (best repeat against best repeat)")


if __name__ == "__main__":
    main(sys.argv[1:])
