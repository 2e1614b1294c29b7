#!/usr/bin/env python3
"""Samples/s of dpl on one GPU against the PyTorch DDP peer on the same GPU, with the same pip torch.

dpl: `launcher --device cuda --backend nccl --num-processes 1` with the convnet plugin built against
the pip torch that runs the peer. Peer: tools/bench/convnet_ddp_cuda.py --device cuda (DDP over
NCCL, world size 1, global batch 128). Same model, data, optimizer (Adadelta, lr 0.5) and batch.
The method is bench_vs_peer.py's (its functions are used here): each program prints a loss line
every 10 steps, this script timestamps the lines as they arrive, the steady rate is taken between
the line at --first and the last one, repeats alternate which side goes first, and the ratio is
the median of the repeats' own ratios.
"""
import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the programs it runs are sys.executable's, the environment's

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from bench_vs_peer import GLOBAL_BATCH, one_measurement  # noqa: E402


def dpl_command(args, steps):
    return [args.launcher, "--device", "cuda", "--backend", "nccl", "--model", "convnet",
            "--num-processes", "1", "--batch-size", str(GLOBAL_BATCH), "--max-steps", str(steps),
            "--data-dir", args.data, "--plugin-dir", args.plugin_dir, "--master-port", "0",
            "--no-progress", "--no-eval", "--log-interval", "10"]


def peer_command(args, steps, port):
    return [sys.executable, os.path.join(HERE, "convnet_ddp_cuda.py"), "--data", args.data,
            "--device", "cuda", "--backend", "nccl", "--num-processes", "1",
            "--batch-size", str(GLOBAL_BATCH), "--max-batches", str(steps), "--port", str(port)]


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", required=True)
    p.add_argument("--plugin-dir", required=True, help="holds the CUDA convnet and nccl plugins")
    p.add_argument("--data", required=True)
    p.add_argument("--first", type=int, default=50, help="steady rate from this step on")
    p.add_argument("--steps", type=int, default=400, help="steps of every run")
    p.add_argument("--repeats", type=int, default=2)
    args = p.parse_args()

    env = dict(os.environ)
    runs = {"dpl": [], "peer": []}
    for repeat in range(args.repeats):
        port = 29710 + repeat
        sides = {
            "dpl": (lambda k: dpl_command(args, k), lambda c: b"--worker" in c, lambda s: s),
            "peer": (lambda k: peer_command(args, k, port), lambda c: b"multiprocessing" in c,
                     lambda s: s + 1),  # the peer prints after batch index s, i.e. s + 1 steps
        }
        order = ("dpl", "peer") if repeat % 2 == 0 else ("peer", "dpl")
        for side in order:
            make_cmd, worker_filter, steps_of_line = sides[side]
            runs[side].append(one_measurement(make_cmd, env, worker_filter, steps_of_line,
                                              args.first, args.steps))
        print(f"repeat {repeat + 1}/{args.repeats}: dpl {runs['dpl'][-1]['rate']:.0f}/s, "
              f"peer {runs['peer'][-1]['rate']:.0f}/s", file=sys.stderr, flush=True)

    def median(side, key):
        return statistics.median(m[key] for m in runs[side])

    ratio = statistics.median(d["rate"] / o["rate"] for d, o in zip(runs["dpl"], runs["peer"]))
    print(f"one GPU, global batch {GLOBAL_BATCH}, steady rate from step {args.first} to "
          f"{args.steps}, medians of {args.repeats} repeats")
    print("| side | samples/s | start-up s | peak RSS MiB |")
    print("|---|---|---|---|")
    for side in ("dpl", "peer"):
        print(f"| {side} | {median(side, 'rate'):.0f} | {median(side, 'startup'):.2f} | "
              f"{median(side, 'rss_mib'):.0f} |")
    print(f"samples/s on one GPU: dpl {median('dpl', 'rate'):.0f}, peer (DDP, --device cuda) "
          f"{median('peer', 'rate'):.0f}, dpl/peer {ratio:.2f}x")


if __name__ == "__main__":
    main()
