"""Python torch's side of the model tests (dpl's Python, DPL_TEST_PYTHON).

    fixtures.py write DIR           TorchScript files, state dicts and a batch for the tests
    fixtures.py state FILE BATCH    torch.load(FILE) into the recipe's ConvNet, evaluated on BATCH
    fixtures.py script FILE BATCH   torch.jit.load(FILE), evaluated on BATCH

BATCH files: int64 B, int64 D, D int64 extents of one sample, B*prod(extents) float32 inputs,
B int64 labels. `state` and `script` print one line of `key value` pairs: loss_sum (nll, summed),
correct, training (0/1, script only), keys (state only, comma-separated in file order).
"""
import os
import struct
import sys

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

import export_model  # noqa: E402  (tools/export_model.py)
import fixture_models  # noqa: E402


def write_batch(path, images, labels):
    with open(path, "wb") as out:
        out.write(struct.pack("<qq", images.shape[0], images.dim() - 1))
        out.write(struct.pack(f"<{images.dim() - 1}q", *images.shape[1:]))
        out.write(images.contiguous().numpy().tobytes())
        out.write(labels.contiguous().numpy().tobytes())


def read_batch(path):
    with open(path, "rb") as source:
        data = source.read()
    batch, ndim = struct.unpack_from("<qq", data, 0)
    shape = struct.unpack_from(f"<{ndim}q", data, 16)
    offset = 16 + 8 * ndim
    count = batch
    for extent in shape:
        count *= extent
    images = torch.frombuffer(bytearray(data[offset:offset + 4 * count]), dtype=torch.float32)
    labels = torch.frombuffer(bytearray(data[offset + 4 * count:]), dtype=torch.int64)
    return images.view((batch,) + tuple(shape)), labels


def evaluate(module, images, labels):
    module.eval()
    with torch.no_grad():
        output = module(images)
    loss_sum = F.nll_loss(output.float(), labels, reduction="sum").item()
    correct = int(output.argmax(1).eq(labels).sum().item())
    return f"loss_sum {loss_sum!r} correct {correct}"


def export(*argv):
    if export_model.main(list(argv)) != 0:
        raise SystemExit(f"export_model.py {' '.join(argv)} failed")


def write(directory):
    torch.set_num_threads(1)
    path = lambda name: os.path.join(directory, name)  # noqa: E731
    export(path("convnet_scripted.pt"))
    cnn = ["--module", "fixture_models:ResidualCnn", "--kwargs", '{"width": 8}']
    export(path("cnn_scripted.pt"), *cnn)
    export(path("cnn_traced.pt"), *cnn, "--trace", "--input-shape", "1,28,28")
    export(path("logits.pt"), "--module", "fixture_models:ResidualCnn", "--kwargs",
           '{"log_probabilities": false}')
    export(path("five_classes.pt"), "--module", "fixture_models:ResidualCnn", "--kwargs",
           '{"classes": 5}')
    export(path("no_parameters.pt"), "--module", "fixture_models:NoParameters")
    export(path("spare_layer.pt"), "--module", "fixture_models:SpareLayer")
    export(path("branched_product.pt"), "--module", "fixture_models:BranchedProduct")

    torch.manual_seed(1)
    convnet = export_model.ConvNet()
    torch.save(convnet.state_dict(), path("convnet_python_state.pt"))
    generator = torch.Generator().manual_seed(5)
    images = torch.randn((16, 1, 28, 28), generator=generator)
    labels = torch.randint(0, 10, (16,), generator=generator)
    write_batch(path("batch.bin"), images, labels)
    with open(path("convnet_python_eval.txt"), "w") as out:
        out.write(evaluate(convnet, images, labels) + "\n")
    # A Python checkpoint that is not a bare state dict, and a file that is no archive at all.
    torch.save({"model": convnet.state_dict(), "epoch": 3}, path("checkpoint_dict.pt"))
    with open(path("not_an_archive.pt"), "w") as out:
        out.write("not a torch file\n")


def state(file, batch):
    loaded = torch.load(file, weights_only=True)  # only tensors and plain containers
    if type(loaded) is not dict:
        raise SystemExit(f"torch.load({file}) gave a {type(loaded).__name__}, not a dict")
    model = export_model.ConvNet()
    model.load_state_dict(loaded)  # strict: exactly the module's names
    images, labels = read_batch(batch)
    print(evaluate(model, images, labels) + " keys " + ",".join(loaded.keys()))


def script(file, batch):
    module = torch.jit.load(file)
    training = int(module.training)
    images, labels = read_batch(batch)
    print(evaluate(module, images, labels) + f" training {training}")


def main():
    torch.set_num_threads(1)
    command, *args = sys.argv[1:]
    {"write": write, "state": state, "script": script}[command](*args)


if __name__ == "__main__":
    main()
