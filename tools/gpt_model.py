"""nanoGPT's decoder-only transformer (github.com/karpathy/nanoGPT, model.py) as the Python twin
of dpl's C++ network (models/gpt): the same parameter names, initialisation and arithmetic, so a
state dict written by either side loads into the other and gives the same logits.

    from gpt_model import GPT, sequence_loss
    model = GPT(vocab=256, block=32, layers=2, heads=4, dim=64)
    logits = model(idx)                    # (batch, T) int64 token ids -> (batch, T, vocab)
    loss = sequence_loss(logits, targets)  # the mean cross-entropy over every position

    tools/export_model.py gpt.pt --module tools/gpt_model.py:GPT \\
        --kwargs '{"vocab": 256, "block": 32, "layers": 2, "heads": 4, "dim": 64}' \\
        --input-shape 32 --token-ids 256

The module scripts with torch.jit.script (Debian's torch 1.13 and later; the pinned torch 2.15
scripts it too, warning that TorchScript is deprecated). Where torch has
F.scaled_dot_product_attention (2.0 and later) attention is fused, as nanoGPT's "flash" path; on
1.13 it is written out, with the values of the C++ network (which takes sequences of 128 positions
or more in two halves, skipping masked work, and scales and masks the scores in their product).
"""
import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

# The C++ network's defaults (models/gpt/README.md): nanoGPT's Shakespeare-char size.
DEFAULTS = dict(vocab=256, block=256, layers=6, heads=6, dim=384, dropout=0.0, bias=True)
INIT_STD = 0.02  # nanoGPT's normal init of every Linear and Embedding weight
FUSED_ATTENTION = hasattr(F, "scaled_dot_product_attention")
TIED_NAME = "transformer.wte.weight"
HEAD_NAME = "lm_head.weight"
NANOGPT_MASK = re.compile(r"transformer\.h\.[0-9]+\.attn\.bias")


def check_config(vocab, block, layers, heads, dim, dropout):
    """Raises ValueError with the C++ network's message for sizes it refuses."""
    if vocab < 1:
        raise ValueError(f"the vocabulary must hold at least 1 token, got {vocab}")
    for option, value in (("layers", layers), ("heads", heads), ("dim", dim), ("block", block)):
        if value < 1:
            raise ValueError(f'option "{option}" must be at least 1, got {value}')
    if dim % heads != 0:
        raise ValueError(f'option "dim" ({dim}) must be divisible by option "heads" ({heads}): '
                         "each head attends over dim / heads of the dimensions")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f'option "dropout" must be in [0, 1), got {dropout:g}')


