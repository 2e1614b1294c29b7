#!/usr/bin/env python3
"""The PyTorch DDP recipe's peer program (convnet_ddp.py, DPL_BENCH_PEER) written the DeepSpeed
way, with ZeRO stage 1: the optimizer's state sharded across the ranks, as dpl's
--shard-optimizer and torch's ZeroRedundancyOptimizer shard it. Everything else is the peer's:
its data (its dataset()), DistributedSampler, model (its ConvNet, or --module-class PATH:CLASS
built with --kwargs), Adadelta at lr 0.5, the batch per process and its loss line every 10
batches; the engine replaces DistributedDataParallel and the optimizer's calls. DeepSpeed's engine
hooks the module's forward, which a TorchScript module does not allow: the model is the Python
class a TorchScript file was written from.

    DPL_BENCH_PEER=convnet_ddp.py deepspeed_peer.py --data DIR --num-processes 2 \\
        --batch-size 64 --max-batches 200 [--module-class PATH:CLASS [--kwargs JSON]] [--port P]

Runs on the CPU with DeepSpeed's cpu accelerator over gloo (DS_ACCELERATOR=cpu, which this sets);
DeepSpeed builds its shared-memory operator at the first run (tools/requirements-bench.txt).
"""
import argparse
import importlib.util
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

os.environ.setdefault("DS_ACCELERATOR", "cpu")
import export_model  # noqa: E402  (tools/export_model.py: load_class)
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402


def load_peer():
    spec = importlib.util.spec_from_file_location("convnet_ddp", os.environ["DPL_BENCH_PEER"])
    peer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer)
    return peer


def train(local, args):
    import deepspeed
    warnings.filterwarnings("ignore", message="dropout2d: Received a 2-D input")
    os.environ.update(RANK=str(local), LOCAL_RANK=str(local), WORLD_SIZE=str(args.num_processes))
    deepspeed.init_distributed(dist_backend="gloo")
    peer = load_peer()
    torch.manual_seed(0)
    data = peer.dataset(args.data)
    sampler = torch.utils.data.distributed.DistributedSampler(
        data, num_replicas=args.num_processes, rank=local)
    loader = torch.utils.data.DataLoader(data, batch_size=args.batch_size, shuffle=False,
                                         num_workers=0, sampler=sampler)
    model = (export_model.load_class(args.module_class)(**json.loads(args.kwargs))
             if args.module_class else peer.ConvNet())
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5)
    config = {"train_micro_batch_size_per_gpu": args.batch_size, "gradient_accumulation_steps": 1,
              "zero_optimization": {"stage": 1},
              # ZeRO is tested by DeepSpeed with its own optimizers; Adadelta is the recipe's.
              "zero_allow_untested_optimizer": True}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config)
    engine.train()
    for batch, (x, y) in enumerate(loader):
        if args.max_batches and batch >= args.max_batches:
            break
        loss = F.nll_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        if batch % 10 == 0 and local == 0:
            print(f"epoch: 0 [{batch}/{len(loader)}] training loss: {loss.item():.6f}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", required=True)
    p.add_argument("--num-processes", type=int, default=1)
    p.add_argument("--batch-size", type=int, default=64, help="per process, as the recipe's")
    p.add_argument("--max-batches", type=int, default=0)
    p.add_argument("--module-class", help="PATH:CLASS of a model to train instead of the peer's "
                                          "ConvNet")
    p.add_argument("--kwargs", default="{}", help="the class's arguments as a JSON object")
    p.add_argument("--port", default="29500")
    p.add_argument("--backend", default="gloo", choices=("gloo",), help="gloo only, on the CPU")
    args = p.parse_args()
    if not os.environ.get("DPL_BENCH_PEER"):
        p.error("name the recipe's peer program with DPL_BENCH_PEER=convnet_ddp.py")
    # Where rank 0's store listens, as the recipe's program says it (env://).
    os.environ.update(MASTER_ADDR=os.environ.get("MASTER_ADDR", "127.0.0.1"),
                      MASTER_PORT=str(args.port))
    mp.spawn(train, nprocs=args.num_processes, args=(args,))


if __name__ == "__main__":
    main()
