#!/usr/bin/env python3
"""Side-by-side benchmark of dpl against the PyTorch DDP recipe's program (docs/recipe.md), named
with --peer or DPL_PEER_PROGRAM: the recipe's convnet_ddp.py, which this repository does not hold.
The peer runs on the torch of dpl's Python environment (tools/requirements.txt: PyTorch 2).

Both run the same model, data, optimizer and global batch (128) on the same machine, back to
back. This machine's speed drifts by tens of percent over minutes (a shared VM), so each repeat runs
every configuration of dpl and every variant of the peer back to back (rotating which goes first),
and a ratio is the median of the repeats' own ratios (with the smallest and largest), not a ratio
of medians taken minutes apart.

Method (identical for dpl and the peer, so no implementation has to time itself):
  * each configuration runs once per repeat for --steps training steps; both programs print a
    loss line every 10 steps, and this script timestamps each line as it arrives;
  * steady samples/s = (steps between the line at --first and the last line) * 128 / (time
    between them) -- one run, so start-up noise does not enter the rate (subtracting the walls of
    a short and a long run did: the peer's start-up varies by seconds);
  * start-up to the first step = arrival of the --first line - first * 128 / steady;
  * peak RSS per worker = the largest VmHWM of any worker process (polled every 50 ms over the
    process tree; the launcher/spawn parent is excluded).
The peer's variants (recipe_peer.py makes them in the peer's own program):
  peer           as users run it;
  tuned          what a PyTorch 2 user sets for DDP on the CPU: glibc's malloc thresholds raised
                 (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_: no page faults on every step)
                 and DDP's gradient_as_bucket_view=True (no gradient copy a step);
  compiled       tuned, and torch.compile on the model before DDP wraps it (nanoGPT's
                 compile=True), from an empty compile cache (TORCHINDUCTOR_CACHE_DIR): its
                 start-up holds the whole compile;
  compiled_warm  the same again at once, from the cache compiled filled: the compile of a second
                 run of the same model.
With --baseline LAUNCHER, an earlier dpl build runs in every repeat too (its own plugins next to
it), and the table adds dpl/baseline: whether a change cost throughput, measured in the same way.
With --model torchscript both sides train one TorchScript module (--module FILE, by default the
recipe's ConvNet written by tools/export_model.py): dpl with `--model torchscript`, the peer
through recipe_peer.py, its own program with `torch.jit.load(FILE)` for `ConvNet()`; the
compiled peer compiles the Python class the file was written from (--module-class).
"""
import argparse
import importlib.metadata
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the programs it runs are sys.executable's, the environment's

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
GLOBAL_BATCH = 128
TUNED_MALLOC = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str(1 << 31)}


def descendants(root_pid):
    """Pids of every process below root_pid (not root itself)."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(entry))
        except OSError:
            continue
    out, todo = [], [root_pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def peak_rss_kib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


# The loss lines both print every 10 steps: dpl "epoch: 0 [20/234] ..." after 20 steps, the peer
# "epoch: 0 [20/235] ..." after batch index 20, i.e. 21 steps.
LOSS_LINE = re.compile(rb"epoch: \d+ \[(\d+)/\d+\] training loss")


def timed_run(cmd, env, worker_name_filter, steps_of_line):
    """Runs cmd. Returns (arrival seconds of each loss line by steps done, wall seconds, peak RSS
    KiB of the largest worker). Lines are timestamped here as they arrive: no program times
    itself."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    timed_run.output = b""
    arrivals, output = {}, []

    def read_lines():
        for line in proc.stdout:
            output.append(line)
            match = LOSS_LINE.search(line)
            if match:
                arrivals[steps_of_line(int(match.group(1)))] = time.perf_counter() - start

    reader = threading.Thread(target=read_lines)
    reader.start()
    # The workers are found by a walk of /proc (about 1 ms of a core) twice a second; their peak
    # RSS, a high-water mark, is read every 50 ms. Walking /proc every 20 ms took about 5 % of
    # one of the cores the measured program runs on.
    peaks, workers, next_walk = {}, set(), 0.0
    while proc.poll() is None:
        if time.perf_counter() >= next_walk:
            for pid in set(descendants(proc.pid)) - workers:
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        cmdline = f.read()
                except OSError:
                    continue
                if worker_name_filter(cmdline):
                    workers.add(pid)
            next_walk = time.perf_counter() + 0.5
        for pid in workers:
            peaks[pid] = max(peaks.get(pid, 0), peak_rss_kib(pid))
        time.sleep(0.05)
    wall = time.perf_counter() - start
    reader.join()
    timed_run.output = b"".join(output)
    if proc.returncode != 0:
        text = timed_run.output.decode(errors="replace")
        sys.exit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{text[-3000:]}")
    return arrivals, wall, max(peaks.values(), default=0)


