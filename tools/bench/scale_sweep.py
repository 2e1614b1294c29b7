#!/usr/bin/env python3
"""How dpl and the PyTorch DDP peer scale with the model: MLPs of about 1M, 10M, 50M and 100M
parameters (tools/bench/sized_mlp.py: 784 inputs, three hidden layers of one width, 10 classes),
written once as TorchScript by tools/export_model.py and trained by both sides on Fashion-MNIST:
dpl with `--model torchscript --model-options file=...`, the peer with recipe_peer.py (the
recipe's own program with `torch.jit.load` for its ConvNet) on the torch of dpl's Python
environment (PyTorch 2), same data, Adadelta, global batch 128. The GPT at the same sizes is
bench_lm.py's (--sizes gpt-1m,shakespeare,gpt-50m,gpt-100m).

Configs are bench_vs_peer.py's (<processes>x<threads>-<backend>[-shard|-whole]); by default 1
process x 2 threads, 2 processes x 1 thread with the whole optimizer on each (-whole, dpl's
--shard-optimizer off) and 2 x 1 with dpl's --shard-optimizer (its default there), against which
the peer runs torch's ZeroRedundancyOptimizer (sharding at 1 process would change nothing) and,
beside it, DeepSpeed's ZeRO stage 1 (deepspeed_peer.py: the recipe's program written the
DeepSpeed way, on the CPU over gloo, training the MLP's Python class: DeepSpeed cannot hook a
TorchScript module). The peer's variants (--peers) are bench_vs_peer.py's: tuned
(glibc malloc thresholds raised, DDP's gradient_as_bucket_view), compiled (tuned, and
torch.compile on the MLP's Python class, sized_mlp.py's SizedMLP, from an empty compile cache)
and, with --untuned, the peer as users run it.

The measuring is bench_vs_peer.py's, imported from it: loss lines timestamped as they arrive, the
steady rate between the line at `first` and the last one, peak RSS per worker (VmHWM), dpl's
"time per step" line for the phases (data, forward+backward, communication wait, optimizer). Each
repeat runs every size and config, dpl and the peer back to back (rotating who goes first);
figures are medians over the repeats, ratios the median of the repeats' own ratios, printed with
the smallest and the largest.

Steps per run fall with the size, so that 3 repeats of the whole sweep take about a quarter of an
hour on a 2-core machine: 200 below 5M parameters, 60 below 30M, 30 above (the rate from step 20,
20 and 10). --steps and --first set them for every size; --sizes runs a subset.

    tools/bench/scale_sweep.py --peer convnet_ddp.py --repeats 3 \\
        --json sweep.json --plot sweep.png
    tools/bench/scale_sweep.py --from-json sweep.json --plot sweep.png

--ceiling also runs split_ceiling.py's two layouts of each size in every repeat (forward+backward
alone, one process of 2 threads against 2 of 1, no communication): the ceiling of dpl's
2x1 / 1x2, measured in the same minutes as dpl.

Prints a table per size; --json keeps every measurement (--from-json prints and draws it again);
--plot draws samples/s and dpl's optimizer ms per step against the parameters (matplotlib,
which dpl's Python environment has).
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the programs it runs are sys.executable's, the environment's

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import sized_mlp  # noqa: E402
import split_ceiling  # noqa: E402
from bench_vs_peer import (COMPILE_CACHE, PEER_SIDES, PHASES, TUNED_MALLOC,  # noqa: E402
                           measure_sides, paired_ratio, ratio_cell, side_commands, torch_version)

PEER_ZERO_FLAGS = ["--zero-redundancy-optimizer"]  # recipe_peer.py's, for -shard configs
# The Python class the MLPs are written from, which the compiled peer compiles.
MLP_CLASS = os.path.join(HERE, "sized_mlp.py") + ":SizedMLP"
# DeepSpeed's ZeRO stage 1 (deepspeed_peer.py) runs beside the peer of -shard configs.
DEEPSPEED = "deepspeed"
SHARD_TOKEN = "-shard"
WHOLE_TOKEN = "-whole"  # dpl's --shard-optimizer off; the peer as for no token


def default_steps(parameters):
    """(first step of the steady rate, steps of a run) for a model of `parameters`."""
    if parameters < 5e6:
        return 20, 200
    if parameters < 30e6:
        return 20, 60
    return 10, 30


def export_models(args, folder):
    """Writes one TorchScript MLP per --sizes entry into `folder` (or reuses the file of that
    width there) and returns what the sweep needs to know of each."""
    models = []
    for name in args.sizes.split(","):
        hidden = sized_mlp.hidden_width(sized_mlp.parse_size(name))
        parameters = sized_mlp.parameter_count(hidden)
        first, steps = default_steps(parameters)
        first, steps = args.first or first, args.steps or steps
        if steps < first + 20:  # the peer's loss lines fall after steps 1, 11, 21, ...
            sys.exit(f"{name}: --steps {steps} leaves the peer no two loss lines from step "
                     f"{first} on; run at least {first + 20} steps")
        models.append({"name": name, "hidden": hidden, "parameters": parameters,
                       "module": sized_mlp.written_module(hidden, folder), "first": first,
                       "steps": steps})
    return models


def measure_ceiling(args, model):
    """split_ceiling.py's two layouts of `model` at this sweep's batch: {'1x2': ms, '2x1': ms},
    forward+backward alone, the slowest process of each."""
    steps, warmup = (20, 10) if model["parameters"] < 30e6 else (6, 3)
    layout_args = argparse.Namespace(module=model["module"], input_shape="1,28,28", batch=128,
                                     steps=steps, warmup=warmup, classes=10, token_ids=0)
    return {f"{p}x{t}": split_ceiling.run_layout(layout_args, p, t) for p, t in ((1, 2), (2, 1))}


def deepspeed_run(args, config, model, tuned, port):
    """deepspeed_peer.py's run of `config`, in the tuned peer's environment (its threads and
    malloc thresholds), as side_commands gives a side: (make_cmd(steps), env, worker filter,
    steps of a loss line)."""
    _, env, worker_filter, steps_of_line = tuned
    processes = int(config.split("x")[0])
    make_cmd = lambda steps: [  # noqa: E731
        sys.executable, os.path.join(HERE, "deepspeed_peer.py"), "--data", args.data,
        "--num-processes", str(processes), "--batch-size", str(128 // processes),
        "--max-batches", str(steps), "--module-class", MLP_CLASS, "--kwargs",
        json.dumps({"hidden": model["hidden"]}), "--port", str(port)]
    return make_cmd, env, worker_filter, steps_of_line


def sweep(args, models, sides):
    """runs[size name][config][side] = one measurement per repeat; with --ceiling also
    ceilings[size name] = one measure_ceiling per repeat."""
    configs = args.configs.split(",")
    runs = {m["name"]: {c: {side: [] for side in sides} for c in configs} for m in models}
    ceilings = {m["name"]: [] for m in models}
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("DPL_BENCH_") and
                k not in TUNED_MALLOC and k != COMPILE_CACHE}
    ports = iter(range(29610, 29610 + 10000))
    started = time.perf_counter()
    for repeat in range(args.repeats):
        for model in models:
            side_args = argparse.Namespace(
                **vars(args), model="torchscript", module=model["module"], baseline=None,
                module_class=MLP_CLASS, module_kwargs=json.dumps({"hidden": model["hidden"]}))
            env = dict(base_env, DPL_BENCH_PEER=args.peer, DPL_BENCH_MODULE=model["module"])
            for config in configs:
                peer_flags = PEER_ZERO_FLAGS if SHARD_TOKEN in config else []
                commands = side_commands(side_args, config, env, next(ports), peer_flags)
                if SHARD_TOKEN in config:
                    commands[DEEPSPEED] = deepspeed_run(args, config, model, commands["tuned"],
                                                        next(ports))
                measured = measure_sides(commands, sides, repeat, model["first"], model["steps"])
                for side, measurement in measured.items():
                    runs[model["name"]][config][side].append(measurement)
                print(f"repeat {repeat + 1}/{args.repeats} {model['name']} {config}: " +
                      ", ".join(f"{side} {m['rate']:.0f}/s" for side, m in measured.items()),
                      file=sys.stderr, flush=True)
            if args.ceiling:
                ceilings[model["name"]].append(measure_ceiling(args, model))
                print(f"repeat {repeat + 1}/{args.repeats} {model['name']} forward+backward "
                      "alone: " + ", ".join(f"{k} {v:.1f} ms" for k, v in
                                            ceilings[model["name"]][-1].items()),
                      file=sys.stderr, flush=True)
        spent = time.perf_counter() - started
        print(f"repeat {repeat + 1}/{args.repeats} done after {spent:.0f} s; about "
              f"{spent / (repeat + 1) * (args.repeats - repeat - 1):.0f} s to go",
              file=sys.stderr, flush=True)
    return runs, ceilings


def median(measurements, key):
    """Median of `key` over the repeats that have it (dpl's phases only), else NaN."""
    values = [m[key] for m in measurements if key in m]
    return statistics.median(values) if values else float("nan")


def across_configs(by_config, key, config, other):
    """Median over repeats of dpl's `key` at `config` over the same repeat's at `other`."""
    return paired_ratio({"a": by_config[config]["dpl"], "b": by_config[other]["dpl"]}, key, "a",
                        "b")


def one_thread_config(config):
    """'2x1-gloo-shard' -> '1x2-gloo-shard': the same cores as one process."""
    shape, rest = config.split("-", 1)
    processes, threads = (int(v) for v in shape.split("x"))
    return f"1x{processes * threads}-{rest}"


def print_size(model, by_config, sides, ceiling):
    print(f"\n### {model['name']}: {model['parameters']:,} parameters "
          f"(784-{model['hidden']}-{model['hidden']}-{model['hidden']}-10), steady rate from "
          f"step {model['first']} to {model['steps']}")
    peers = [side for side in ("tuned", "compiled", DEEPSPEED, "peer") if side in sides]
    names = {"tuned": "tuned peer", "compiled": "compiled peer", DEEPSPEED: "DeepSpeed ZeRO-1",
             "peer": "untuned peer"}
    print("| config | dpl samples/s | " + " | ".join(f"{names[p]} samples/s" for p in peers) +
          " | " + " | ".join(f"dpl/{names[p]}" for p in peers) + " | dpl RSS MiB | peer RSS MiB |"
          " data ms | forward+backward ms | communication wait ms | optimizer ms |")
    print("|---" * (8 + 2 * len(peers)) + "|")
    for config, runs in by_config.items():
        # The peer of a -shard config runs torch's ZeroRedundancyOptimizer.
        zero = "ZeRO " if SHARD_TOKEN in config else ""
        row = [config, f"{median(runs['dpl'], 'rate'):.0f}"]
        row += [(zero if p != DEEPSPEED else "") + f"{median(runs.get(p, []), 'rate'):.0f}"
                for p in peers]
        row += [ratio_cell(runs["dpl"], runs.get(p, [])) for p in peers]
        row += [f"{median(runs['dpl'], 'rss_mib'):.0f}", f"{median(runs['tuned'], 'rss_mib'):.0f}"]
        row += [f"{median(runs['dpl'], phase):.1f}" for phase in PHASES]
        print("| " + " | ".join(row) + " |")
    for config in by_config:
        single = one_thread_config(config.replace(SHARD_TOKEN, "").replace(WHOLE_TOKEN, ""))
        if single != config and single in by_config:
            print(f"dpl {config} / dpl {single} = "
                  f"{across_configs(by_config, 'rate', config, single):.2f} (samples/s)")
        # Sweeps saved before sharding was dpl's default named the whole optimizer's config
        # without a token.
        unsharded = next((c for c in (config.replace(SHARD_TOKEN, WHOLE_TOKEN),
                                      config.replace(SHARD_TOKEN, ""))
                          if c != config and c in by_config), None)
        if unsharded:
            print(f"dpl optimizer ms {config} / {unsharded} = "
                  f"{across_configs(by_config, 'optimizer', config, unsharded):.2f}")
    if ceiling:
        joint, split = ([c[k] for c in ceiling] for k in ("1x2", "2x1"))
        print(f"ceiling of 2x1 / 1x2 (split_ceiling.py, forward+backward alone): "
              f"{statistics.median(j / s for j, s in zip(joint, split)):.2f} (1x2 "
              f"{statistics.median(joint):.1f} ms, 2x1 {statistics.median(split):.1f} ms), best "
              f"against best {min(joint) / min(split):.2f}")


def plot(path, models, runs):
    import matplotlib
    matplotlib.use("Agg")  # files only; no display needed
    import matplotlib.pyplot as plt

    models = sorted(models, key=lambda m: m["parameters"])
    configs = list(runs[models[0]["name"]])
    figure, (rates, optimizer) = plt.subplots(1, 2, figsize=(13, 5))
    for index, config in enumerate(configs):
        colour = f"C{index}"
        x = [m["parameters"] for m in models]
        for side, style, label in (("dpl", "-o", "dpl"), ("tuned", "--s", "peer")):
            if SHARD_TOKEN in config and side == "tuned":
                label = "peer ZeRO"
            rates.plot(x, [median(runs[m["name"]][config][side], "rate") for m in models],
                       style, color=colour, label=f"{label} {config}")
        optimizer.plot(x, [median(runs[m["name"]][config]["dpl"], "optimizer") for m in models],
                       "-o", color=colour, label=f"dpl {config}")
    for axes, title, unit in ((rates, "samples/s (global batch 128)", "samples/s"),
                              (optimizer, "dpl's optimizer time per step", "ms per step")):
        axes.set_xscale("log")
        axes.set_yscale("log")
        axes.set_xlabel("parameters")
        axes.set_ylabel(unit)
        axes.set_title(title)
        axes.grid(True, which="both", alpha=0.3)
        axes.legend(fontsize="small")
    figure.suptitle("TorchScript MLPs, Fashion-MNIST, Adadelta: dpl against the PyTorch DDP peer")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    print(f"wrote {path}", file=sys.stderr)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", default=os.path.join(REPO, "build", "launcher", "launcher"))
    p.add_argument("--peer", default=os.environ.get("DPL_PEER_PROGRAM"),
                   help="the recipe's PyTorch DDP program, convnet_ddp.py (default: "
                        "$DPL_PEER_PROGRAM)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--sizes", default="1M,10M,50M,100M",
                   help="comma list of parameter counts (1M, 500K, 2.5M, 2000000)")
    p.add_argument("--configs", default="1x2-gloo,2x1-gloo-whole,2x1-gloo-shard",
                   help="bench_vs_peer.py's configs; the peer of a -shard config runs "
                        "ZeroRedundancyOptimizer, dpl's of a -whole one --shard-optimizer off")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps", type=int, help="steps of every run (default: by size)")
    p.add_argument("--first", type=int, help="steady rate from this step on (default: by size)")
    p.add_argument("--peers", default=f"tuned,compiled,{DEEPSPEED}",
                   help="comma list of the peer's variants beside dpl: tuned, compiled (tuned "
                        f"and torch.compile on the MLP's Python class), {DEEPSPEED} (DeepSpeed's "
                        "ZeRO stage 1, -shard configs only; tools/setup.sh --bench installs it), "
                        "peer (as users run it); tuned always runs")
    p.add_argument("--untuned", action="store_true", help="also run the peer as users run it")
    p.add_argument("--ceiling", action="store_true",
                   help="also measure each size's ceiling of 2x1 / 1x2 in every repeat: "
                        "forward+backward alone, no communication (split_ceiling.py)")
    p.add_argument("--modules-dir", help="where the TorchScript MLPs are written, and reused "
                                         "from (default: a temporary folder)")
    p.add_argument("--json", help="also write every measurement to this file")
    p.add_argument("--plot", help="draw the sweep into this PNG file")
    p.add_argument("--from-json", help="print and --plot a --json file of an earlier sweep "
                                       "instead of measuring")
    return p, p.parse_args()


def main():
    p, args = parse_args()
    if args.from_json:
        with open(args.from_json) as saved:
            sweep_result = json.load(saved)
    else:
        if not args.peer or not os.path.isfile(args.peer):
            p.error("name the recipe's PyTorch DDP program (convnet_ddp.py, docs/recipe.md) "
                    "with --peer FILE or DPL_PEER_PROGRAM=FILE")
        for name in args.sizes.split(","):
            try:
                sized_mlp.parse_size(name)
            except ValueError as error:
                p.error(f"--sizes: {error}")
        scratch = tempfile.TemporaryDirectory(prefix="scale_sweep-")
        folder = args.modules_dir or scratch.name
        os.makedirs(folder, exist_ok=True)
        models = export_models(args, folder)
        peers = args.peers.split(",") + (["peer"] if args.untuned else [])
        for peer in peers:
            if peer not in ("tuned", "compiled", DEEPSPEED, "peer"):
                p.error(f"--peers: unknown variant {peer!r} (tuned, compiled, {DEEPSPEED}, peer)")
        if DEEPSPEED in peers and importlib.util.find_spec("deepspeed") is None:
            p.error("--peers deepspeed needs DeepSpeed in dpl's Python environment: run "
                    "tools/setup.sh --bench, or leave it out of --peers")
        sides = tuple(["dpl", "tuned"] + [peer for peer in peers if peer != "tuned"])
        runs, ceilings = sweep(args, models, sides)
        sweep_result = {"args": vars(args), "sides": sides, "models": models, "runs": runs,
                        "ceilings": ceilings, "torch": torch_version()}
        if args.json:
            with open(args.json, "w") as out:
                json.dump(sweep_result, out, indent=1)
    print(f"TorchScript MLPs on both sides (the compiled peer: their Python class); torch "
          f"{sweep_result.get('torch', torch_version())}; {sweep_result['args']['repeats']} "
          "repeats, dpl and the peer's variants interleaved in each; global batch 128; figures are "
          "medians, ratios the median of the repeats' own ratios (smallest-largest); peer RSS = "
          "the tuned peer's")
    for model in sweep_result["models"]:
        print_size(model, sweep_result["runs"][model["name"]], sweep_result["sides"],
                   sweep_result.get("ceilings", {}).get(model["name"]))
    if args.plot:
        plot(args.plot, sweep_result["models"], sweep_result["runs"])


if __name__ == "__main__":
    main()
