"""The recipe's ConvNet in Python torch: the reference the C++ plugin must match.

Usage: convnet_reference.py PARAMS BATCH OUT
  PARAMS: the plugin's parameters as float32, in named_parameters() order, concatenated.
  BATCH:  int64 batch size B, then B*1*28*28 float32 inputs, then B int64 labels.
  OUT:    written: float64 mean loss, float64 summed eval loss, int64 correct count, then the
          gradients of the mean loss as float32, in parameter order, concatenated.
Dropout is off (eval mode for the forward pass), as in the plugin with dropout=0.
"""
import os
import struct
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools"))
from recipe_convnet import ConvNet  # noqa: E402


def main():
    params_path, batch_path, out_path = sys.argv[1:4]
    torch.set_num_threads(1)
    model = ConvNet()
    flat = torch.from_file(params_path, size=sum(p.numel() for p in model.parameters()),
                           dtype=torch.float32)
    offset = 0
    with torch.no_grad():
        for parameter in model.parameters():
            count = parameter.numel()
            parameter.copy_(flat[offset:offset + count].view_as(parameter))
            offset += count
    with open(batch_path, "rb") as batch_file:
        data = batch_file.read()
    (batch,) = struct.unpack_from("<q", data, 0)
    pixels = batch * 28 * 28
    images = torch.frombuffer(bytearray(data[8:8 + 4 * pixels]), dtype=torch.float32)
    labels = torch.frombuffer(bytearray(data[8 + 4 * pixels:]), dtype=torch.int64)
    images = images.view(batch, 1, 28, 28)

    model.eval()
    loss = F.nll_loss(model(images), labels)
    loss.backward()
    with torch.no_grad():
        output = model(images)
        loss_sum = F.nll_loss(output, labels, reduction="sum").item()
        correct = int(output.argmax(1).eq(labels).sum().item())
    with open(out_path, "wb") as out:
        out.write(struct.pack("<ddq", loss.item(), loss_sum, correct))
        for parameter in model.parameters():
            out.write(parameter.grad.contiguous().numpy().tobytes())


if __name__ == "__main__":
    main()
