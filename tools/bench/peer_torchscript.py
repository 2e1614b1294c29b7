#!/usr/bin/python3
"""The PyTorch DDP recipe peer (convnet_ddp.py) training a TorchScript module instead of its own
ConvNet class: the same program, data, sampler, DDP and optimizer, with `ConvNet()` replaced by
`torch.jit.load(MODULE)`. bench_vs_peer.py --model torchscript runs it against dpl's
`--model torchscript` on the same file.

    DPL_BENCH_PEER=convnet_ddp.py DPL_BENCH_MODULE=net.pt peer_torchscript.py [peer flags]

The two paths come from the environment, so the peer's spawned workers (which import this file
again, not as __main__) make the same replacement.
"""
import importlib.util
import os
import sys
import warnings

import torch

PEER = os.environ["DPL_BENCH_PEER"]
MODULE = os.environ["DPL_BENCH_MODULE"]

_spec = importlib.util.spec_from_file_location("convnet_ddp", PEER)
peer = importlib.util.module_from_spec(_spec)
sys.modules["convnet_ddp"] = peer  # the spawned workers unpickle peer.train by this name
_spec.loader.exec_module(peer)
peer.ConvNet = lambda: torch.jit.load(MODULE)
# The recipe's Dropout2d on (batch, 64) features warns on every call of a TorchScript module;
# dpl's plugin reports it once.
warnings.filterwarnings("ignore", message="dropout2d: Received a 2-D input")

if __name__ == "__main__":
    sys.argv = [PEER] + sys.argv[1:]
    peer.main()
