#!/usr/bin/python3
"""The compute ceiling for the recipe's ConvNet on this machine.

FLOPs per training sample are counted from the layer shapes (a multiply-add = 2 FLOPs):
forward of every conv/linear layer, backward = gradient w.r.t. weights (same FLOPs as forward)
plus gradient w.r.t. inputs (same again), except the first layer, whose input needs no gradient.
Element-wise work (ReLU, pooling, dropout, softmax, optimizer) is ignored: it is memory-bound and
small next to the GEMMs, so the ceiling is optimistic, as a ceiling should be.

The machine's float32 GEMM rate is measured with torch.mm (the BLAS libtorch uses) on square
matrices of several sizes, with the given number of threads; the best size counts, so the rate is
as close to the machine's peak as this BLAS gets. ceiling samples/s = GEMM rate / FLOPs per sample.
"""
import argparse
import time

import torch


def convnet_training_flops_per_sample():
    layers = [  # (name, multiply-adds of the forward pass for one sample, needs input gradient)
        ("cn1", 26 * 26 * 16 * (1 * 3 * 3), False),
        ("cn2", 24 * 24 * 32 * (16 * 3 * 3), True),
        ("fc1", 4608 * 64, True),
        ("fc2", 64 * 10, True),
    ]
    total = 0
    for _, macs, input_grad in layers:
        total += 2 * macs * (3 if input_grad else 2)
    return total


def gemm_rate(threads, n=1024, seconds=2.0):
    torch.set_num_threads(threads)
    a, b = torch.randn(n, n), torch.randn(n, n)
    torch.mm(a, b)  # warm-up
    reps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        torch.mm(a, b)
        reps += 1
    return 2.0 * n ** 3 * reps / (time.perf_counter() - start)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--sizes", default="256,512,1024,2048")
    args = p.parse_args()
    flops = convnet_training_flops_per_sample()
    rates = {n: gemm_rate(args.threads, n) for n in (int(v) for v in args.sizes.split(","))}
    print(f"ConvNet training FLOPs per sample: {flops / 1e6:.2f} MFLOP")
    for n, rate in rates.items():
        print(f"float32 GEMM {n}x{n} ({args.threads} threads): {rate / 1e9:.1f} GFLOP/s")
    best = max(rates.values())
    print(f"ceiling: {best / flops:.0f} samples/s (best GEMM rate {best / 1e9:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
