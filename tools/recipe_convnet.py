"""The recipe's ConvNet (docs/recipe.md) in Python torch, as the recipe's DDP program defines it.

The one Python definition in this tree: tools/export_model.py scripts it, the GPU peer
(tools/bench/convnet_ddp_cuda.py) trains it, and the tests check the C++ convnet plugin against
it and load dpl's exported state dicts into it. Its parameter names are the C++ plugin's.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F

INPUT_SHAPE = (1, 28, 28)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.cn1 = nn.Conv2d(1, 16, 3, 1)
        self.cn2 = nn.Conv2d(16, 32, 3, 1)
        self.dp1 = nn.Dropout2d(0.10)
        self.dp2 = nn.Dropout2d(0.25)
        self.fc1 = nn.Linear(4608, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.cn1(x))
        x = F.relu(self.cn2(x))
        x = F.max_pool2d(x, 2)
        x = self.dp1(x)
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = self.dp2(x)
        return F.log_softmax(self.fc2(x), dim=1)
