"""Python torch's side of the language-model runs (dpl's Python, DPL_TEST_PYTHON): tools/gpt_model.py's
GPT on byte-level text, as the `text` data plugin cuts it.

    language_model_reference.py state OUT SEED
        a tiny GPT (2 layers, 4 heads, 64 dims, block 32, bytes) built after torch.manual_seed(SEED)
        and moved off nanoGPT's init, its state_dict() saved to OUT
    language_model_reference.py loss STATE TEXT HEADS
        torch.load(STATE) into GPT strictly (sizes from the shapes), evaluated on TEXT's windows
        at offset 0 (sample i: bytes [i*block, i*block + block], input the first block, target
        the next): prints "loss L correct C count N", L the mean cross-entropy per token, C the
        tokens whose arg-max is the target, N the tokens
"""
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))

from gpt_model import GPT, sequence_loss, sizes_from_state  # noqa: E402

TINY = dict(vocab=256, block=32, layers=2, heads=4, dim=64)


def state(out_path, seed):
    torch.manual_seed(int(seed))
    model = GPT(**TINY)
    generator = torch.Generator().manual_seed(int(seed) + 1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.05)
    torch.save(model.state_dict(), out_path)


def windows(text_path, block):
    with open(text_path, "rb") as f:
        ids = torch.tensor(list(f.read()), dtype=torch.long)
    count = (ids.numel() - 1) // block
    samples = torch.stack([ids[i * block:i * block + block + 1] for i in range(count)])
    return samples[:, :-1], samples[:, 1:]


def loss(state_path, text_path, heads):
    saved = torch.load(state_path)
    model = GPT(**sizes_from_state(saved, int(heads)))
    model.load_state_dict(saved)  # strict: every name of nanoGPT's state dict, lm_head.weight too
    model.eval()
    idx, targets = windows(text_path, model.block)
    with torch.no_grad():
        logits = model(idx)
    mean = sequence_loss(logits, targets).item()
    correct = (logits.argmax(-1) == targets).sum().item()
    print(f"loss {mean!r} correct {correct} count {targets.numel()}")


def main(argv):
    if len(argv) == 3 and argv[0] == "state":
        state(*argv[1:])
    elif len(argv) == 4 and argv[0] == "loss":
        loss(*argv[1:])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
