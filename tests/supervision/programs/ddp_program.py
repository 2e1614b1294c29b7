"""A training script of the recipe's shape, as torchrun starts it: it reads torchrun's variables,
meets the other ranks through init_process_group("gloo", "env://"), shards a small synthetic data
set with DistributedSampler and trains a small ConvNet wrapped in DistributedDataParallel with
Adadelta. No mp.spawn: one process per rank, started by whoever runs it (dpl's launcher, or the
tests by hand with the variables set).

It writes into --out: rank-R.bin (the final parameters, float32 back to back), rank-R.env (a line
per attempt: the torchrun variables it saw), rank-R.environ (its whole environment, NAME=value
lines, of the last attempt) and rank-R.pid. --fail-rank/--fail-step make one rank
raise (through a deep stack, so that its traceback is long) at a step, on every attempt or only on
--fail-attempt; with --linger S that rank prints its traceback and exits S seconds later, as a rank
whose teardown is slow, while the other ranks fail on their own 0.3 s after it raised, as peers
whose connections to it closed. --child starts a child process that sleeps, as a DataLoader's
workers would live on.
"""
import argparse
import gc
import os
import subprocess
import sys
import threading
import time
import traceback

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

VARIABLES = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "ROLE_RANK",
             "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
             "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS"]


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.cn1 = nn.Conv2d(1, 4, 3)
        self.fc1 = nn.Linear(4 * 13 * 13, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.cn1(x)), 2)
        return F.log_softmax(self.fc1(torch.flatten(x, 1)), dim=1)


def fail(rank, step, depth):
    if depth == 0:
        raise RuntimeError(f"rank {rank} fails at step {step}")
    fail_again(rank, step, depth - 1)


def fail_again(rank, step, depth):
    # Another function each frame, which Python's traceback does not fold into "[Previous line
    # repeated N more times]".
    fail(rank, step, depth)


def fail_after_peer(out):
    """Exits with code 1 0.3 s after the failing rank raised (--linger)."""
    while not os.path.exists(f"{out}/raised"):
        time.sleep(0.01)
    time.sleep(0.3)
    print("RuntimeError: a peer's connection closed", file=sys.stderr, flush=True)
    os._exit(1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--fail-rank", type=int, default=-1)
    parser.add_argument("--fail-step", type=int, default=-1)
    parser.add_argument("--fail-attempt", type=int, default=-1)
    parser.add_argument("--linger", type=float, default=0.0)
    parser.add_argument("--child", action="store_true")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    attempt = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    with open(f"{args.out}/rank-{rank}.env", "a") as env:
        env.write(" ".join(f"{name}={os.environ.get(name, '(unset)')}" for name in VARIABLES) + "\n")
    with open(f"{args.out}/rank-{rank}.environ", "w") as environ:
        environ.write("".join(f"{name}={value}\n" for name, value in sorted(os.environ.items())))
    with open(f"{args.out}/rank-{rank}.pid", "a") as pids:
        pids.write(f"{os.getpid()}\n")
        if args.child:
            pids.write(f"{subprocess.Popen(['sleep', '300']).pid}\n")

    if args.linger > 0 and rank != args.fail_rank:
        threading.Thread(target=fail_after_peer, args=(args.out,), daemon=True).start()
    torch.manual_seed(0)
    dist.init_process_group("gloo", init_method="env://")
    generator = torch.Generator().manual_seed(1)
    data = TensorDataset(torch.randn(256, 1, 28, 28, generator=generator),
                         torch.randint(0, 10, (256,), generator=generator))
    sampler = DistributedSampler(data, num_replicas=world_size, rank=rank, shuffle=True, seed=0)
    loader = DataLoader(data, batch_size=32 // world_size, sampler=sampler)
    model = DistributedDataParallel(ConvNet())
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5)
    step = 0
    for epoch in range(1000):
        sampler.set_epoch(epoch)
        for x, y in loader:
            step += 1
            if rank == args.fail_rank and step == args.fail_step and args.fail_attempt in (-1, attempt):
                with open(f"{args.out}/raised", "w") as raised:
                    raised.write(f"{time.time()}\n")
                try:
                    fail(rank, step, 12)
                except RuntimeError:
                    if args.linger <= 0:
                        raise
                    traceback.print_exc()
                    sys.stderr.flush()
                    time.sleep(args.linger)
                    os._exit(1)
            optimizer.zero_grad()
            loss = F.nll_loss(model(x), y)
            loss.backward()
            optimizer.step()
            if rank == 0:
                print(f"step {step} loss {loss.item():.4f}", flush=True)
            if step == args.steps:
                break
        if step == args.steps:
            break
    parameters = torch.cat([p.detach().reshape(-1) for p in model.module.parameters()])
    with open(f"{args.out}/rank-{rank}.bin", "wb") as out:
        out.write(parameters.numpy().tobytes())
    # DistributedDataParallel's reducer holds the process group, so destroy_process_group alone
    # leaves gloo's worker threads running; one that drops its last work while the interpreter
    # finalizes takes the GIL, is ended by Python, and aborts the rank ("terminate called without
    # an active exception", 5 runs in 40 under torchrun with torch 2.15). Without the model, the
    # destroy joins those threads first.
    del model, optimizer, parameters
    gc.collect()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