# dpl's rank 0 says where a step's time went: "time per step: data 0.3 ms, forward+backward
# 36.1 ms, communication wait 0.1 ms, optimizer 12.0 ms" (means over the run).
PHASES_LINE = re.compile(rb"time per step: data ([0-9.]+) ms, forward\+backward ([0-9.]+) ms, "
                         rb"communication wait ([0-9.]+) ms, optimizer ([0-9.]+) ms")
PHASES = ("data", "compute", "wait", "optimizer")


def model_flags(args):
    if args.model == "torchscript":
        return ["--model", "torchscript", "--model-options", f"file={args.module}"]
    return ["--model", "convnet"]


# Tokens of a config after its backend, besides the precision: dpl's own flags (the peer runs
# as it always does). Without -shard or -whole dpl shards as its default does (on one machine of
# several CPU workers); -shard is the bare flag, which earlier launchers (--baseline) read too.
DPL_CONFIG_FLAGS = {"shard": ["--shard-optimizer"], "whole": ["--shard-optimizer", "off"],
                    "viabackend": ["--local-reduce", "backend"]}


def parse_config(config):
    """'2x1-gloo[-bf16][-shard|-whole][-viabackend]' -> processes, threads, backend, precision,
    flags."""
    shape, backend, *rest = config.split("-")
    precision = next((t for t in rest if t in ("fp32", "bf16", "fp16")), "fp32")
    flags = []
    for token in rest:
        if token in DPL_CONFIG_FLAGS:
            flags += DPL_CONFIG_FLAGS[token]
        elif token != precision:
            sys.exit(f"unknown token {token!r} in config {config!r}")
    processes, threads = (int(v) for v in shape.split("x"))
    return processes, threads, backend, precision, flags


def dpl_command(launcher, args, processes, threads, backend, precision, steps, flags=()):
    # fp32 is left to the default, so a --baseline launcher from before --precision runs too.
    return [launcher, "--backend", backend, *model_flags(args), *flags] + \
        (["--precision", precision] if precision != "fp32" else []) + [
            "--num-processes", str(processes), "--threads-per-worker", str(threads),
            "--batch-size", str(GLOBAL_BATCH), "--max-steps", str(steps), "--data-dir", args.data,
            "--master-port", "0", "--no-progress", "--no-eval", "--log-interval", "10"]


# The peer's variants, each a side: recipe_peer.py's flags, and whether glibc's malloc thresholds
# are raised. "peer" is the recipe's program as users run it; "tuned" what a PyTorch 2 user sets
# for DDP on the CPU (malloc thresholds, DDP's gradient_as_bucket_view); "compiled" that and
# torch.compile on the model (nanoGPT's compile=True), run twice in a row, from an empty compile
# cache ("compiled") and from the cache that run filled ("compiled_warm").
PEER_VARIANTS = {"peer": ([], False), "tuned": (["--tuned"], True),
                 "compiled": (["--tuned", "--compile"], True),
                 "compiled_warm": (["--tuned", "--compile"], True)}
PEER_SIDES = tuple(PEER_VARIANTS)
COMPILE_CACHE = "TORCHINDUCTOR_CACHE_DIR"


