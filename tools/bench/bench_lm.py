#!/usr/bin/env python3
"""Language-model benchmark: tokens/s of dpl training nanoGPT's transformer against a PyTorch
DDP program of the recipe's shape (gpt_ddp.py) on the same data, network, batch and AdamW.

Sides, on the CPU (configs <processes>x<threads>-<backend>[-bf16], as bench_vs_peer.py's):
  gpt    dpl's C++ model plugin (`--model gpt`, models/gpt), fp32 or `--precision bf16`;
  ts     dpl's `--model torchscript` on tools/gpt_model.py's GPT, scripted once per size by
         tools/export_model.py (the same network, defined in Python);
  aot    dpl's `--model compiled` on tools/gpt_model.py's GPT, its training step compiled ahead of
         time by tools/compile_model.py once per size and precision (from the tool's cache, so
         the compile is not in the start-up);
  baseline  the gpt side run by an earlier build (--baseline LAUNCHER): gpt/baseline says whether
         a change cost throughput;
  peer   tools/bench/gpt_ddp.py on the torch of dpl's Python environment (PyTorch 2):
         mp.spawn, gloo, DistributedSampler over the same windows, DistributedDataParallel over
         tools/gpt_model.py's GPT, torch.optim.AdamW with nanoGPT's decay groups; fp32, so a bf16
         row is compared with the fp32 peer of its shape;
  tuned  the peer as a PyTorch 2 user tunes it: glibc's malloc thresholds raised
         (bench_vs_peer.py's TUNED_MALLOC) and DDP's gradient_as_bucket_view (gpt_ddp.py --tuned);
  compiled, compiled_warm
         tuned, and torch.compile on the model (gpt_ddp.py --compile, nanoGPT's compile=True),
         from an empty compile cache and then at once from the cache that run filled: their
         start-up holds the compile, cold and warm.
A new dpl side is one entry of DPL_SIDES (its model flags); the tables take every side given.
Sizes: tiny (2 layers, 4 heads, 64 dims, block 32, global batch 64) and shakespeare (nanoGPT's
Shakespeare-char: 6 layers, 6 heads, 384 dims, block 256, 10.8M parameters at vocabulary 256,
global batch 4) by default; gpt-1m (4 layers, 144 dims, 1.1M parameters), gpt-50m (10 layers,
640 dims, 49.6M) and gpt-100m (14 layers, 768 dims, 99.6M), Shakespeare-char's shape otherwise,
for the size sweep; vocab-50k (4 layers, 256 dims, block 128, global batch 8, GPT-2's vocabulary
of 50304: logits and the token embedding's gradient above 32 MiB); on byte tokens of Debian's
fortunes texts (tiled to the length a run reads; seeded random ids without them), AdamW (weight decay 0.1, betas 0.9,0.99, lr 1e-3), dropout 0,
seed 0 on every side.

The method is bench_vs_peer.py's (its functions are used): every program prints a loss line
every --log-every steps, this script timestamps the lines as they arrive; steady tokens/s =
(steps from the line at --first to the last line) x global batch x block / (time between them);
start-up = arrival of the --first line - the time those steps take at the steady rate; peak RSS
per worker = the largest VmHWM of a worker process, polled over the process tree. Each repeat
runs every side of every size and config back to back, rotating which side goes first, and a
ratio is the median of the repeats' own ratios, printed with the smallest and the largest.

--device cuda (a GPU machine): GPT-2 small's shape (12 layers, 12 heads, 768 dims, block 1024,
vocabulary 50304; seeded random ids), one GPU, bf16: dpl's gpt (`--device cuda --backend nccl`,
plugins from --plugin-dir) against the peer on nccl, one process, on the torch running this
script (the peer autocasts to bf16 and uses the fused AdamW and TF32, as nanoGPT does).
"""
import argparse
import glob
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
from bench_vs_peer import (COMPILE_CACHE, PEER_VARIANTS, PHASES, PHASES_LINE,  # noqa: E402
                           TUNED_MALLOC, median_cell, parse_config, ratio_cell, timed_run,
                           torch_version)


def cpu_size(**shape_and_steps):
    """A size trained on the CPU: AdamW at lr 1e-3, betas 0.9,0.99 (the docstring's settings)."""
    return dict(shape_and_steps, lr=1e-3, betas=(0.9, 0.99))


