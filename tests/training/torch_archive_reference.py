"""The PyTorch side of torch_archive_test.cpp, run once with the test's folder as argument.

1. Loads every cpp_*.pt that the test wrote there with torch.load, and again with
   weights_only=True, torch 2's default, which must read the same value (torch 1.13's restricted
   unpickler knows no floats: there only the state dict is loaded so); checks that its tensors
   are plain contiguous CPU tensors, loads its "model" into the module below with
   load_state_dict (strict), and writes the value's rendering to <file>.txt.
2. Checks every cpp_*.zip with zipfile (CRCs included) and writes "name hex-bytes" lines to
   <file>.txt.
3. Writes py_*.pt files with torch.save (and their renderings to py_*.pt.txt), and files the
   reader must refuse: a TorchScript archive, a legacy torch.save file, a pickle calling
   os.system.

A rendering names every value's exact Python type and its bits (floats as big-endian IEEE hex,
strings as UTF-8 hex, tensors as dtype, shape and raw bytes); the test renders what it read or
wrote the same way and compares. Exits 3 when torch cannot be imported.
"""

import collections
import os
import struct
import sys
import zipfile

try:
    import torch
except ImportError as error:
    print(f"import torch failed: {error}")
    sys.exit(3)


def make_module():
    return torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2))


def render(value):
    kind = type(value)
    if value is None:
        return "None"
    if kind is bool:
        return f"bool:{value}"
    if kind is int:
        return f"int:{value}"
    if kind is float:
        return "float:" + struct.pack(">d", value).hex()
    if kind is str:
        return "str:" + value.encode("utf-8", "surrogatepass").hex()
    if kind is list:
        return "list[" + ",".join(render(item) for item in value) + "]"
    if kind is tuple:
        return "tuple(" + ",".join(render(item) for item in value) + ")"
    if kind is dict or kind is collections.OrderedDict:
        items = ",".join(render(k) + ":" + render(v) for k, v in value.items())
        return ("dict" if kind is dict else "OrderedDict") + "{" + items + "}"
    if isinstance(value, torch.Tensor):
        assert value.device.type == "cpu", value.device
        dtype = str(value.dtype).replace("torch.", "")
        flat = value.detach().contiguous().reshape(-1)
        data = flat.view(torch.uint8).numpy().tobytes().hex()
        shape = " ".join(str(d) for d in value.shape)
        return f"tensor<{dtype},[{shape}],{data}>"
    raise TypeError(f"unexpected value of type {kind}")


def tensors_in(value):
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


# torch 2 loads with weights_only=True unless told otherwise: what dpl writes must load so.
LOADS_RESTRICTED_BY_DEFAULT = int(torch.__version__.split(".")[0]) >= 2


def check_cpp_archive(path):
    loaded = torch.load(path, weights_only=False)
    if LOADS_RESTRICTED_BY_DEFAULT or path.endswith("state_dict.pt"):
        restricted = torch.load(path, weights_only=True)
        assert render(restricted) == render(loaded), "weights_only=True reads another value"
    for tensor in tensors_in(loaded):
        assert type(tensor) is torch.Tensor, type(tensor)
        assert tensor.is_contiguous() and tensor.storage_offset() == 0
        assert not tensor.requires_grad
    if isinstance(loaded, dict) and "model" in loaded:
        module = make_module()
        module.load_state_dict(loaded["model"], strict=True)
        for name, tensor in module.state_dict().items():
            assert torch.equal(tensor, loaded["model"][name]), name
    with open(path + ".txt", "w") as out:
        out.write(render(loaded))


def check_cpp_zip(path):
    with zipfile.ZipFile(path) as archive:
        assert archive.testzip() is None, "a record fails its CRC"
        lines = [f"{info.filename} {archive.read(info).hex()}" for info in archive.infolist()]
    with open(path + ".txt", "w") as out:
        out.write("\n".join(lines))


class CallsOsSystem:
    def __reduce__(self):
        return (os.system, ("echo this must never run",))


def save(value, folder, name, **options):
    path = os.path.join(folder, name)
    torch.save(value, path, **options)
    # This script wrote the file, so it may run its pickle: torch 2's restricted unpickler
    # (weights_only=True) refuses protocol 4's opcodes, which dpl's reader must still read.
    with open(path + ".txt", "w") as out:
        out.write(render(torch.load(path, weights_only=False)))


def write_python_archives(folder):
    torch.manual_seed(0)
    module = make_module()
    module.train()
    for _ in range(3):
        module(torch.randn(4, 3))
    save(module.state_dict(), folder, "py_state_dict.pt")

    optimizer = torch.optim.Adam(module.parameters(), lr=1e-3)
    module(torch.randn(4, 3)).sum().backward()
    optimizer.step()
    base = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    tied = torch.randn(2, 2)
    checkpoint = {
        "model": module.state_dict(),
        "optimizer": optimizer.state_dict(),
        "epoch": 3,
        "step": 2**40,
        "min": -(2**63),
        "max": 2**63 - 1,
        "negative": -129,
        "lr": 0.1,
        "nan": float("nan"),
        "minus_infinity": float("-inf"),
        "name": "caf\u00e9 \u2713 \U0001F600",
        "flags": [True, False, None],
        "betas": (0.9, 0.999),
        "views": {
            "transposed": base.t(),
            "slice": base[1:, 1:3],
            "row": base[2],
            "every_other": base[:, ::2],
            "expanded": torch.ones(1).expand(3),
        },
        "dtypes": {
            "float64": torch.randn(2, 2, dtype=torch.float64),
            "float16": torch.tensor([1.0, -2.0, 65504.0], dtype=torch.float16),
            "bfloat16": torch.tensor([1.0, -3.0], dtype=torch.bfloat16),
            "int64": torch.tensor([-(2**63), 2**63 - 1]),
            "int32": torch.tensor([-5, 6], dtype=torch.int32),
            "int16": torch.tensor([-300, 300], dtype=torch.int16),
            "int8": torch.tensor([-128, 127], dtype=torch.int8),
            "uint8": torch.tensor([0, 255], dtype=torch.uint8),
            "bool": torch.tensor([True, False, True]),
        },
        "tied": [tied, tied],
        "empty": torch.empty(0, 3),
        "scalar": torch.tensor(2.5),
        "parameter": torch.nn.Parameter(torch.ones(2)),
    }
    save(checkpoint, folder, "py_checkpoint.pt")
    save({"weight": torch.ones(2, 2), "names": ["a", "b"]}, folder, "py_protocol4.pt",
         pickle_protocol=4)

    torch.jit.save(torch.jit.script(module), os.path.join(folder, "py_torchscript.pt"))
    torch.save(module.state_dict(), os.path.join(folder, "py_legacy.pt"),
               _use_new_zipfile_serialization=False)
    torch.save(CallsOsSystem(), os.path.join(folder, "py_os_system.pt"))


def main():
    folder = sys.argv[1]
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if name.startswith("cpp_") and name.endswith(".pt"):
            check_cpp_archive(path)
        elif name.startswith("cpp_") and name.endswith(".zip"):
            check_cpp_zip(path)
    write_python_archives(folder)


if __name__ == "__main__":
    main()