def peer_command(args, processes, steps, port, variant, flags=()):
    """The peer's command for `variant`: the recipe's program itself as users run it, else
    through recipe_peer.py (which finds it in DPL_BENCH_PEER); a TorchScript model, DPL_BENCH_MODULE,
    is in the environment."""
    variant_flags, _ = PEER_VARIANTS[variant]
    program = [args.peer]
    if variant_flags or flags or args.model == "torchscript":
        program = [os.path.join(HERE, "recipe_peer.py"), *variant_flags, *flags]
        if "--compile" in variant_flags and args.model == "torchscript":
            program += ["--module-class", args.module_class]  # torch.compile needs Python
            if getattr(args, "module_kwargs", None):
                program += ["--kwargs", args.module_kwargs]
    return [sys.executable, *program, "--data", args.data, "--num-processes", str(processes),
            "--batch-size", str(GLOBAL_BATCH // processes), "--backend", "gloo",
            "--max-batches", str(steps), "--port", str(port)]


def peer_environment(env, variant):
    env = dict(env)
    if PEER_VARIANTS[variant][1]:
        env.update(TUNED_MALLOC)
    if "--compile" in PEER_VARIANTS[variant][0]:
        env.pop("DPL_BENCH_MODULE", None)  # the Python class of --module-class instead
    return env


def side_commands(args, config, env, port, peer_flags=()):
    """How each side runs `config`: side -> (make_cmd(steps), env, worker filter, steps of a loss
    line). "baseline" is left out for a precision an earlier launcher may not know; the peer has
    no tcp backend, so its row for a dpl tcp config is gloo. peer_flags go to recipe_peer.py."""
    processes, threads, backend, precision, flags = parse_config(config)
    env = dict(env, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
               DPL_BENCH_PEER=args.peer)
    dpl_filter = lambda c: b"--worker" in c
    peer_filter = lambda c: b"multiprocessing" in c  # spawn children
    dpl_steps = lambda printed: printed
    peer_steps = lambda printed: printed + 1  # printed after batch index `printed`
    commands = {
        "dpl": (lambda k: dpl_command(args.launcher, args, processes, threads, backend,
                                      precision, k, flags), env, dpl_filter, dpl_steps),
    }
    for variant in PEER_VARIANTS:
        commands[variant] = (lambda k, v=variant: peer_command(args, processes, k, port, v,
                                                               peer_flags),
                             peer_environment(env, variant), peer_filter, peer_steps)
    if args.baseline and precision == "fp32":
        commands["baseline"] = (lambda k: dpl_command(args.baseline, args, processes, threads,
                                                      backend, precision, k, flags),
                                env, dpl_filter, dpl_steps)
    return commands


def measure_sides(commands, sides, repeat, first, steps):
    """One measurement of each of `sides` that `commands` has, back to back, rotating by `repeat`
    which goes first, so no side always runs on the warmest machine: side -> measurement. The
    compiled peer runs from an empty compile cache, then at once again from the cache it filled
    (compiled_warm)."""
    rotated = [side for side in sides if side != "compiled_warm"]
    order = rotated[repeat % len(rotated):] + rotated[:repeat % len(rotated)]
    measured = {}
    for side in order:
        if side not in commands:
            continue
        cache = tempfile.mkdtemp(prefix="bench-compile-cache-")
        runs = [side] + (["compiled_warm"] if side == "compiled" and "compiled_warm" in sides
                         else [])
        for run in runs:
            make_cmd, side_env, worker_filter, steps_of_line = commands[run]
            measured[run] = one_measurement(make_cmd, dict(side_env, **{COMPILE_CACHE: cache}),
                                            worker_filter, steps_of_line, first, steps)
        shutil.rmtree(cache, ignore_errors=True)
    return measured


def paired_ratio(by_side, key, side, other):
    """Median over repeats of `side`'s figure divided by `other`'s in the same repeat."""
    return statistics.median(a[key] / b[key] for a, b in zip(by_side[side], by_side[other]))


def ratio_cell(a, b, key="rate"):
    """'1.23x (1.10-1.35)': the median over the repeats of a's figure over b's in the same
    repeat, the smallest and largest of those ratios in brackets; '-' where a side did not run."""
    ratios = [x[key] / y[key] for x, y in zip(a, b) if key in x and key in y]
    if not ratios:
        return "-"
    return f"{statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})"


def median_cell(runs, key, form):
    values = [m[key] for m in runs if key in m]
    return format(statistics.median(values), form) if values else "-"


def one_measurement(make_cmd, env, worker_filter, steps_of_line, first, steps):
    """Steady rate between the loss lines at `first` and at the last step; start-up = when
    training would have started at that rate (the time to the first step); peak RSS."""
    arrivals, wall, rss = timed_run(make_cmd(steps), env, worker_filter, steps_of_line)
    a = min((k for k in arrivals if k >= first), default=None)
    b = max(arrivals, default=None)
    if a is None or b <= a:
        sys.exit(f"{' '.join(make_cmd(steps))}: no loss lines after step {first} to measure "
                 f"between (lines after steps {sorted(arrivals)}); run at least {first + 20} steps")
    rate = (b - a) * GLOBAL_BATCH / (arrivals[b] - arrivals[a])
    measurement = {"rate": rate, "startup": arrivals[a] - a * GLOBAL_BATCH / rate, "wall": wall,
                   "rss_mib": rss / 1024.0}
    phases = PHASES_LINE.search(timed_run.output)
    if phases:
        measurement.update({name: float(v) for name, v in zip(PHASES, phases.groups())})
    return measurement


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", default=os.path.join(REPO, "build", "launcher", "launcher"))
    p.add_argument("--peer", default=os.environ.get("DPL_PEER_PROGRAM"),
                   help="the recipe's PyTorch DDP program, convnet_ddp.py (default: "
                        "$DPL_PEER_PROGRAM)")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--first", type=int, default=20, help="steady rate from this step on (warm-up before)")
    p.add_argument("--steps", type=int, default=200, help="steps of every run")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--configs", default="1x2-gloo,2x1-gloo,2x1-tcp",
                   help="comma list of <processes>x<threads>-<backend>[-<precision>][-shard|"
                        "-whole][-viabackend]; the precision (fp32 by default, bf16) and the rest "
                        "are dpl's (--shard-optimizer on or off, --local-reduce backend; without "
                        "either dpl's default, sharded on one machine of several workers): the "
                        "peer always runs fp32 DDP")
    p.add_argument("--json", help="also write every measurement to this file")
    p.add_argument("--baseline", help="an earlier dpl launcher to compare with, run alike")
    p.add_argument("--sides", default="dpl," + ",".join(PEER_SIDES),
                   help="comma list of dpl and the peer's variants: peer (as users run it), "
                        "tuned, compiled (from an empty compile cache), compiled_warm (again, "
                        "from the cache compiled filled); default all")
    p.add_argument("--model", choices=("convnet", "torchscript"), default="convnet",
                   help="convnet: dpl's C++ ConvNet against the peer's Python one; torchscript: "
                        "one TorchScript module on both sides (default convnet)")
    p.add_argument("--module", help="the TorchScript file of --model torchscript (default: the "
                                    "recipe's ConvNet, written by tools/export_model.py)")
    p.add_argument("--module-class", help="PATH:CLASS the --module was written from, which the "
                                          "compiled peer compiles (default: the recipe's ConvNet, "
                                          "tools/recipe_convnet.py:ConvNet, without --module)")
    args = p.parse_args()
    if not args.peer:
        p.error("name the recipe's PyTorch DDP program (convnet_ddp.py, docs/recipe.md) with "
                "--peer FILE or DPL_PEER_PROGRAM=FILE")
    if not os.path.isfile(args.peer):
        p.error(f"no peer program {args.peer}; name it with --peer")
    args.peer = os.path.abspath(args.peer)
    sides = args.sides.split(",")
    for side in sides:
        if side not in ("dpl",) + PEER_SIDES:
            p.error(f"--sides: unknown side {side!r} (dpl, {', '.join(PEER_SIDES)})")
    if "compiled_warm" in sides and "compiled" not in sides:
        p.error("--sides: compiled_warm runs from the cache compiled fills: name compiled too")
    scratch = tempfile.TemporaryDirectory(prefix="bench_vs_peer-")
    if args.model == "torchscript" and not args.module:
        args.module = os.path.join(scratch.name, "convnet.pt")
        args.module_class = args.module_class or os.path.join(REPO, "tools",
                                                              "recipe_convnet.py") + ":ConvNet"
        exported = subprocess.run([sys.executable, os.path.join(REPO, "tools", "export_model.py"),
                                   args.module], capture_output=True, text=True)
        if exported.returncode != 0:
            sys.exit(f"tools/export_model.py {args.module} failed:\n{exported.stderr}")
    elif args.module and args.model != "torchscript":
        p.error("--module needs --model torchscript")
    if args.model == "torchscript" and "compiled" in sides and not args.module_class:
        p.error("the compiled peer compiles Python: name the class --module was written from "
                "with --module-class PATH:CLASS, or leave compiled out of --sides")

    base_env = dict(os.environ)
    if args.model == "torchscript":
        base_env.update(DPL_BENCH_MODULE=os.path.abspath(args.module))
    for name in list(TUNED_MALLOC) + [COMPILE_CACHE]:
        base_env.pop(name, None)
    ports = iter(range(29610, 29610 + 10000))
    configs = args.configs.split(",")
    sides += ["baseline"] if args.baseline else []
    # runs[config][side] = one measurement per repeat
    runs = {config: {side: [] for side in sides} for config in configs}
    for repeat in range(args.repeats):
        for config in configs:
            commands = side_commands(args, config, base_env, next(ports))
            for side, measurement in measure_sides(commands, sides, repeat, args.first,
                                                   args.steps).items():
                runs[config][side].append(measurement)
            print(f"repeat {repeat + 1}/{args.repeats} {config}: " +
                  ", ".join(f"{side} {runs[config][side][-1]['rate']:.0f}/s" for side in sides
                            if runs[config][side]),
                  file=sys.stderr, flush=True)
    report(args, configs, sides, runs)
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"args": vars(args), "runs": runs}, out, indent=1)


