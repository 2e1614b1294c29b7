#!/usr/bin/env python3
"""The PyTorch DDP recipe's peer program (convnet_ddp.py, named by DPL_BENCH_PEER) with what a
benchmark changes in it; its data, sampler, loop and Adadelta stay its own.

    DPL_BENCH_PEER=convnet_ddp.py recipe_peer.py [--module FILE | --module-class PATH:CLASS
        [--kwargs JSON]] [--tuned] [--compile] [--zero-redundancy-optimizer] [peer flags]

  --module FILE        the model is torch.jit.load(FILE), a TorchScript module, instead of the
                       peer's ConvNet (dpl trains the same file with --model torchscript);
  --module-class P:C   the model is class C of the Python file P, built with --kwargs, instead
                       (the Python class a TorchScript file was written from, for --compile);
  --tuned              what a PyTorch 2 user sets for DDP on the CPU: gradient_as_bucket_view=True
                       (gradients are views into DDP's buckets, no copy each step); the
                       benchmarks add glibc's malloc thresholds in the environment;
  --compile            torch.compile(model) before DDP wraps it, as nanoGPT's compile=True;
  --zero-redundancy-optimizer
                       the optimizer under torch's ZeroRedundancyOptimizer: each rank keeps the
                       state of its part of the parameters and broadcasts their update, the peer
                       of dpl's --shard-optimizer.
The choices travel in the environment (DPL_BENCH_*), so that the peer's spawned workers, which
import this file again (not as __main__), make the same changes.
"""
import importlib.util
import json
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import export_model  # noqa: E402  (tools/export_model.py: load_class)
import torch  # noqa: E402

# flag -> (environment variable, whether the flag takes a value)
FLAGS = {"--module": ("DPL_BENCH_MODULE", True),
         "--module-class": ("DPL_BENCH_MODULE_CLASS", True),
         "--kwargs": ("DPL_BENCH_KWARGS", True),
         "--tuned": ("DPL_BENCH_TUNED", False),
         "--compile": ("DPL_BENCH_COMPILE", False),
         "--zero-redundancy-optimizer": ("DPL_BENCH_ZERO", False)}


def load_peer():
    spec = importlib.util.spec_from_file_location("convnet_ddp", os.environ["DPL_BENCH_PEER"])
    peer = importlib.util.module_from_spec(spec)
    sys.modules["convnet_ddp"] = peer  # the spawned workers unpickle peer.train by this name
    spec.loader.exec_module(peer)
    return peer


def change_the_model(peer):
    """The peer builds `ConvNet()` after joining its process group: from now on that name builds
    the model the environment asks for."""
    build = peer.ConvNet
    if os.environ.get("DPL_BENCH_MODULE"):
        path = os.environ["DPL_BENCH_MODULE"]
        build = lambda: torch.jit.load(path)  # noqa: E731
    elif os.environ.get("DPL_BENCH_MODULE_CLASS"):
        chosen = export_model.load_class(os.environ["DPL_BENCH_MODULE_CLASS"])
        kwargs = json.loads(os.environ.get("DPL_BENCH_KWARGS") or "{}")
        build = lambda: chosen(**kwargs)  # noqa: E731
    if os.environ.get("DPL_BENCH_COMPILE") == "1":
        if os.environ.get("DPL_BENCH_MODULE"):
            sys.exit("recipe_peer.py: --compile needs a Python model, not a TorchScript file: "
                     "name its class with --module-class")
        uncompiled = build

        def build():
            # Inductor's kernels linked against this torch, not a libtorch of the system's
            # library folder, which would make them scalar (docs/compiled.md).
            import compiled_package
            compiled_package.use_torch_libraries_first()
            return torch.compile(uncompiled())
    peer.ConvNet = build


def tune_ddp():
    """DistributedDataParallel as a tuned PyTorch 2 program builds it."""
    plain = torch.nn.parallel.DistributedDataParallel

    class TunedDistributedDataParallel(plain):
        def __init__(self, module, *args, **kwargs):
            kwargs.setdefault("gradient_as_bucket_view", True)
            super().__init__(module, *args, **kwargs)

    torch.nn.parallel.DistributedDataParallel = TunedDistributedDataParallel


def shard_the_optimizer():
    """The peer builds `torch.optim.Adadelta(model.parameters(), lr=0.5)` after joining its process
    group; from now on that name builds the same optimizer under ZeroRedundancyOptimizer. Only
    this process's torch changes: the peer's workers run nothing else."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    adadelta = torch.optim.Adadelta

    def sharded_adadelta(params, **options):
        return ZeroRedundancyOptimizer(params, optimizer_class=adadelta, **options)

    torch.optim.Adadelta = sharded_adadelta


def flags_to_environment(argv):
    """Takes this script's flags out of argv into the environment; returns the peer's flags."""
    rest = []
    arguments = iter(argv)
    for argument in arguments:
        if argument not in FLAGS:
            rest.append(argument)
            continue
        variable, takes_value = FLAGS[argument]
        value = next(arguments, None) if takes_value else "1"
        if value is None:
            sys.exit(f"recipe_peer.py: {argument} needs a value")
        os.environ[variable] = value
    return rest


def prepared_peer():
    """The peer's module with the environment's changes made: in the program, and again in each
    spawned worker, which imports this file as __mp_main__."""
    peer = load_peer()
    change_the_model(peer)
    if os.environ.get("DPL_BENCH_TUNED") == "1":
        tune_ddp()
    if os.environ.get("DPL_BENCH_ZERO") == "1":
        shard_the_optimizer()
    # The recipe's Dropout2d on (batch, 64) features warns on every call of a TorchScript module,
    # and torch 2.11 and later warn that torch.jit.load is deprecated, in every worker; dpl's
    # plugin says each once.
    warnings.filterwarnings("ignore", message="dropout2d: Received a 2-D input")
    warnings.filterwarnings("ignore", message="`torch.jit.load` is deprecated")
    return peer


if __name__ == "__main__":
    sys.argv[1:] = flags_to_environment(sys.argv[1:])
PEER = prepared_peer()
if __name__ == "__main__":
    sys.argv = [os.environ["DPL_BENCH_PEER"]] + sys.argv[1:]
    PEER.main()
