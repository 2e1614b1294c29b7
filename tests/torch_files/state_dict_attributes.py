"""Python's side of ReadsStateDictsWithPythonAttributes (torch_pickle_test.cpp), run with a folder.

Writes plain.pt, torch.save(module.state_dict()), and attributes_p2.pt / attributes_p3.pt, the
same state dict given two attributes, which torch.save keeps as the OrderedDict's object state:
an argparse.Namespace (NEWOBJ) and bytes (SHORT_BINBYTES in protocol 3, a _codecs.encode call in
protocol 2). Exits 3 when torch cannot be imported, 1 when protocol 3 did not use those opcodes.
"""

import argparse
import os
import pickletools
import sys
import zipfile

try:
    import torch
except ImportError as error:
    print(f"import torch failed: {error}")
    sys.exit(3)


def opcodes(path):
    with zipfile.ZipFile(path) as archive:
        pickle = next(name for name in archive.namelist() if name.endswith("/data.pkl"))
        return {opcode.name for opcode, _, _ in pickletools.genops(archive.read(pickle))}


def main():
    folder = sys.argv[1]
    torch.manual_seed(0)
    state = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.BatchNorm1d(2)).state_dict()
    torch.save(state, os.path.join(folder, "plain.pt"))
    state.config = argparse.Namespace(lr=0.1, name="run")
    state.blob = b"\x00\x01bytes"
    for protocol in (2, 3):
        path = os.path.join(folder, f"attributes_p{protocol}.pt")
        torch.save(state, path, pickle_protocol=protocol)
    missing = {"NEWOBJ", "SHORT_BINBYTES"} - opcodes(os.path.join(folder, "attributes_p3.pt"))
    if missing:
        print(f"attributes_p3.pt has no {sorted(missing)}")
        sys.exit(1)


if __name__ == "__main__":
    main()
