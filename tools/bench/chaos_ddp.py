#!/usr/bin/env python3
"""The peer programs of the chaos benchmark (tools/bench/chaos.py): the recipe's ConvNet
(tools/recipe_convnet.py) on the IDX files chaos.py writes, Adadelta (lr 0.5), a global batch
split over the ranks, in one of two ways:

  torchrun  DistributedDataParallel over gloo under `torch.distributed.run --max-restarts`:
            rank 0 saves a checkpoint every --checkpoint-every steps (torch.save to a temporary,
            renamed) and every rank resumes from the newest when torchrun starts it again, as a
            torchrun program must to survive a restart;
  torchft   torchft's fault-tolerant DDP: one replica group per machine (this process), a
            quorum per step through torchft's lighthouse (TORCHFT_LIGHTHOUSE), a replica that
            joins fetches the state from a live one; each replica trains its share of the global
            batch.

Each committed step prints "<unix time> [rank 0] step <global step>" (torchft: every replica
prints its own, and "... step <n> not committed" when a step's commit failed), the lines chaos.py
reads.
"""
import argparse
import datetime
import glob
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # tools/: dpl_python, recipe_convnet
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from recipe_convnet import ConvNet  # noqa: E402

MEAN, STD = 0.1302, 0.3069  # the recipe's normalisation


def read_idx(folder):
    """The training images (float, normalised, N x 1 x 28 x 28) and labels (int64)."""
    with open(os.path.join(folder, "train-images-idx3-ubyte"), "rb") as f:
        images = np.frombuffer(f.read(), dtype=np.uint8, offset=16)
    with open(os.path.join(folder, "train-labels-idx1-ubyte"), "rb") as f:
        labels = np.frombuffer(f.read(), dtype=np.uint8, offset=8)
    x = torch.from_numpy(images.reshape(-1, 1, 28, 28).astype(np.float32) / 255.0)
    return (x - MEAN) / STD, torch.from_numpy(labels.astype(np.int64))


def say_step(step, rank, committed=True):
    tail = "" if committed else " not committed"
    print(f"{time.time():.3f} [rank {rank}] step {step}{tail}", flush=True)


def batches(count, world, rank, local_batch, epoch):
    """The sample indices of each of this rank's batches of `epoch` (DistributedSampler's)."""
    sampler = torch.utils.data.DistributedSampler(range(count), num_replicas=world, rank=rank,
                                                  shuffle=True, seed=0, drop_last=True)
    sampler.set_epoch(epoch)
    order = list(sampler)
    return [order[i:i + local_batch] for i in range(0, len(order) - local_batch + 1, local_batch)]


def newest_checkpoint(folder):
    paths = sorted(glob.glob(os.path.join(folder, "step-*.pt")))
    return paths[-1] if paths else None


def train_torchrun(args, x, y):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = ConvNet()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5)
    step = 0
    newest = newest_checkpoint(args.checkpoint_dir)
    if newest:
        state = torch.load(newest, weights_only=True)
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        step = state["step"]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    local_batch = args.batch_size // world
    while step < args.max_steps:
        epoch_batches = batches(len(x), world, rank, local_batch, 0)
        epoch, skip = divmod(step, len(epoch_batches))
        for indices in batches(len(x), world, rank, local_batch, epoch)[skip:]:
            optimizer.zero_grad()
            F.nll_loss(ddp(x[indices]), y[indices]).backward()
            optimizer.step()
            step += 1
            if rank == 0:
                say_step(step, rank)
                if args.checkpoint_every and step % args.checkpoint_every == 0:
                    path = os.path.join(args.checkpoint_dir, f"step-{step:010d}.pt")
                    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                "step": step}, path + ".tmp")
                    os.replace(path + ".tmp", path)
            if step >= args.max_steps:
                break
    dist.destroy_process_group()


def train_torchft(args, x, y):
    from torchft import DistributedDataParallel, Manager, ProcessGroupGloo
    from torchft import Optimizer as OptimizerWrapper

    torch.manual_seed(0)
    model = ConvNet()
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5)

    def state_dict():
        return {"model": model.state_dict(), "optimizer": optimizer.state_dict()}

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])

    manager = Manager(pg=ProcessGroupGloo(timeout=datetime.timedelta(seconds=10)),
                      min_replica_size=1, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"chaos_{args.replica}",
                      timeout=datetime.timedelta(seconds=30))
    ddp = DistributedDataParallel(manager, model)
    wrapped = OptimizerWrapper(manager, optimizer)
    local_batch = args.batch_size // args.replicas
    generator = torch.Generator().manual_seed(args.replica)
    while manager.current_step() < args.max_steps:
        indices = torch.randint(0, len(x), (local_batch,), generator=generator)
        wrapped.zero_grad()
        F.nll_loss(ddp(x[indices]), y[indices]).backward()
        before = manager.current_step()
        wrapped.step()
        committed = manager.current_step() > before
        say_step(manager.current_step() if committed else before + 1, 0, committed)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=("torchrun", "torchft"), required=True)
    parser.add_argument("--data", required=True, help="folder of the IDX files")
    parser.add_argument("--batch-size", type=int, default=96, help="global batch")
    parser.add_argument("--max-steps", type=int, default=10 ** 9)
    parser.add_argument("--checkpoint-dir", default="")
    parser.add_argument("--checkpoint-every", type=int, default=0)
    parser.add_argument("--replica", type=int, default=0, help="torchft: this replica group")
    parser.add_argument("--replicas", type=int, default=3,
                        help="torchft: the replica groups the global batch is split over")
    args = parser.parse_args()
    torch.set_num_threads(1)
    x, y = read_idx(args.data)
    if args.mode == "torchrun":
        os.makedirs(args.checkpoint_dir, exist_ok=True)
        train_torchrun(args, x, y)
    else:
        train_torchft(args, x, y)


if __name__ == "__main__":
    main()
