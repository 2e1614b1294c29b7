"""Python torch's side of the gpt network tests (dpl's Python, DPL_TEST_PYTHON): tools/gpt_model.py's GPT.

    gpt_reference.py write DIR           state dicts, a batch and the logits and losses of them
    gpt_reference.py logits STATE BATCH OUT HEADS
        torch.load(STATE) into GPT (strict load_state_dict, sizes from the shapes), the logits of
        BATCH's idx in eval mode saved to OUT as {"logits": tensor}
    gpt_reference.py script | causal | init | refusals | counts
        checks of the Python class on its own; each prints what it measured, exits 1 on a failure

Files are torch.save dicts of tensors, which dpl's state-file reader reads.
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

import export_model  # noqa: E402  (tools/export_model.py)
from gpt_model import GPT, parameter_count, sequence_loss, sizes_from_state  # noqa: E402

TINY = dict(vocab=256, block=32, layers=2, heads=4, dim=64)
BATCH, STEPS = 4, 32


def fail(message):
    print(f"FAILED: {message}")
    sys.exit(1)


def perturbed(model, seed):
    """Weights away from nanoGPT's init (LayerNorm ones and zeros, zero biases), so that a mixed-up
    name or a missing bias changes the logits."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
    return model


def write(directory):
    generator = torch.Generator().manual_seed(11)
    idx = torch.randint(0, TINY["vocab"], (BATCH, STEPS), generator=generator)
    targets = torch.randint(0, TINY["vocab"], (BATCH, STEPS), generator=generator)
    torch.save({"idx": idx, "targets": targets}, os.path.join(directory, "batch.pt"))
    for bias in (1, 0):
        model = perturbed(GPT(**TINY, bias=bool(bias)), seed=20 + bias).eval()
        torch.save(model.state_dict(), os.path.join(directory, f"state_bias{bias}.pt"))
        with torch.no_grad():
            logits = model(idx)
        torch.save({"logits": logits, "loss": sequence_loss(logits, targets)},
                   os.path.join(directory, f"expected_bias{bias}.pt"))
        torch.manual_seed(7)  # the C++ network built after torch::manual_seed(7) must equal it
        torch.save(GPT(**TINY, bias=bool(bias)).state_dict(),
                   os.path.join(directory, f"seed7_bias{bias}.pt"))
    torch.manual_seed(5)
    model = GPT(**TINY, dropout=0.25).train()
    torch.manual_seed(9)
    torch.save({"logits": model(idx).detach()}, os.path.join(directory, "dropout_seed5_9.pt"))
    kwargs = '{"vocab": 256, "block": 32, "layers": 2, "heads": 4, "dim": 64}'
    if export_model.main([os.path.join(directory, "gpt_script.pt"), "--module",
                          os.path.join(HERE, "..", "..", "tools", "gpt_model.py") + ":GPT",
                          "--kwargs", kwargs, "--input-shape", "32", "--token-ids", "256"]) != 0:
        fail("export_model.py could not export the GPT")


def logits(state_path, batch_path, out_path, heads):
    state = torch.load(state_path)
    model = GPT(**sizes_from_state(state, int(heads)))
    model.load_state_dict(state)  # strict: the file must hold nanoGPT's names, lm_head.weight too
    model.eval()
    with torch.no_grad():
        output = model(torch.load(batch_path)["idx"])
    torch.save({"logits": output}, out_path)
    print(f"keys {len(state)} logits {tuple(output.shape)}")


def check_script():
    for bias in (True, False):
        torch.manual_seed(3)
        model = perturbed(GPT(**TINY, bias=bias), seed=4).eval()
        scripted = torch.jit.script(model)
        idx = torch.randint(0, 256, (2, 20))
        with torch.no_grad():
            difference = (scripted(idx) - model(idx)).abs().max().item()
        print(f"bias {int(bias)} scripted_vs_eager {difference!r}")
        if difference > 1e-6:
            fail(f"the scripted GPT differs from the eager one by {difference}")
        names = [name for name, _ in scripted.named_parameters()]
        if names[:2] != ["transformer.wte.weight", "transformer.wpe.weight"]:
            fail(f"scripted parameter names {names[:2]}")