# The global batch is the same on every side: the peer gets batch / processes per process. The
# steps are few so that both CPU sizes, both shapes in fp32 and bf16 and 3 repeats take about
# 10 minutes on 2 cores (shakespeare: about 0.5 s a step for dpl, 1 s for the peer).
SIZES = {
    "tiny": cpu_size(layers=2, heads=4, dim=64, block=32, vocab=256, batch=64,
                     steps=100, first=20, log_every=10),
    "shakespeare": cpu_size(layers=6, heads=6, dim=384, block=256, vocab=256, batch=4,
                            steps=15, first=5, log_every=5),
    # Shakespeare-char's shape at about 1M, 50M and 100M parameters, for the size sweep of the
    # scaling work (scale_sweep.py runs the MLPs of those sizes); heads of 36 to 64 dimensions.
    "gpt-1m": cpu_size(layers=4, heads=4, dim=144, block=256, vocab=256, batch=4,
                       steps=60, first=20, log_every=10),
    "gpt-50m": cpu_size(layers=10, heads=10, dim=640, block=256, vocab=256, batch=4,
                        steps=10, first=4, log_every=2),
    "gpt-100m": cpu_size(layers=14, heads=12, dim=768, block=256, vocab=256, batch=4,
                         steps=8, first=4, log_every=2),
    # A small network at GPT-2's vocabulary: its logits (8 x 128 x 50304 floats) and the token
    # embedding's gradient are large blocks (Note [Large blocks kept for reuse] in the SDK).
    "vocab-50k": cpu_size(layers=4, heads=4, dim=256, block=128, vocab=50304, batch=8,
                          steps=30, first=10, log_every=5),
    # GPT-2 small on one GPU, with nanoGPT's optimizer settings for it.
    "gpt2": dict(layers=12, heads=12, dim=768, block=1024, vocab=50304, batch=16, lr=6e-4,
                 betas=(0.9, 0.95), steps=60, first=20, log_every=10),
}
WEIGHT_DECAY = 0.1
FORTUNES = "/usr/share/games/fortunes"
CPU_DEFAULTS = dict(sizes="tiny,shakespeare", configs="2x1-gloo,2x1-gloo-bf16,1x2-gloo,1x2-gloo-bf16",
                    sides="gpt,ts,peer,tuned,compiled,compiled_warm")
CUDA_DEFAULTS = dict(sizes="gpt2", configs="1x1-nccl-bf16", sides="gpt,peer")
# The peer's variants are bench_vs_peer.py's (gpt_ddp.py takes the same flags): peer, tuned,
# compiled (from an empty compile cache) and compiled_warm (from the cache compiled filled).
PEER_SIDES = tuple(PEER_VARIANTS)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def text_sources():
    """Debian's fortunes texts (tools/setup.sh installs them), sorted; [] without them."""
    return sorted(p for p in glob.glob(os.path.join(FORTUNES, "*"))
                  if os.path.isfile(p) and not os.path.islink(p) and not p.endswith(".dat"))


def write_tokens(folder, size, steps, use_text):
    """train.bin and val.bin (uint16 ids) holding the windows `steps` steps read and more; byte
    tokens of the fortunes texts tiled to that length, or seeded random ids. Returns the source."""
    os.makedirs(folder, exist_ok=True)
    length = (steps * size["batch"] + 16) * size["block"] + 2
    sources = text_sources() if use_text else []
    if sources:
        text = np.frombuffer(b"".join(open(p, "rb").read() for p in sources), dtype=np.uint8)
        ids = np.resize(text.astype(np.uint16), length)
        source = f"byte tokens of {len(sources)} texts of {FORTUNES} ({len(text)} bytes)"
    else:
        ids = np.random.default_rng(0).integers(0, size["vocab"], length, dtype=np.uint16)
        source = f"seeded random ids below {size['vocab']}"
    ids.tofile(os.path.join(folder, "train.bin"))
    ids[:4 * size["block"] + 1].tofile(os.path.join(folder, "val.bin"))
    return source


def gpt_tool_arguments(size):
    """export_model.py's and compile_model.py's arguments for tools/gpt_model.py's GPT of `size`."""
    kwargs = {k: size[k] for k in ("vocab", "block", "layers", "heads", "dim")}
    return ["--module", os.path.join(REPO, "tools", "gpt_model.py") + ":GPT",
            "--kwargs", json.dumps(kwargs), "--input-shape", str(size["block"]),
            "--token-ids", str(size["vocab"])]


