#!/usr/bin/env python3
"""Samples text from a GPT (tools/gpt_model.py, dpl's C++ gpt network) with byte-level tokens.

    tools/generate.py gpt.pt --heads 4 --prompt "ROMEO:" --tokens 200 --temperature 0.8 --top-k 40
    tools/generate.py gpt_script.pt --tokens 100         # a TorchScript export (export_model.py)

MODEL is a state dict ({name: tensor}: the launcher's --export, or torch.save(model.state_dict()))
loaded into tools/gpt_model.py's GPT, its sizes read from the tensors' shapes and --heads (which
shapes do not tell), or a TorchScript GPT (torch.jit.save). Tokens are the bytes of UTF-8 text
(a vocabulary of 256): the prompt's bytes go in, the sampled bytes come out decoded with
errors='replace'. Each step feeds the last `block` tokens and samples the next one from the last
position's logits divided by --temperature, among the --top-k likeliest (nanoGPT's sample.py);
--temperature 0 takes the likeliest token. Runs under dpl's Python environment
(tools/dpl_python.py).
"""
import argparse
import os
import sys
import warnings
import zipfile

import dpl_python

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_model import GPT, load_state, sizes_from_state  # noqa: E402

BYTE_VOCABULARY = 256


class GenerateError(Exception):
    pass


def is_torchscript(path):
    """torch.jit.save archives hold constants.pkl; torch.save archives do not."""
    try:
        with zipfile.ZipFile(path) as archive:
            return any(name.endswith("/constants.pkl") for name in archive.namelist())
    except zipfile.BadZipFile:
        return False


def load_model(path, heads):
    """(model, vocab, block) in eval mode."""
    if not os.path.isfile(path):
        raise GenerateError(f"no file {path}")
    if is_torchscript(path):
        # torch 2 deprecates TorchScript, which --export still writes; the samples should not
        # start with that warning.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=FutureWarning, message=".*torch.jit.load")
            model = torch.jit.load(path, map_location="cpu")
        state = model.state_dict()
    else:
        state = torch.load(path, map_location="cpu")
        if not isinstance(state, dict):
            raise GenerateError(f"{path} holds a {type(state).__name__}, not a state dict")
        if heads is None:
            raise GenerateError("a state dict does not say how many attention heads the network "
                                "has: give --heads (the model option heads it was trained with)")
        try:
            model = load_state(GPT(**sizes_from_state(state, heads)), state)
        except (ValueError, RuntimeError) as error:
            raise GenerateError(f"{path}: {error}")
    wte = state.get("transformer.wte.weight", state.get("lm_head.weight"))
    if wte is None or "transformer.wpe.weight" not in state:
        raise GenerateError(f"{path} is not a GPT: it has no transformer.wte.weight and "
                            "transformer.wpe.weight")
    return model.eval(), wte.shape[0], state["transformer.wpe.weight"].shape[0]


def next_token(logits, temperature, top_k):
    """One token per row of `logits` (batch, vocab)."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits / temperature
    if top_k:
        kept, _ = torch.topk(logits, min(top_k, logits.size(-1)))
        logits[logits < kept[:, [-1]]] = -float("inf")
    return torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)


@torch.no_grad()
def generate(model, idx, tokens, block, temperature, top_k):
    for _ in range(tokens):
        logits = model(idx[:, -block:])[:, -1, :]
        idx = torch.cat((idx, next_token(logits, temperature, top_k)), dim=1)
    return idx


def run(args):
    model, vocab, block = load_model(args.model, args.heads)
    if vocab != BYTE_VOCABULARY:
        raise GenerateError(f"{args.model} has a vocabulary of {vocab} tokens; byte-level text "
                            f"needs {BYTE_VOCABULARY}")
    prompt = list(args.prompt.encode("utf-8"))
    if not prompt:
        raise GenerateError("--prompt is empty: give at least one character to start from")
    torch.manual_seed(args.seed)
    idx = generate(model, torch.tensor([prompt], dtype=torch.long), args.tokens, block,
                   args.temperature, args.top_k)
    print(bytes(idx[0].tolist()).decode("utf-8", errors="replace"))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a GPT state dict or TorchScript file")
    parser.add_argument("--prompt", default="\n", help="the text to continue (default: newline)")
    parser.add_argument("--tokens", type=int, default=200, help="bytes to sample (default 200)")
    parser.add_argument("--temperature", type=float, default=0.8,
                        help="divides the logits; 0 takes the likeliest token (default 0.8)")
    parser.add_argument("--top-k", type=int, default=0,
                        help="sample among the K likeliest tokens only (default 0: all)")
    parser.add_argument("--seed", type=int, default=1337, help="torch.manual_seed (default 1337)")
    parser.add_argument("--heads", type=int, help="attention heads, for a state dict")
    args = parser.parse_args(argv)
    if args.tokens < 0 or args.top_k < 0 or args.temperature < 0:
        parser.error("--tokens, --top-k and --temperature must not be negative")
    if args.heads is not None and args.heads < 1:
        parser.error("--heads must be >= 1")
    try:
        run(args)
    except GenerateError as error:
        print(f"generate.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