class LayerNorm(nn.Module):
    """LayerNorm with a weight, and a bias only when `bias` (eps 1e-5)."""

    def __init__(self, dim: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    fused: torch.jit.Final[bool]

    def __init__(self, dim: int, heads: int, dropout: float, bias: bool):
        super().__init__()
        self.c_attn = nn.Linear(dim, 3 * dim, bias=bias)
        self.c_proj = nn.Linear(dim, dim, bias=bias)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.heads = heads
        self.dim = dim
        self.dropout = dropout
        self.fused = FUSED_ATTENTION

    def forward(self, x, future):
        """x (batch, T, dim); future (T, T) bool, True above the diagonal (unused when fused)."""
        batch, steps, dim = x.size()
        q, k, v = self.c_attn(x).split(self.dim, dim=2)
        q = q.view(batch, steps, self.heads, dim // self.heads).transpose(1, 2)
        k = k.view(batch, steps, self.heads, dim // self.heads).transpose(1, 2)
        v = v.view(batch, steps, self.heads, dim // self.heads).transpose(1, 2)
        if self.fused:  # a constant: TorchScript compiles only the branch taken
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, is_causal=True,
                                               dropout_p=self.dropout if self.training else 0.0)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(future, float("-inf"))
            att = self.attn_dropout(F.softmax(att, dim=-1))
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(batch, steps, dim)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, dim: int, dropout: float, bias: bool):
        super().__init__()
        self.c_fc = nn.Linear(dim, 4 * dim, bias=bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * dim, dim, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, dim: int, heads: int, dropout: float, bias: bool):
        super().__init__()
        self.ln_1 = LayerNorm(dim, bias)
        self.attn = CausalSelfAttention(dim, heads, dropout, bias)
        self.ln_2 = LayerNorm(dim, bias)
        self.mlp = MLP(dim, dropout, bias)

    def forward(self, x, future):
        x = x + self.attn(self.ln_1(x), future)
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """(batch, T) token ids, 1 <= T <= block -> (batch, T, vocab) logits."""

    fused: torch.jit.Final[bool]

    def __init__(self, vocab: int = DEFAULTS["vocab"], block: int = DEFAULTS["block"],
                 layers: int = DEFAULTS["layers"], heads: int = DEFAULTS["heads"],
                 dim: int = DEFAULTS["dim"], dropout: float = DEFAULTS["dropout"],
                 bias: bool = DEFAULTS["bias"]):
        super().__init__()
        check_config(vocab, block, layers, heads, dim, dropout)
        self.vocab, self.block, self.layers, self.heads, self.dim = vocab, block, layers, heads, dim
        self.fused = FUSED_ATTENTION
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, dim),
            wpe=nn.Embedding(block, dim),
            drop=nn.Dropout(dropout),
            h=nn.ModuleList([Block(dim, heads, dropout, bias) for _ in range(layers)]),
            ln_f=LayerNorm(dim, bias),
        ))
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied: one tensor, two names
        self.apply(self._init_weights)
        for name, parameter in self.named_parameters():
            if name.endswith("c_proj.weight"):  # residual projections, scaled down with depth
                nn.init.normal_(parameter, mean=0.0, std=INIT_STD / math.sqrt(2 * layers))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=INIT_STD)

    def forward(self, idx):
        steps = idx.size(1)
        if steps < 1 or steps > self.block:
            raise ValueError("a sequence of {} tokens does not fit the network's block of {} "
                             "positions (option block)".format(steps, self.block))
        pos = torch.arange(0, steps, dtype=torch.long, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        if self.fused:
            future = torch.empty(0, dtype=torch.bool, device=idx.device)
        else:
            future = torch.ones(steps, steps, dtype=torch.bool, device=idx.device).triu(1)
        for block in self.transformer.h:
            x = block(x, future)
        return self.lm_head(self.transformer.ln_f(x))


def sequence_loss(logits, targets):
    """The mean cross-entropy over every position: logits (batch, T, vocab), targets (batch, T)."""
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def parameter_count(model):
    """Parameters as the optimizer sees them (the tied weight once)."""
    return sum(parameter.numel() for parameter in model.parameters())


def sizes_from_state(state, heads):
    """GPT's constructor arguments read from a state dict's shapes; `heads` is not in them."""
    tied = state.get(TIED_NAME, state.get(HEAD_NAME))
    if tied is None or "transformer.wpe.weight" not in state:
        raise ValueError(f"not a gpt state dict: it has no {TIED_NAME} and "
                         "transformer.wpe.weight")
    layers = 0
    while f"transformer.h.{layers}.ln_1.weight" in state:
        layers += 1
    return dict(vocab=tied.shape[0], dim=tied.shape[1], block=state["transformer.wpe.weight"]
                .shape[0], layers=layers, heads=heads, bias="transformer.ln_f.bias" in state)


def load_state(model, state):
    """model.load_state_dict(state) for a state dict that names the tied weight once or twice
    (as transformer.wte.weight, lm_head.weight or both) and may hold nanoGPT's mask buffers."""
    state = {name: tensor for name, tensor in state.items() if not NANOGPT_MASK.fullmatch(name)}
    for name, other in ((TIED_NAME, HEAD_NAME), (HEAD_NAME, TIED_NAME)):
        if name not in state and other in state:
            state[name] = state[other]
    model.load_state_dict(state)
    return model