def export_module(path, size):
    """tools/gpt_model.py's GPT of `size`, scripted for --model torchscript."""
    exported = subprocess.run([sys.executable, os.path.join(REPO, "tools", "export_model.py"), path,
                               *gpt_tool_arguments(size)], capture_output=True, text=True)
    if exported.returncode != 0:
        sys.exit(f"tools/export_model.py {path} failed:\n{exported.stderr}")


def gpt_model_flags(args, size, run):
    return ["--model", "gpt", "--model-options",
            ",".join(f"{k}={size[k]}" for k in ("layers", "heads", "dim", "block"))]


def torchscript_model_flags(args, size, run):
    return ["--model", "torchscript", "--model-options", f"file={run['module']},loss=cross_entropy"]


def compiled_model_flags(args, size, run):
    return ["--model", "compiled", "--model-options",
            f"file={run['packages'][run['config'][3]]}"]


def compile_module(folder, size, precision, device):
    """tools/compile_model.py's package of tools/gpt_model.py's GPT of `size` in `precision`."""
    path = os.path.join(folder, f"gpt-{precision}.pt2")
    made = subprocess.run([sys.executable, os.path.join(REPO, "tools", "compile_model.py"), path,
                           *gpt_tool_arguments(size), "--precision", precision,
                           "--device", device],
                          capture_output=True, text=True)
    if made.returncode != 0:
        sys.exit(f"tools/compile_model.py {path} failed:\n{made.stdout}{made.stderr}")
    print(made.stdout.splitlines()[0], file=sys.stderr)
    return path


# dpl's sides: side -> its model flags (args, size, prepared run). Every side runs the same
# launcher, data, optimizer and flags otherwise; a new way of running the network is one entry
# here (the tables take every side given with --sides).
# "baseline" is the gpt side run by an earlier build (--baseline LAUNCHER, its own plugins next
# to it): whether a change cost throughput, measured in the same way.
DPL_SIDES = {"gpt": gpt_model_flags, "ts": torchscript_model_flags, "aot": compiled_model_flags,
             "baseline": gpt_model_flags}


def dpl_command(args, side, size, run, steps):
    processes, threads, backend, precision, flags = run["config"]
    plugin_dirs = [flag for d in args.plugin_dir for flag in ("--plugin-dir", d)]
    if side == "baseline":
        launcher, plugin_dirs = args.baseline, []
    else:
        launcher = args.launcher
    return [launcher, *plugin_dirs, "--device", args.device, "--backend", backend,
            *DPL_SIDES[side](args, size, run),
            *flags, "--precision", precision, "--num-processes", str(processes),
            "--threads-per-worker", str(threads), "--batch-size", str(size["batch"]),
            "--max-steps", str(steps), "--data", "tokens", "--data-dir", run["data"],
            "--data-options", f"block={size['block']},vocab={size['vocab']}",
            "--data-cache", "none", "--optimizer", "adamw", "--lr", str(size["lr"]),
            "--weight-decay", str(WEIGHT_DECAY), "--betas", ",".join(map(str, size["betas"])),
            "--seed", "0", "--master-port", "0", "--no-progress", "--no-eval",
            "--log-interval", str(run["log_every"])]


