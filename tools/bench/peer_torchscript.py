#!/usr/bin/env python3
"""The PyTorch DDP recipe peer (convnet_ddp.py) training a TorchScript module instead of its own
ConvNet class: the same program, data, sampler, DDP and optimizer, with `ConvNet()` replaced by
`torch.jit.load(MODULE)`. bench_vs_peer.py --model torchscript runs it against dpl's
`--model torchscript` on the same file.

    DPL_BENCH_PEER=convnet_ddp.py DPL_BENCH_MODULE=net.pt peer_torchscript.py [peer flags]
        [--zero-redundancy-optimizer]

--zero-redundancy-optimizer (or DPL_BENCH_ZERO=1) wraps the peer's Adadelta in torch's
ZeroRedundancyOptimizer: each rank keeps the state of its part of the parameters and broadcasts
their update, the peer of dpl's --shard-optimizer (scale_sweep.py runs the two against each
other). The paths and that choice come from the environment, so the peer's spawned workers
(which import this file again, not as __main__) make the same replacements.
"""
import importlib.util
import os
import sys
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import torch  # noqa: E402

PEER = os.environ["DPL_BENCH_PEER"]
MODULE = os.environ["DPL_BENCH_MODULE"]
ZERO_FLAG = "--zero-redundancy-optimizer"

_spec = importlib.util.spec_from_file_location("convnet_ddp", PEER)
peer = importlib.util.module_from_spec(_spec)
sys.modules["convnet_ddp"] = peer  # the spawned workers unpickle peer.train by this name
_spec.loader.exec_module(peer)
peer.ConvNet = lambda: torch.jit.load(MODULE)
# The recipe's Dropout2d on (batch, 64) features warns on every call of a TorchScript module;
# dpl's plugin reports it once.
warnings.filterwarnings("ignore", message="dropout2d: Received a 2-D input")
# torch 2.11 and later warn that torch.jit.load is deprecated, in every spawned worker.
warnings.filterwarnings("ignore", message="`torch.jit.load` is deprecated")


def shard_the_optimizer():
    """The peer builds `torch.optim.Adadelta(model.parameters(), lr=0.5)` after joining its process
    group; from now on that name builds the same optimizer under ZeroRedundancyOptimizer. Only
    this process's torch changes: the peer's workers run nothing else."""
    from torch.distributed.optim import ZeroRedundancyOptimizer
    adadelta = torch.optim.Adadelta

    def sharded_adadelta(params, **options):
        return ZeroRedundancyOptimizer(params, optimizer_class=adadelta, **options)

    torch.optim.Adadelta = sharded_adadelta


if os.environ.get("DPL_BENCH_ZERO") == "1":
    shard_the_optimizer()

if __name__ == "__main__":
    if ZERO_FLAG in sys.argv:
        sys.argv.remove(ZERO_FLAG)
        os.environ["DPL_BENCH_ZERO"] = "1"  # for the spawned workers, which train
    sys.argv = [PEER] + sys.argv[1:]
    peer.main()