def check_causal():
    torch.manual_seed(0)
    model = perturbed(GPT(**TINY), seed=1).eval()
    idx = torch.randint(0, 256, (2, STEPS))
    changed = idx.clone()
    changed[:, 10] = (changed[:, 10] + 1) % 256
    with torch.no_grad():
        before, after = model(idx), model(changed)
    earlier = (before[:, :10] - after[:, :10]).abs().max().item()
    later = (before[:, 10:] - after[:, 10:]).abs().amin(-1).amax().item()
    print(f"earlier_change {earlier!r} later_change {later!r}")
    if earlier != 0.0:
        fail(f"changing token 10 changed the logits of earlier positions by {earlier}")
    if later == 0.0:
        fail("changing token 10 changed no logit of position 10 or later")


def check_init():
    torch.manual_seed(0)
    layers = 4
    model = GPT(vocab=512, block=128, layers=layers, heads=4, dim=128)
    projection = 0.02 / (2 * layers) ** 0.5
    for name, parameter in model.named_parameters():
        if name.endswith("c_proj.weight"):
            expected = projection
        elif name.endswith(".weight") and parameter.dim() == 2:
            expected = 0.02
        else:  # LayerNorm weights ones, every bias zero
            fill = 1.0 if "ln_" in name and name.endswith(".weight") else 0.0
            if not torch.equal(parameter, torch.full_like(parameter, fill)):
                fail(f"{name} is not all {fill}")
            continue
        std, mean = parameter.std().item(), parameter.mean().item()
        if abs(std / expected - 1) > 0.03 or abs(mean) > 3 * expected / parameter.numel() ** 0.5:
            fail(f"{name}: std {std} mean {mean}, expected std {expected} mean 0")
    print(f"init ok projection_std {projection!r}")


REFUSALS = [
    (dict(layers=0), 'option "layers" must be at least 1, got 0'),
    (dict(heads=-2), 'option "heads" must be at least 1, got -2'),
    (dict(dim=0), 'option "dim" must be at least 1, got 0'),
    (dict(block=0), 'option "block" must be at least 1, got 0'),
    (dict(vocab=0), "the vocabulary must hold at least 1 token, got 0"),
    (dict(dim=100, heads=3), 'option "dim" (100) must be divisible by option "heads" (3): '
                             "each head attends over dim / heads of the dimensions"),
    (dict(dropout=1.0), 'option "dropout" must be in [0, 1), got 1'),
    (dict(dropout=-0.5), 'option "dropout" must be in [0, 1), got -0.5'),
]


def check_refusals():
    for changes, message in REFUSALS:
        try:
            GPT(**dict(TINY, **changes))
        except ValueError as error:
            if str(error) != message:
                fail(f"{changes}: {error!r}, expected {message!r}")
            continue
        fail(f"{changes} was accepted")
    try:
        GPT(**TINY)(torch.zeros(1, 33, dtype=torch.long))
        fail("a sequence of 33 tokens was accepted by a block of 32")
    except ValueError as error:
        print(f"refused: {error}")


def check_counts():
    tiny = parameter_count(GPT(**TINY))
    shakespeare = GPT(vocab=65, block=256, layers=6, heads=6, dim=384, bias=False)
    non_embedding = parameter_count(shakespeare) - shakespeare.transformer.wpe.weight.numel()
    print(f"tiny {tiny} shakespeare {parameter_count(shakespeare)} "
          f"shakespeare_non_embedding {non_embedding}")
    if round(non_embedding / 1e6, 2) != 10.65:  # what nanoGPT prints for this model
        fail(f"{non_embedding} parameters, nanoGPT has 10.65M")


def main(argv):
    checks = {"script": check_script, "causal": check_causal, "init": check_init,
              "refusals": check_refusals, "counts": check_counts}
    if len(argv) == 2 and argv[0] == "write":
        write(argv[1])
    elif len(argv) == 5 and argv[0] == "logits":
        logits(*argv[1:])
    elif len(argv) == 1 and argv[0] in checks:
        checks[argv[0]]()
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
