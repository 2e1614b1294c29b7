#!/usr/bin/env python3
"""The PyTorch DDP ConvNet peer (the recipe's convnet_ddp.py, docs/recipe.md: torch.distributed +
torch.multiprocessing + DistributedSampler + DistributedDataParallel, on an MNIST-format IDX data
folder) with the recipe's GPU part added: --device cuda puts each process on GPU `local rank`,
wraps the model as DDP(device_ids=[local]) over NCCL, pins the loader's memory and copies each
batch with non_blocking=True. Everything else is the peer's, so tools/bench/bench_gpu.py compares
dpl's --device cuda against what a PyTorch user runs. A copy, so that the GPU machine needs
nothing beside this checkout.
Usage: convnet_ddp_cuda.py --data DIR [--device cuda --num-processes N --batch-size B
                           --backend nccl --max-batches K --port P]
--batch-size is per process, as in the recipe (it passes 128/N for N processes)."""
import argparse, os, time, gzip, struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import numpy as np  # noqa: E402
import torch, torch.nn as nn, torch.nn.functional as F  # noqa: E402
import torch.distributed as dist, torch.multiprocessing as mp  # noqa: E402
from recipe_convnet import ConvNet  # noqa: E402


def idx(path):
    op = gzip.open if path.endswith('.gz') else open
    with op(path, 'rb') as f:
        data = f.read()
    ndim = data[3]
    dims = struct.unpack('>' + 'I' * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def find(d, stem):
    for n in (stem, stem + '.gz'):
        if os.path.exists(os.path.join(d, n)):
            return os.path.join(d, n)
    raise FileNotFoundError(stem)


def dataset(d):
    x = torch.from_numpy(idx(find(d, 'train-images-idx3-ubyte')).copy()).float().div_(255).unsqueeze(1)
    x = (x - 0.1302) / 0.3069
    y = torch.from_numpy(idx(find(d, 'train-labels-idx1-ubyte')).astype(np.int64))
    return torch.utils.data.TensorDataset(x, y)


def train(local, args):
    rank = args.machine_id * args.num_processes + local
    cuda = args.device == 'cuda'
    if cuda:
        torch.cuda.set_device(local)
    device = torch.device('cuda', local) if cuda else torch.device('cpu')
    dist.init_process_group(backend=args.backend, init_method='env://',
                            world_size=args.world_size, rank=rank)
    torch.manual_seed(0)
    ds = dataset(args.data)
    sampler = torch.utils.data.distributed.DistributedSampler(ds, num_replicas=args.world_size, rank=rank)
    dl = torch.utils.data.DataLoader(ds, batch_size=args.batch_size, shuffle=False, num_workers=0,
                                     sampler=sampler, pin_memory=cuda)
    model = ConvNet().to(device)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local] if cuda else None)
    opt = torch.optim.Adadelta(model.parameters(), lr=0.5)
    model.train()
    t0 = time.time()
    n = 0
    for epoch in range(args.epochs):
        for b, (X, y) in enumerate(dl):
            if args.max_batches and b >= args.max_batches:
                break
            X = X.to(device, non_blocking=True)
            y = y.to(device, non_blocking=True)
            loss = F.nll_loss(model(X), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            n += X.shape[0]
            if b % 10 == 0 and local == 0 and not args.quiet:
                print(f'epoch: {epoch} [{b}/{len(dl)}] training loss: {loss.item():.6f}', flush=True)
    if rank == 0:
        dt = time.time() - t0
        print(f'rank0 samples {n} loop {dt:.3f}s  {n * args.world_size / dt:.1f} samples/s (global) loss {loss.item():.4f}', flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument('--data', required=True)
    p.add_argument('--device', default='cpu', choices=('cpu', 'cuda'))
    p.add_argument('--num-machines', default=1, type=int)
    p.add_argument('--num-processes', default=1, type=int)
    p.add_argument('--machine-id', default=0, type=int)
    p.add_argument('--epochs', default=1, type=int)
    p.add_argument('--batch-size', default=128, type=int)
    p.add_argument('--backend', default=None, help='default nccl for cuda, gloo for cpu')
    p.add_argument('--max-batches', default=0, type=int)
    p.add_argument('--port', default='8892')
    p.add_argument('--quiet', action='store_true')
    args = p.parse_args()
    if args.backend is None:
        args.backend = 'nccl' if args.device == 'cuda' else 'gloo'
    args.world_size = args.num_processes * args.num_machines
    os.environ.setdefault('MASTER_ADDR', '127.0.0.1')
    os.environ['MASTER_PORT'] = args.port
    start = time.time()
    mp.spawn(train, nprocs=args.num_processes, args=(args,))
    print(f'Finished training in {time.time() - start:.3f} secs')


if __name__ == '__main__':
    main()
