"""Reference for the checkpoint forms (Note [Checkpoint forms] in checkpoint_folder.hpp): loads a
folder of parts and a one-file checkpoint of the same state with torch.load(weights_only=True),
assembles the folder's optimizer state from its parts as its manifest lists them, and checks that
both hold the same values.
Usage: checkpoint_folder_reference.py FOLDER FILE
Exits with 77 when torch cannot be imported."""
import os
import sys

try:
    import torch
except ImportError as error:
    print("import torch failed:", error, file=sys.stderr)
    sys.exit(77)


def load(path):
    return torch.load(path, weights_only=True)


folder, file = sys.argv[1], sys.argv[2]
manifest = load(os.path.join(folder, "manifest.pt"))
assert manifest["format"] == "dpl-checkpoint-manifest" and manifest["version"] == 1, manifest
assert len(manifest["parts"]) == manifest["world_size"], manifest
state = load(os.path.join(folder, manifest["state"]))
whole = load(file)
assert state["format"] == "dpl-checkpoint", state.keys()
assert state["position"] == whole["position"], (state["position"], whole["position"])
assert state["optimizer"]["state"] == {}, "the optimizer's state is in the parts"
assert list(state["model"]) == list(whole["model"])
for name, tensor in whole["model"].items():
    assert torch.equal(state["model"][name], tensor), name

assembled = {}
for rank, name in enumerate(manifest["parts"]):
    part = load(os.path.join(folder, name))
    assert part["format"] == "dpl-checkpoint-part" and part["rank"] == rank, part
    assert part["global_step"] == manifest["global_step"]
    for run in part["runs"]:
        values = state["model"][run["parameter"]].reshape(-1)
        for key, piece in run["state"].items():
            flat = assembled.setdefault(run["parameter"], {}).setdefault(
                key, torch.full_like(values, float("nan")))
            flat[run["offset"]:run["offset"] + piece.numel()] = piece
expected = whole["optimizer"]["state"]
assert sorted(assembled) == sorted(expected), (sorted(assembled), sorted(expected))
for parameter, states in expected.items():
    assert sorted(states) == sorted(assembled[parameter]), parameter
    for key, tensor in states.items():
        got = assembled[parameter][key].reshape(tensor.shape)
        assert torch.equal(got, tensor), (parameter, key)
print("folder ok")
