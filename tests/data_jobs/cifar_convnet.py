"""A small ConvNet for CIFAR-10's 3x32x32 images, for tools/export_model.py --module: two
convolutions (the first with BatchNorm, whose statistics are buffers), max pooling and a linear
layer to log-probabilities."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class CifarConvNet(nn.Module):
    def __init__(self, width: int = 8, classes: int = 10):
        super().__init__()
        self.cn1 = nn.Conv2d(3, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.cn2 = nn.Conv2d(width, 2 * width, 3, padding=1)
        self.fc = nn.Linear(2 * width * 8 * 8, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.cn1(x))), 2)
        x = F.max_pool2d(F.relu(self.cn2(x)), 2)
        return F.log_softmax(self.fc(torch.flatten(x, 1)), dim=1)
