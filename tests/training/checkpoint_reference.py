"""Reference for checkpoint_test: loads a dpl checkpoint with torch.load and checks that it is the
dict the test wrote (CheckpointTest::Sample(4, 3)), by name.
Usage: checkpoint_reference.py PATH
Exits with 77 when torch cannot be imported."""
import sys

try:
    import torch
except ImportError as error:
    print("import torch failed:", error, file=sys.stderr)
    sys.exit(77)

checkpoint = torch.load(sys.argv[1])
assert checkpoint["format"] == "dpl-checkpoint" and checkpoint["version"] == 3, checkpoint
assert checkpoint["position"] == {"epoch": 2, "step_in_epoch": 17, "global_step": 4}
model = checkpoint["model"]
assert list(model) == ["fc.weight", "fc.bias", "bn.num_batches_tracked"], list(model)
assert model["fc.weight"].dtype == torch.float32 and model["fc.weight"].tolist() == [1.5] * 3
assert model["fc.bias"].tolist() == [-1.0, 2.0]
assert model["bn.num_batches_tracked"].dtype == torch.int64
assert model["bn.num_batches_tracked"].item() == 7
optimizer = checkpoint["optimizer"]
assert optimizer["name"] == "adadelta" and optimizer["steps"] == 4
assert optimizer["state"]["fc.bias"]["square_avg"].tolist() == [3.0, 4.0]
assert checkpoint["rng"].tolist() == [1, 2, 3, 250]
# GradScaler.state_dict()'s keys, and the skipped steps.
assert checkpoint["scaler"] == {"scale": 32768.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                                "growth_interval": 2000, "_growth_tracker": 11,
                                "skipped_steps": 3}, checkpoint["scaler"]
assert checkpoint["options"] == {"--model": "convnet", "--seed": "0"}, checkpoint["options"]
# The model's part loads into a module straight away.
module = torch.nn.Module()
module.register_parameter("w", torch.nn.Parameter(torch.zeros(3)))
module.load_state_dict({"w": model["fc.weight"]})
print("checkpoint ok")