def peer_command(args, side, size, run, steps):
    processes, _, backend, precision, _ = run["config"]
    if args.device == "cpu":
        backend, precision = "gloo", "fp32"  # the recipe's CPU program: gloo, float32
    return [sys.executable, os.path.join(HERE, "gpt_ddp.py"), *PEER_VARIANTS[side][0],
            "--data", run["data"],
            "--num-processes", str(processes), "--batch-size", str(size["batch"] // processes),
            "--backend", backend, "--device", args.device, "--precision", precision,
            "--max-batches", str(steps), "--log-every", str(run["log_every"]),
            "--port", str(free_port()), "--lr", str(size["lr"]),
            "--weight-decay", str(WEIGHT_DECAY), "--betas", *map(str, size["betas"]),
            *[arg for k in ("vocab", "block", "layers", "heads", "dim")
              for arg in (f"--{k}", str(size[k]))]]


def measure(cmd, env, worker_filter, first, tokens_per_step):
    """One run: steady tokens/s from the loss line at `first` to the last, start-up, peak RSS."""
    arrivals, wall, rss = timed_run(cmd, env, worker_filter, lambda steps: steps)
    late = [k for k in arrivals if k >= first]
    if len(late) < 2:
        sys.exit(f"fewer than two loss lines at or after step {first} (lines at steps "
                 f"{sorted(arrivals)}): raise --steps or lower --first\n{' '.join(cmd)}")
    a, b = min(late), max(late)
    rate = (b - a) * tokens_per_step / (arrivals[b] - arrivals[a])
    measurement = {"rate": rate, "startup": arrivals[a] - a * tokens_per_step / rate,
                   "wall": wall, "rss_mib": rss / 1024.0}
    phases = PHASES_LINE.search(timed_run.output)
    if phases:
        measurement.update({name: float(v) for name, v in zip(PHASES, phases.groups())})
    return measurement


def sides_of(args, config):
    """The sides that run a config: on the CPU the peer runs fp32 configs only."""
    precision = parse_config(config)[3]
    return [side for side in args.sides
            if side not in PEER_SIDES or args.device == "cuda" or precision == "fp32"]


def side_run(args, side, size, run, steps):
    """How `side` runs: (command, environment it adds, filter of its worker processes)."""
    if side in DPL_SIDES:
        return dpl_command(args, side, size, run, steps), {}, lambda c: b"--worker" in c
    tuned_malloc = PEER_VARIANTS[side][1]
    return (peer_command(args, side, size, run, steps), TUNED_MALLOC if tuned_malloc else {},
            lambda c: b"multiprocessing" in c)  # spawn children


def run_all(args, prepared):
    """runs[size][config][side] = one measurement per repeat. Each repeat runs the sides of a
    size and config back to back, rotating which goes first; the compiled peer runs from an empty
    compile cache, then at once again from the cache it filled (compiled_warm)."""
    runs = {s: {c: {side: [] for side in sides_of(args, c)} for c in args.configs}
            for s in args.sizes}
    base_env = {k: v for k, v in os.environ.items()
                if k not in TUNED_MALLOC and k != COMPILE_CACHE}
    for repeat in range(args.repeats):
        for name in args.sizes:
            size, steps, first = SIZES[name], args.steps[name], args.first[name]
            for config in args.configs:
                run = dict(prepared[name], config=parse_config(config))
                threads = str(run["config"][1])
                env = dict(base_env, OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
                sides = sides_of(args, config)
                rotated = [side for side in sides if side != "compiled_warm"]
                order = rotated[repeat % len(rotated):] + rotated[:repeat % len(rotated)]
                for side in order:
                    cache = tempfile.mkdtemp(prefix="bench-compile-cache-")
                    for one in [side] + (["compiled_warm"] if side == "compiled" and
                                         "compiled_warm" in sides else []):
                        cmd, side_env, worker = side_run(args, one, size, run, steps)
                        runs[name][config][one].append(measure(
                            cmd, dict(env, **side_env, **{COMPILE_CACHE: cache}), worker, first,
                            size["batch"] * size["block"]))
                    shutil.rmtree(cache, ignore_errors=True)
                print(f"repeat {repeat + 1}/{args.repeats} {name} {config}: " +
                      ", ".join(f"{side} {runs[name][config][side][-1]['rate']:.0f} tokens/s"
                                for side in sides), file=sys.stderr, flush=True)
    return runs


def fp32_of(config):
    return "-".join(t for t in config.split("-") if t not in ("bf16", "fp16"))


def peers_of(args, runs, name, config):
    """The peer's runs a config is compared with: on the CPU the fp32 ones of its shape."""
    return runs[name].get(config if args.device == "cuda" else fp32_of(config), {})


def report(args, runs, prepared):
    dpl_sides = [side for side in args.sides if side in DPL_SIDES]
    peer_sides = [side for side in args.sides if side in PEER_SIDES]
    print(f"torch {torch_version()}; {args.repeats} repeats, every side of a size and config back "
          "to back in each; tokens/s, start-up and RSS are medians, ratios the median of the "
          "repeats' own ratios (smallest-largest); on the CPU the peer runs fp32, and a bf16 "
          "row's peer is its shape's fp32 one")
    for name in args.sizes:
        size = SIZES[name]
        print(f"{name}: {size['layers']} layers, {size['heads']} heads, {size['dim']} dims, block "
              f"{size['block']}, vocabulary {size['vocab']}, global batch {size['batch']} "
              f"({size['batch'] * size['block']} tokens a step), steady rate from step "
              f"{args.first[name]} to {args.steps[name]}; data: {prepared[name]['source']}")
    ratios = [(d, p) for d in dpl_sides for p in peer_sides
              if p != "compiled_warm" and d != "baseline"]
    print("| size | config | " + " | ".join(f"{side} tokens/s" for side in args.sides) + " | " +
          " | ".join(f"{d}/{p}" for d, p in ratios) + " | " +
          " | ".join(f"{d} bf16/fp32" for d in dpl_sides) + " |")
    print("|" + "---|" * (2 + len(args.sides) + len(ratios) + len(dpl_sides)))
    for name in args.sizes:
        for config in args.configs:
            row, peers = runs[name][config], peers_of(args, runs, name, config)
            fp32 = runs[name].get(fp32_of(config), {}) if fp32_of(config) != config else {}
            cells = [median_cell(row.get(side, []) or peers.get(side, []), "rate", ".0f")
                     for side in args.sides]
            cells += [ratio_cell(row.get(d, []), peers.get(p, [])) for d, p in ratios]
            cells += [ratio_cell(row.get(d, []), fp32.get(d, [])) for d in dpl_sides]
            print(f"| {name} | {config} | " + " | ".join(cells) + " |")
    if args.baseline:
        print("| size | config | gpt/baseline |\n|---|---|---|")
        for name in args.sizes:
            for config in args.configs:
                row = runs[name][config]
                print(f"| {name} | {config} | "
                      f"{ratio_cell(row.get('gpt', []), row.get('baseline', []))} |")
    print("start-up to the first step, s (compiled: from an empty compile cache, the whole "
          "compile; compiled_warm: from the cache it filled), and peak RSS per worker, MiB:")
    print("| size | config | " + " | ".join(f"{side} start s" for side in args.sides) + " | " +
          " | ".join(f"{side} RSS" for side in args.sides) + " |")
    print("|" + "---|" * (2 + 2 * len(args.sides)))
    for name in args.sizes:
        for config in args.configs:
            row = runs[name][config]
            print(f"| {name} | {config} | " +
                  " | ".join(median_cell(row.get(side, []), "startup", ".2f")
                             for side in args.sides) + " | " +
                  " | ".join(median_cell(row.get(side, []), "rss_mib", ".0f")
                             for side in args.sides) + " |")
    print("dpl's time per step (ms, medians): | size | config | side | data | forward+backward | "
          "communication wait | optimizer |")
    for name in args.sizes:
        for config in args.configs:
            for side in dpl_sides:
                rows = runs[name][config].get(side, [])
                if rows and all(p in m for m in rows for p in PHASES):
                    print(f"| {name} | {config} | {side} | " +
                          " | ".join(median_cell(rows, p, ".1f") for p in PHASES) + " |")
    if args.device == "cuda":
        for name in args.sizes:
            for config in args.configs:
                row = runs[name][config]
                for d in dpl_sides:
                    for p in peer_sides:
                        print(f"tokens/s on one GPU ({name}, {config}): dpl {d} "
                              f"{median_cell(row[d], 'rate', '.0f')}, peer {p} (DDP, --device "
                              f"cuda) {median_cell(row[p], 'rate', '.0f')}, dpl/peer "
                              f"{ratio_cell(row[d], row[p])}")


def per_size(text, key, sizes, flag):
    """'N' (every size) or 'size=N,size=N' over SIZES' defaults of `key`."""
    values = {name: SIZES[name][key] for name in sizes}
    for item in (text.split(",") if text else []):
        name, _, value = item.rpartition("=")
        if name and name not in SIZES:
            sys.exit(f"{flag}: unknown size {name!r} in {text!r} (sizes: {', '.join(SIZES)})")
        try:
            number = int(value)
        except ValueError:
            sys.exit(f"{flag}: {value!r} in {text!r} is not a whole number")
        for target in ([name] if name else sizes):
            values[target] = number
    return values


def check_cuda():
    """Ends the run, saying why, when this Python's torch sees no GPU."""
    import torch
    if not torch.cuda.is_available():
        sys.exit(f"bench_lm.py --device cuda needs a GPU: torch {torch.__version__} of "
                 f"{sys.executable} sees none (torch.cuda.is_available() is False); run it on a "
                 "machine with a GPU and a torch built with CUDA, or leave out --device cuda")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", default=os.path.join(REPO, "build", "launcher", "launcher"),
                   help="dpl's launcher (it finds its plugins next to it)")
    p.add_argument("--baseline", help="an earlier dpl launcher, run as the side baseline (the gpt "
                                      "side's flags): dpl/baseline is whether a change cost "
                                      "throughput")
    p.add_argument("--plugin-dir", action="append", default=[],
                   help="a folder searched first for plugins (repeatable)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--sizes", help=f"comma list of {', '.join(SIZES)} (default "
                                    f"{CPU_DEFAULTS['sizes']}; with --device cuda "
                                    f"{CUDA_DEFAULTS['sizes']})")
    p.add_argument("--configs", help="comma list of <processes>x<threads>-<backend>[-bf16] "
                                     f"(default {CPU_DEFAULTS['configs']}; with --device cuda "
                                     f"{CUDA_DEFAULTS['configs']})")
    p.add_argument("--sides", help=f"comma list of dpl's {', '.join(DPL_SIDES)} and the peer's "
                                   f"{', '.join(PEER_SIDES)} (default {CPU_DEFAULTS['sides']}; "
                                   f"with --device cuda {CUDA_DEFAULTS['sides']})")
    p.add_argument("--steps", help="steps of every run: N, or size=N,.. (default " + ", ".join(
        f"{n} {s['steps']}" for n, s in SIZES.items()) + ")")
    p.add_argument("--first", help="steady rate from this step on: N or size=N,.. (default " +
                   ", ".join(f"{n} {s['first']}" for n, s in SIZES.items()) + ")")
    p.add_argument("--log-every", help="steps between loss lines: N or size=N,.. (default " +
                   ", ".join(f"{n} {s['log_every']}" for n, s in SIZES.items()) + ")")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--random-ids", action="store_true",
                   help="seeded random ids even where the fortunes texts are installed")
    p.add_argument("--json", help="also write every measurement to this file")
    args = p.parse_args()
    defaults = CUDA_DEFAULTS if args.device == "cuda" else CPU_DEFAULTS
    for key in ("sizes", "configs", "sides"):
        setattr(args, key, (getattr(args, key) or defaults[key]).split(","))
    for name in args.sizes:
        if name not in SIZES:
            p.error(f"--sizes: unknown size {name!r} (sizes: {', '.join(SIZES)})")
    for side in args.sides:
        if side not in DPL_SIDES and side not in PEER_SIDES:
            p.error(f"--sides: unknown side {side!r} (sides: "
                    f"{', '.join(list(DPL_SIDES) + list(PEER_SIDES))})")
    if ("baseline" in args.sides) != bool(args.baseline):
        p.error("--sides baseline and --baseline LAUNCHER go together")
    if "compiled_warm" in args.sides and "compiled" not in args.sides:
        p.error("--sides: compiled_warm runs from the cache compiled fills: name compiled too")
    for config in args.configs:
        processes = parse_config(config)[0]
        for name in args.sizes:
            if SIZES[name]["batch"] % processes:
                p.error(f"config {config}: the global batch of {name}, {SIZES[name]['batch']}, "
                        f"does not divide among {processes} processes")
    args.steps = per_size(args.steps, "steps", args.sizes, "--steps")
    args.first = per_size(args.first, "first", args.sizes, "--first")
    args.log_every = per_size(args.log_every, "log_every", args.sizes, "--log-every")
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    if not os.access(args.launcher, os.X_OK):
        p.error(f"no launcher at {args.launcher}: build dpl (tools/build.sh) or name it with "
                "--launcher")
    return args


def main():
    args = parse_args()
    if args.device == "cuda":
        check_cuda()
    scratch = tempfile.TemporaryDirectory(prefix="bench_lm-")
    prepared = {}
    for name in args.sizes:
        size, folder = SIZES[name], os.path.join(scratch.name, name)
        prepared[name] = dict(data=folder, log_every=args.log_every[name], source=write_tokens(
            folder, size, args.steps[name], not args.random_ids and args.device == "cpu"))
        if "ts" in args.sides:
            prepared[name]["module"] = os.path.join(folder, "gpt.pt")
            export_module(prepared[name]["module"], size)
        if "aot" in args.sides:
            precisions = sorted({parse_config(config)[3] for config in args.configs})
            prepared[name]["packages"] = {
                precision: compile_module(folder, size, precision, args.device)
                for precision in precisions}
    runs = run_all(args, prepared)
    report(args, runs, prepared)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "sizes": {n: SIZES[n] for n in args.sizes},
                       "runs": runs}, out, indent=1)


if __name__ == "__main__":
    main()
