#!/usr/bin/env python3
"""The PyTorch DDP peer of the compiled-step benchmark (bench_resnet.py): the recipe's program
(docs/recipe.md: torch.multiprocessing spawn, init_process_group over env://, DistributedSampler,
DistributedDataParallel) training torchvision's ResNet-18 (10 classes) on CIFAR-10's binary
records, SGD with momentum, fp32; with --compile the model is torch.compile'd first, as a user
who wants fused kernels in Python would do.

    resnet_ddp.py --data DIR --num-processes 2 --batch-size 64 --max-batches 40 [--compile]

The samples are dpl's cifar10 plugin's: (pixel / 255 - mean[c]) / std[c] of every record of
data_batch_1..5.bin. --batch-size is per process (the global batch / --num-processes). Rank 0
prints "epoch: E [S/N] training loss: L" after every --log-every optimizer steps S.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
import torch.nn.functional as F  # noqa: E402

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def cifar_records(folder):
    """(float32 samples (N, 3, 32, 32), int64 labels) of data_batch_1..5.bin in `folder`."""
    records = np.concatenate([np.fromfile(os.path.join(folder, f"data_batch_{i}.bin"), np.uint8)
                              for i in range(1, 6)]).reshape(-1, 3073)
    pixels = torch.from_numpy(records[:, 1:].astype(np.float32) / 255).reshape(-1, 3, 32, 32)
    mean = torch.tensor(MEAN).view(1, 3, 1, 1)
    std = torch.tensor(STD).view(1, 3, 1, 1)
    return (pixels - mean) / std, torch.from_numpy(records[:, 0].astype(np.int64))


def link_torch_first():
    """Inductor's kernels linked against this torch, so that its check of the CPU's vector
    instructions passes and they are not compiled scalar where another libtorch is on the
    library path (tools/compiled_package.py's use_torch_libraries_first; docs/compiled.md)."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import compiled_package
    compiled_package.use_torch_libraries_first()


def train(rank, args):
    if args.compile:
        link_torch_first()
    dist.init_process_group(backend="gloo", init_method="env://", world_size=args.num_processes,
                            rank=rank)
    torch.manual_seed(0)
    import torchvision
    samples, labels = cifar_records(args.data)
    data = torch.utils.data.TensorDataset(samples, labels)
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=args.num_processes, rank=rank)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, sampler=sampler,
                                         num_workers=0)
    model = torchvision.models.resnet18(num_classes=10)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    step_model = torch.compile(ddp) if args.compile else ddp
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ddp.train()
    steps = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            loss = F.cross_entropy(step_model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            steps += 1
            if steps % args.log_every == 0 and rank == 0:
                print(f"epoch: {epoch} [{steps}/{len(loader)}] training loss: {loss.item():.6f}",
                      flush=True)
            if steps == args.max_batches:
                break
        if steps == args.max_batches:
            break
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True, help="folder holding data_batch_1..5.bin")
    p.add_argument("--num-processes", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=64, help="samples per process and step")
    p.add_argument("--epochs", type=int, default=100)
    p.add_argument("--max-batches", type=int, default=0, help="stop after this many steps")
    p.add_argument("--log-every", type=int, default=5)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--compile", action="store_true", help="torch.compile the DDP model")
    p.add_argument("--port", default="29500")
    args = p.parse_args()
    if args.compile:
        # Inductor compiles in the process that links right (link_torch_first), its cache in the
        # compile tool's folder: the default one may hold a failed check of the CPU's
        # instructions, which Inductor would keep using.
        os.environ["TORCHINDUCTOR_COMPILE_THREADS"] = "1"
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(
            os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "dpl", "compiled",
            "inductor"))
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(args.port)
    start = time.time()
    mp.spawn(train, nprocs=args.num_processes, args=(args,))
    print(f"Finished training in {time.time() - start:.3f} secs")


if __name__ == "__main__":
    main()
