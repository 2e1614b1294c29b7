"""The script launcher_overhead.py starts under each launcher: a rank of the recipe's DDP shape
(torchrun's variables, init_process_group("gloo", "env://"), DistributedDataParallel over the
recipe's ConvNet, Adadelta) that prints "rank R started" before it imports anything beyond the
standard library's os and sys, then "rank R step 1" after its first optimizer step, and exits.
"""
import os
import sys

print(f"rank {os.environ.get('RANK', '?')} started", flush=True)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from recipe_convnet import ConvNet  # noqa: E402


def main():
    dist.init_process_group("gloo", init_method="env://")
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(ConvNet())
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5)
    x, y = torch.randn(64, 1, 28, 28), torch.randint(0, 10, (64,))
    loss = F.nll_loss(model(x), y)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    print(f"rank {dist.get_rank()} step 1 loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
