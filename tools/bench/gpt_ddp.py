#!/usr/bin/env python3
"""The PyTorch DDP peer of the language-model benchmark (bench_lm.py): the recipe's program
(docs/recipe.md: torch.multiprocessing spawn, init_process_group over env://, a sampler that
shards the data, DistributedDataParallel) training the GPT of tools/gpt_model.py on token ids in
nanoGPT's format (train.bin: little-endian uint16), as nanoGPT's train.py sets it up: AdamW with
weight decay on tensors of two or more dimensions only, autocast for bf16, the fused AdamW and
TF32 on CUDA, and with --compile torch.compile on the model (nanoGPT's compile=True); --tuned adds
DDP's gradient_as_bucket_view.

    gpt_ddp.py --data DIR --num-processes 2 --batch-size 32 --block 32 --layers 2 --heads 4 \\
        --dim 64 --vocab 256 --max-batches 200

The windows are dpl's tokens plugin's (datasets/tokens/README.md): sample i is ids
[i * block, i * block + block + 1), input the first block, target the next block; as many
windows as dpl's train split serves. DistributedSampler shards and shuffles them (seed 0).
--batch-size is per process, as in the recipe (the global batch / --num-processes). Rank 0 prints
"epoch: E [S/N] training loss: L" after every --log-every optimizer steps S.
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
from gpt_model import GPT, sequence_loss  # noqa: E402


class TokenWindows(torch.utils.data.Dataset):
    """Windows of block + 1 ids of a uint16 file, at offset 0, as many as dpl's train split."""

    def __init__(self, path, block):
        self.ids = np.memmap(path, dtype=np.uint16, mode="r")
        self.block = block
        full = (len(self.ids) - 1) // block
        self.count = full - 1 if full > 1 else full
        if self.count < 1:
            raise ValueError(f"{path}: {len(self.ids)} ids hold no window of {block + 1}")

    def __len__(self):
        return self.count

    def __getitem__(self, i):
        window = torch.from_numpy(self.ids[i * self.block:(i + 1) * self.block + 1]
                                  .astype(np.int64))
        return window[:-1], window[1:]


def adamw(model, args, device):
    """nanoGPT's configure_optimizers: decay on tensors of two or more dimensions only."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in parameters if p.dim() >= 2], "weight_decay": args.weight_decay},
              {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0}]
    extra = {}
    if device.type == "cuda" and "fused" in torch.optim.AdamW.__init__.__code__.co_varnames:
        extra["fused"] = True
    return torch.optim.AdamW(groups, lr=args.lr, betas=tuple(args.betas), **extra)


def train(local, args):
    rank = local
    dist.init_process_group(backend=args.backend, init_method="env://",
                            world_size=args.num_processes, rank=rank)
    device = torch.device("cpu")
    if args.device == "cuda":
        torch.cuda.set_device(local)
        device = torch.device("cuda", local)
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(0)
    data = TokenWindows(os.path.join(args.data, "train.bin"), args.block)
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=args.num_processes, rank=rank)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=False,
                                         num_workers=0, sampler=sampler,
                                         pin_memory=device.type == "cuda")
    model = GPT(vocab=args.vocab, block=args.block, layers=args.layers, heads=args.heads,
                dim=args.dim).to(device)
    if args.compile:  # nanoGPT's compile=True: the model compiled, then wrapped by DDP
        # Inductor's kernels linked against this torch, not a libtorch of the system's library
        # folder, which would make them scalar (docs/compiled.md, "Two traps of this machine").
        import compiled_package
        compiled_package.use_torch_libraries_first()
        model = torch.compile(model)
    ddp = torch.nn.parallel.DistributedDataParallel(
        model, device_ids=[local] if device.type == "cuda" else None,
        gradient_as_bucket_view=args.tuned)
    optimizer = adamw(model, args, device)
    autocast = torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                              enabled=args.precision == "bf16")
    ddp.train()
    steps = 0
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for x, y in loader:
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with autocast:
                loss = sequence_loss(ddp(x), y)
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
    p.add_argument("--data", required=True, help="folder holding train.bin (uint16 ids)")
    p.add_argument("--num-processes", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=32, help="samples per process and step")
    p.add_argument("--backend", default="gloo")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="bf16: autocast the forward pass and the loss, as nanoGPT")
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--max-batches", type=int, default=0, help="stop after this many steps")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--port", default="29500")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--block", type=int, default=256)
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--betas", type=float, nargs=2, default=(0.9, 0.99))
    p.add_argument("--tuned", action="store_true",
                   help="what a PyTorch 2 user sets for DDP: gradient_as_bucket_view=True (no "
                        "gradient copy a step; the benchmark adds glibc's malloc thresholds)")
    p.add_argument("--compile", action="store_true",
                   help="torch.compile(model) before DDP wraps it, as nanoGPT's compile=True")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error(f"--device cuda: torch {torch.__version__} sees no GPU")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ["MASTER_PORT"] = str(args.port)
    start = time.time()
    mp.spawn(train, nprocs=args.num_processes, args=(args,))
    print(f"Finished training in {time.time() - start:.3f} secs")


if __name__ == "__main__":
    main()
