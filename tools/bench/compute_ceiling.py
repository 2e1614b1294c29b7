#!/usr/bin/env python3
"""The compute ceiling for the recipe's ConvNet, or for the GPT of models/gpt, on this machine.

FLOPs per training sample are counted from the layer shapes (a multiply-add = 2 FLOPs):
forward of every conv/linear layer, backward = gradient w.r.t. weights (same FLOPs as forward)
plus gradient w.r.t. inputs (same again), except the first layer, whose input needs no gradient.
Element-wise work (ReLU, pooling, dropout, softmax, optimizer) is ignored: it is memory-bound and
small next to the GEMMs, so the ceiling is optimistic, as a ceiling should be.
--processes P counts P processes of --threads threads each, as a P x threads run lays them out
(each at the measured rate, side by side).

--model gpt counts a token of nanoGPT's transformer (--layers, --dim, --block, --vocab) the way
nanoGPT's estimate_mfu does: 6 FLOPs per weight of the blocks' linear layers and of the output
layer (tied to the token embedding, whose lookup is free), and 12 x layers x dim x block for the
attention's two products over the whole block; the causal mask makes half of those products
unnecessary, so a second figure counts only that half.

The machine's float32 GEMM rate is measured with torch.mm (the BLAS libtorch uses) on square
matrices of several sizes, with the given number of threads; the best size counts, so the rate is
as close to the machine's peak as this BLAS gets. ceiling samples/s = GEMM rate / FLOPs per sample.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import torch  # noqa: E402


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


def gpt_training_flops_per_token(layers, dim, block, vocab):
    """(FLOPs with the attention's products over the whole block, with their causal half only)."""
    linear_weights = layers * 12 * dim * dim + dim * vocab
    attention = 12 * layers * dim * block
    return 6 * linear_weights + attention, 6 * linear_weights + attention // 2


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
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--sizes", default="256,512,1024,2048")
    p.add_argument("--model", choices=("convnet", "gpt"), default="convnet")
    p.add_argument("--layers", type=int, default=6, help="gpt (default: Shakespeare-char's 6)")
    p.add_argument("--dim", type=int, default=384, help="gpt")
    p.add_argument("--block", type=int, default=256, help="gpt")
    p.add_argument("--vocab", type=int, default=256, help="gpt (256: byte tokens)")
    args = p.parse_args()
    rates = {n: gemm_rate(args.threads, n) for n in (int(v) for v in args.sizes.split(","))}
    for n, rate in rates.items():
        print(f"float32 GEMM {n}x{n} ({args.threads} threads): {rate / 1e9:.1f} GFLOP/s")
    best = max(rates.values()) * args.processes
    if args.processes > 1:
        print(f"{args.processes} processes side by side: {best / 1e9:.1f} GFLOP/s")
    if args.model == "convnet":
        flops = convnet_training_flops_per_sample()
        print(f"ConvNet training FLOPs per sample: {flops / 1e6:.2f} MFLOP")
        print(f"ceiling: {best / flops:.0f} samples/s (best GEMM rate {best / 1e9:.1f} GFLOP/s)")
        return
    whole, causal = gpt_training_flops_per_token(args.layers, args.dim, args.block, args.vocab)
    print(f"GPT ({args.layers} layers, {args.dim} dims, block {args.block}, vocabulary "
          f"{args.vocab}) training FLOPs per token: {whole / 1e6:.2f} MFLOP, "
          f"{causal / 1e6:.2f} with the causal half of the attention only")
    print(f"ceiling: {best / whole:.0f} tokens/s, {best / causal:.0f} with the causal half only "
          f"(best GEMM rate {best / 1e9:.1f} GFLOP/s)")


if __name__ == "__main__":
    main()