def report(args, configs, sides, runs):
    def median(config, side, key):
        return statistics.median(m[key] for m in runs[config][side])

    model = (f"TorchScript module {args.module} on both sides" if args.model == "torchscript"
             else "dpl's C++ ConvNet against the peer's Python ConvNet")
    peers = [side for side in PEER_SIDES if side in sides]
    print(f"{model}; torch {torch_version()}; {args.repeats} repeats, dpl and the peer's variants "
          f"interleaved in each; steady rate from step {args.first} to {args.steps}; global batch "
          f"{GLOBAL_BATCH}; figures are medians, ratios the median of the repeats' own ratios "
          "(smallest-largest)")
    print("| config | dpl samples/s | " + " | ".join(peers) + " | " +
          " | ".join(f"dpl/{peer}" for peer in peers) + " |")
    print("|---" * (2 + 2 * len(peers)) + "|")
    for config in configs:
        row = runs[config]
        print(f"| {config} | {median_cell(row['dpl'], 'rate', '.0f')} | " +
              " | ".join(median_cell(row[peer], "rate", ".0f") for peer in peers) + " | " +
              " | ".join(ratio_cell(row["dpl"], row[peer]) for peer in peers) + " |")
    print("start-up to the first step, s (compiled: from an empty compile cache; compiled_warm: "
          "from the one it filled), and peak RSS per worker, MiB:")
    print("| config | " + " | ".join(f"{side} start s" for side in ["dpl"] + peers) + " | " +
          " | ".join(f"{side} RSS" for side in ["dpl"] + peers) + " |")
    print("|---" * (1 + 2 * (1 + len(peers))) + "|")
    for config in configs:
        row = runs[config]
        print(f"| {config} | " + " | ".join(median_cell(row[side], "startup", ".2f")
                                            for side in ["dpl"] + peers) + " | " +
              " | ".join(median_cell(row[side], "rss_mib", ".0f") for side in ["dpl"] + peers) +
              " |")
    if args.baseline:
        print("| config | dpl samples/s | baseline samples/s | dpl/baseline |")
        print("|---|---|---|---|")
        for config in (c for c in configs if runs[c]["baseline"]):
            print(f"| {config} | {median(config, 'dpl', 'rate'):.0f} | "
                  f"{median(config, 'baseline', 'rate'):.0f} | "
                  f"{ratio_cell(runs[config]['dpl'], runs[config]['baseline'])} |")
    for config in configs:  # a low-precision config against the same config in fp32
        shape_backend, _, precision = config.rpartition("-")
        if precision in ("bf16", "fp16") and shape_backend in runs:
            print(f"dpl {config} / dpl {shape_backend} = "
                  f"{ratio_cell(runs[config]['dpl'], runs[shape_backend]['dpl'])}")
    print("dpl's time per step (ms, medians): | config | data | forward+backward | "
          "communication wait | optimizer |")
    for config in configs:
        if all(name in m for m in runs[config]["dpl"] for name in PHASES):
            print(f"| {config} | " + " | ".join(f"{median(config, 'dpl', name):.1f}"
                                                 for name in PHASES) + " |")
    for config in configs:  # more processes against 1x2 of the same backend: what stays hidden
        one = "1x2-" + config.split("-", 1)[1].split("-")[0]
        if config.startswith("1x") or one not in runs:
            continue
        print(f"dpl {config} / dpl {one} = {ratio_cell(runs[config]['dpl'], runs[one]['dpl'])}")


def torch_version():
    """The version of the torch the peers run on (this interpreter's), without importing it."""
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return "(none)"


if __name__ == "__main__":
    main()
