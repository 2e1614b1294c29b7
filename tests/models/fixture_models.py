"""Small modules the model tests export as TorchScript (tools/export_model.py --module
fixture_models:NAME)."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class ResidualCnn(nn.Module):
    """A small CNN with BatchNorm, dropout and a residual connection."""

    def __init__(self, width=8, classes=10, log_probabilities=True):
        super().__init__()
        self.log_probabilities = log_probabilities
        self.stem = nn.Conv2d(1, width, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv = nn.Conv2d(width, width, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(width)
        self.drop = nn.Dropout(0.1)
        self.fc = nn.Linear(width, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.stem(x)))
        x = F.relu(x + self.bn2(self.conv(x)))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        x = self.fc(self.drop(x))
        if self.log_probabilities:
            return F.log_softmax(x, dim=1)
        return x


class NoParameters(nn.Module):
    def forward(self, x):
        return F.log_softmax(x.flatten(1)[:, :10], dim=1)


class SpareLayer(nn.Module):
    """A linear classifier with a layer that forward never uses: backward gives it no gradient."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(28 * 28, 10)
        self.spare = nn.Linear(4, 4)

    def forward(self, x):
        return F.log_softmax(self.fc(x.flatten(1)), dim=1)


class BranchedProduct(nn.Module):
    """A classifier whose one matrix product is inside an if: a nested block of its graph."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(28 * 28, 64)
        self.heads = nn.Parameter(torch.randn(4, 16, 10) * 0.1)

    def forward(self, x):
        h = F.relu(self.fc(x.flatten(1))).view(-1, 4, 1, 16)
        if h.size(0) > 0:
            scores = torch.matmul(h, self.heads).sum(1).squeeze(1)
        else:
            scores = torch.zeros(0, 10)
        return F.log_softmax(scores, dim=1)
