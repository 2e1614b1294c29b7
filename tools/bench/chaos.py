#!/usr/bin/python3
"""The chaos benchmark: what lost machines cost a training job, dpl against torchrun and torchft.

A job of 3 machines on loopback (3 launchers, each in a process group of its own, one worker
each, or --workers each for dpl and torchrun) trains the recipe's ConvNet (global batch 96, so
2 or 3 machines split it evenly) on synthetic MNIST-shaped IDX files for --duration seconds,
while a machine is stopped every --kill-every seconds: its whole process group SIGKILLed, a new
machine started at once to take its place, except after the last kill (the job ends on 2).
Kills spare the machine of the built-in store (it is the job's store; torchrun's c10d rendezvous
host likewise); with etcd any machine goes. Cases (--cases):

  baseline       dpl, no failures, checkpoints every --checkpoint-every steps
  no-checkpoint  dpl, no failures, no checkpoints: "throughput with checkpoints against without"
  kill           dpl, SIGKILL every --kill-every s
  sigstop        dpl, SIGSTOP instead (a hung machine, not closed sockets); once the job runs
                 on without it, it is SIGKILLed and replaced
  etcd           dpl with --store etcd:// (one etcd member this script runs), any machine killed
  etcd-baseline  the same without failures: the etcd case's goodput is against it
  torchrun-baseline, torchrun-kill
                 tools/bench/chaos_ddp.py's DDP program of the same model under the pinned
                 torch's `torch.distributed.run --nnodes 2:3 --max-restarts` (c10d rendezvous),
                 checkpoints every --checkpoint-every steps and resuming from the newest
  torchft-baseline, torchft-kill
                 chaos_ddp.py on torchft (a replica group a machine, torchft's lighthouse)

Every figure comes from the programs' own lines, timestamped by them (dpl's launcher stamps every
line it relays, --log-time iso; the peers print unix times): dpl's rank 0 logs every step
(--log-interval 1); an attempt's first step follows its "resumed from ... (step N)" line (a
restart), its "continuing from step N" line (a shrink in place: the state of a live worker), or
step 0.
  committed        the newest step done when the --duration window closes
  goodput          committed / committed of the same program's baseline over the same window
  kill to step     from a kill to the first step after the job's pause (a gap between two step
                   lines of more than max(1 s, 5 x the baseline's median step)): what the
                   survivors lost, detection, decision and restart included
  recomputed       step lines, after the kill and before the next, of steps done before it
                   (torchft: steps whose commit failed)

Smoke (a minute or two): tools/bench/chaos.py --duration 30 --kill-every 12 --cases baseline,kill
The final runs (a quiet machine): tools/bench/chaos.py --duration 360 --kill-every 60
Results: a table on stdout, everything as JSON with --json FILE. Needs the build (tools/build.sh)
and, for the peers, the pinned torch's Python (tools/python) with torchft (tools/setup.sh --bench).
"""
import argparse
import datetime
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
MACHINES = 3
GLOBAL_BATCH = 96
SAMPLES = 20000
ALL_CASES = ("baseline", "no-checkpoint", "kill", "sigstop", "etcd-baseline", "etcd",
             "torchrun-baseline", "torchrun-kill", "torchft-baseline", "torchft-kill")

DPL_LINE = re.compile(r"^(\S+) \[rank 0\] (.*)$")
PEER_STEP = re.compile(r"(\d+\.\d+) \[rank 0\] step (\d+)( not committed)?")
RESUMED = re.compile(r"^resumed from .* \(step (\d+)\)$")
CONTINUING = re.compile(r"^continuing from step (\d+) ")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_idx(folder):
    """SAMPLES random 28x28 images and labels (and a small test split) in MNIST's IDX files."""
    os.makedirs(folder, exist_ok=True)
    rng = random.Random(0)
    for prefix, count in (("train", SAMPLES), ("t10k", 64)):
        pixels = rng.randbytes(count * 784)
        labels = bytes(rng.randrange(10) for _ in range(count))
        with open(os.path.join(folder, f"{prefix}-images-idx3-ubyte"), "wb") as f:
            f.write(struct.pack(">IIII", 0x803, count, 28, 28) + pixels)
        with open(os.path.join(folder, f"{prefix}-labels-idx1-ubyte"), "wb") as f:
            f.write(struct.pack(">II", 0x801, count) + labels)


def process_table():
    """{pid: (parent pid, name)} of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                name, rest = f.read().rsplit(")", 1)
        except OSError:
            continue
        table[int(entry)] = (int(rest.split()[1]), name.split("(", 1)[1])
    return table


class Machine:
    """One machine: a process (launcher or torchrun agent) in a session of its own, and every
    process below it (torchrun starts its workers in sessions of their own)."""

    def __init__(self, command, log_path, env=None):
        self.log_path = log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT,
                                            env=env, start_new_session=True)

    def descendants(self):
        """[(pid, name)] of the processes below this machine's first."""
        table = process_table()
        found, todo = [], [self.process.pid]
        while todo:
            parent = todo.pop()
            for pid, (ppid, name) in table.items():
                if ppid == parent:
                    found.append((pid, name))
                    todo.append(pid)
        return found

    def signal(self, number):
        below = self.descendants()
        for pid in [self.process.pid] + [pid for pid, _ in below]:
            try:
                os.kill(pid, number)
            except ProcessLookupError:
                pass
        try:
            os.killpg(self.process.pid, number)
        except ProcessLookupError:
            pass

    def alive(self):
        return self.process.poll() is None

    def training(self, worker_name):
        """Whether a worker of this machine trains now, not one waiting to join: a process below
        the launcher or agent whose name holds `worker_name` ("" for any)."""
        return self.alive() and any(worker_name in name for _, name in self.descendants())


class Chaos:
    """One case: its machines, the kills, and the lines they leave."""

    def __init__(self, args, case, folder):
        self.args, self.case, self.folder = args, case, folder
        self.system = "torchrun" if case.startswith("torchrun") else \
            "torchft" if case.startswith("torchft") else "dpl"
        self.machines, self.extras, self.kills = [], [], []
        self.port = free_port()
        self.store = None

    def command(self, index, machine_id):
        args, folder = self.args, self.folder
        if self.system == "torchrun":
            return [args.python, "-m", "torch.distributed.run", "--nnodes", f"2:{MACHINES}",
                    "--nproc_per_node", str(args.workers), "--max_restarts", "1000",
                    "--rdzv_backend", "c10d",
                    "--rdzv_endpoint", f"127.0.0.1:{self.port}", "--rdzv_id", "chaos",
                    "--monitor_interval", "0.5", os.path.join(HERE, "chaos_ddp.py"),
                    "--mode", "torchrun", "--data", args.data, "--batch-size", str(GLOBAL_BATCH),
                    "--checkpoint-dir", os.path.join(folder, "checkpoints"),
                    "--checkpoint-every", str(args.checkpoint_every)]
        if self.system == "torchft":
            return [args.python, "-m", "torch.distributed.run", "--standalone",
                    "--nproc_per_node", "1", os.path.join(HERE, "chaos_ddp.py"),
                    "--mode", "torchft", "--data", args.data, "--batch-size", str(GLOBAL_BATCH),
                    "--replica", str(index), "--replicas", str(MACHINES)]
        command = [args.launcher, "--plugin-dir", args.plugin_dir, "--data-dir", args.data,
                   "--data-cache", "none", "--model", "convnet", "--backend", "gloo",
                   "--num-machines", f"2:{MACHINES}", "--num-processes", str(args.workers),
                   "--threads-per-worker", "1", "--batch-size", str(GLOBAL_BATCH),
                   "--epochs", "100000", "--no-eval", "--no-progress", "--log-interval", "1",
                   "--log-time", "iso", "--max-restarts", "1000", "--join-grace", "1",
                   "--rendezvous-timeout", "60"]
        # An elastic job needs a folder to restart from; no-checkpoint writes one at the end only,
        # which the window never reaches.
        if args.shard_optimizer:
            command += ["--shard-optimizer", "on"]
        every = 0 if self.case == "no-checkpoint" else args.checkpoint_every
        command += ["--checkpoint-dir", os.path.join(folder, "checkpoints"),
                    "--checkpoint-every", str(every)]
        if self.case.startswith("etcd"):
            # No machine's address names machine 0 here: each says its id, a replacement the id
            # of the machine it replaces.
            return command + ["--store", f"etcd://127.0.0.1:{self.store}", "--machine-id",
                              str(machine_id), "--job-token", f"chaos-{self.port}"]
        return command + ["--master-addr", "127.0.0.1", "--master-port", str(self.port)]

    def start_machine(self, machine_id=None):
        index = len(self.machines)
        env = dict(os.environ)
        if self.system == "torchft":
            env["TORCHFT_LIGHTHOUSE"] = f"http://127.0.0.1:{self.port}"
        log = os.path.join(self.folder, f"machine{index}.log")
        machine_id = index if machine_id is None else machine_id
        self.machines.append(Machine(self.command(index, machine_id), log, env))
        self.machines[-1].machine_id = machine_id
        return self.machines[-1]

    def start_helpers(self):
        """etcd for the etcd case, torchft's lighthouse for torchft."""
        if self.case.startswith("etcd"):
            self.store, peer = free_port(), free_port()
            self.extras.append(Machine(
                ["etcd", "--data-dir", os.path.join(self.folder, "etcd"),
                 "--listen-client-urls", f"http://127.0.0.1:{self.store}",
                 "--advertise-client-urls", f"http://127.0.0.1:{self.store}",
                 "--listen-peer-urls", f"http://127.0.0.1:{peer}"],
                os.path.join(self.folder, "etcd.log")))
            time.sleep(1.0)
        if self.system == "torchft":
            lighthouse = os.path.join(os.path.dirname(self.args.python), "torchft_lighthouse")
            self.extras.append(Machine(
                [lighthouse, "--min_replicas", "1", "--join_timeout_ms", "1000",
                 "--bind", f"127.0.0.1:{self.port}"], os.path.join(self.folder, "lighthouse.log")))
            time.sleep(0.5)

    def spared(self):
        """The machine a kill spares: the built-in store's, or torchrun's rendezvous host."""
        any_goes = self.case.startswith("etcd") or self.system == "torchft"
        return None if any_goes else self.machines[0]

    def run(self):
        try:
            return self.run_chaos()
        finally:
            for machine in self.machines + self.extras:
                machine.signal(signal.SIGKILL)
            for machine in self.machines + self.extras:
                machine.process.wait()

    def run_chaos(self):
        self.start_helpers()
        for _ in range(MACHINES):
            self.start_machine()
            time.sleep(0.3)  # the first binds the store's port
        start = self.wait_for_first_step(120)
        end = start + self.args.duration
        rng = random.Random(self.args.seed)
        killing = not self.case.endswith("baseline") and self.case != "no-checkpoint"
        moments = [start + k * self.args.kill_every
                   for k in range(1, int(self.args.duration // self.args.kill_every) + 1)
                   if start + k * self.args.kill_every < end - 1.0] if killing else []
        for number, moment in enumerate(moments):
            time.sleep(max(0.0, moment - time.time()))
            last = number == len(moments) - 1
            self.kill(rng, replace=not last)
        time.sleep(max(0.0, end - time.time()))
        return start, end

    def kill(self, rng, replace):
        # A machine waiting to join (dpl takes it in at the next restart) is no member to lose.
        worker = "dpl-rank-" if self.system == "dpl" else ""
        candidates = [m for m in self.machines if m.training(worker) and m is not self.spared()]
        if not candidates:
            return
        victim = rng.choice(candidates)
        number = signal.SIGSTOP if self.case == "sigstop" else signal.SIGKILL
        moment = time.time()
        victim.signal(number)
        self.kills.append({"time": moment, "machine": self.machines.index(victim),
                           "signal": signal.Signals(number).name, "replaced": replace})
        if number == signal.SIGSTOP:
            # Stopped, it holds its sockets open; once the others step on without it, it goes.
            self.wait_for_step_after(moment, 60)
            victim.signal(signal.SIGKILL)
        if replace:
            self.start_machine(victim.machine_id)

    def timeline(self):
        return step_timeline(self.system, [m.log_path for m in self.machines])

    def wait_for_first_step(self, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            steps = self.timeline()
            if steps:
                return steps[0][0]
            if not any(m.alive() for m in self.machines):
                break
            time.sleep(0.2)
        raise RuntimeError(f"{self.case}: no step within {timeout} s (or every machine ended); "
                           f"see the logs in {self.folder}")

    def wait_for_step_after(self, moment, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if any(t > moment + 0.2 for t, _, _ in self.timeline()[-5:]):
                return
            time.sleep(0.2)


def iso_seconds(text):
    return datetime.datetime.fromisoformat(text).timestamp()


def step_timeline(system, log_paths):
    """[(unix time, step, discarded)] of every step line of every machine, by time; a step
    computed again appears again; discarded: a torchft step whose commit failed."""
    lines = []
    for path in log_paths:
        with open(path, errors="replace") as f:
            for line in f:
                if system == "dpl":
                    match = DPL_LINE.match(line.rstrip("\n"))
                    if match:
                        try:
                            lines.append((iso_seconds(match.group(1)), match.group(2)))
                        except ValueError:
                            pass
                else:
                    match = PEER_STEP.search(line)
                    if match:
                        lines.append((float(match.group(1)),
                                      (int(match.group(2)), match.group(3) is not None)))
    lines.sort(key=lambda entry: entry[0])
    if system != "dpl":
        return [(moment, step, discarded) for moment, (step, discarded) in lines]
    steps, step = [], 0
    for moment, text in lines:
        if text.startswith("--backend "):  # an attempt's rank 0 starts
            step = 0
        resumed = RESUMED.match(text) or CONTINUING.match(text)
        if resumed:
            step = int(resumed.group(1))
        if text.startswith("epoch: ") and "training loss" in text:
            step += 1
            steps.append((moment, step, False))
    return steps


def committed_steps(steps, end):
    done = [s for t, s, discarded in steps if t <= end and not discarded]
    return max(done) if done else 0


def median_step(steps):
    times = sorted({t for t, s, discarded in steps if not discarded})
    gaps = [b - a for a, b in zip(times, times[1:])]
    return statistics.median(gaps) if gaps else 0.0


def kill_figures(kill, next_kill, steps, pause):
    """Seconds from the kill to the first step after the job's pause, and the steps recomputed
    until the next kill."""
    before = [s for t, s, discarded in steps if t < kill and not discarded]
    done = max(before) if before else 0
    after = [(t, s, discarded) for t, s, discarded in steps if kill <= t < next_kill]
    recomputed = sum(1 for t, s, discarded in after if discarded or s <= done)
    previous = max((t for t, s, discarded in steps if t < kill), default=kill)
    resumed_at = None
    for t, s, discarded in after:
        if t - previous > pause:
            resumed_at = t
            break
        previous = t
    if resumed_at is None and after:
        resumed_at = after[0][0]
    return (resumed_at - kill if resumed_at else None), recomputed


def measure(args, case, root):
    folder = os.path.join(root, case)
    os.makedirs(folder)
    chaos = Chaos(args, case, folder)
    start, end = chaos.run()
    steps = chaos.timeline()
    result = {"case": case, "system": chaos.system, "start": start, "end": end,
              "committed": committed_steps(steps, end), "median_step_s": median_step(steps),
              "kills": chaos.kills, "logs": folder}
    result["steps_per_s"] = result["committed"] / args.duration
    return result, steps


def summarise(results, timelines):
    """Goodput against each system's baseline; the kills' figures."""
    def against(r):  # the etcd cases have a baseline of their own where it ran
        return (r["system"], r["case"].startswith("etcd"))

    baselines = {against(r): r for r in results if r["case"].endswith("baseline")}
    for r in results:
        base = baselines.get(against(r)) or baselines.get((r["system"], False))
        r["goodput"] = r["committed"] / base["committed"] if base and base["committed"] else None
        median = (base or r)["median_step_s"]
        pause = max(1.0, 5 * median)
        moments = [k["time"] for k in r["kills"]] + [r["end"]]
        for kill, next_kill in zip(r["kills"], moments[1:]):
            kill["to_step_s"], kill["recomputed"] = kill_figures(
                kill["time"], next_kill, timelines[r["case"]], pause)
    checkpointed = next((r for r in results if r["case"] == "baseline"), None)
    unsaved = next((r for r in results if r["case"] == "no-checkpoint"), None)
    if checkpointed and unsaved and unsaved["committed"]:
        checkpointed["with_checkpoints_vs_without"] = \
            checkpointed["committed"] / unsaved["committed"]


def table(results, args):
    rows = ["| case | committed steps | steps/s | goodput | kills | kill to step (s) | "
            "recomputed per kill |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in results:
        kills = r["kills"]
        to_step = [k["to_step_s"] for k in kills if k.get("to_step_s") is not None]
        recomputed = [k["recomputed"] for k in kills]
        rows.append(" | ".join([
            f"| {r['case']}", str(r["committed"]), f"{r['steps_per_s']:.1f}",
            "-" if r["goodput"] is None else f"{r['goodput']:.2f}", str(len(kills)),
            ", ".join(f"{s:.1f}" for s in to_step) or "-",
            ", ".join(str(n) for n in recomputed) or "-"]) + " |")
    base = next((r for r in results if "with_checkpoints_vs_without" in r), None)
    if base:
        rows.append(f"\nthroughput with a checkpoint every {args.checkpoint_every} steps: "
                    f"{base['with_checkpoints_vs_without']:.3f} of without")
    return "\n".join(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", default=",".join(ALL_CASES))
    parser.add_argument("--duration", type=float, default=360.0, help="seconds a case trains")
    parser.add_argument("--kill-every", type=float, default=60.0)
    parser.add_argument("--checkpoint-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=0, help="which machines the kills pick")
    parser.add_argument("--workers", type=int, default=1,
                        help="workers a machine, dpl's and torchrun's (torchft: one)")
    parser.add_argument("--shard-optimizer", action="store_true",
                        help="dpl's cases with --shard-optimizer on")
    parser.add_argument("--launcher", default=os.path.join(REPO, "build", "launcher", "launcher"))
    parser.add_argument("--plugin-dir", default=os.path.join(REPO, "build", "plugins_out"))
    parser.add_argument("--python", default=os.path.join(REPO, "tools", "python"),
                        help="the pinned torch's Python, for torchrun and torchft")
    parser.add_argument("--json", default="", help="write every figure to this file")
    parser.add_argument("--keep", action="store_true", help="keep the logs' folder")
    args = parser.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    unknown = [c for c in cases if c not in ALL_CASES]
    if unknown:
        sys.exit(f"unknown case(s) {unknown}: choose from {', '.join(ALL_CASES)}")
    if not os.access(args.launcher, os.X_OK):
        sys.exit(f"no launcher at {args.launcher}: build with tools/build.sh or pass --launcher")
    if any(c.startswith("etcd") for c in cases) and shutil.which("etcd") is None:
        sys.exit("the etcd case needs the etcd binary on PATH (apt-get install etcd-server)")
    if any(c.startswith("torch") for c in cases):
        args.python = resolve_python(args.python)
    root = tempfile.mkdtemp(prefix="dpl-chaos-")
    args.data = os.path.join(root, "data")
    write_idx(args.data)
    results, timelines = [], {}
    failed = []
    for case in cases:
        print(f"{case}: {args.duration:.0f} s ...", file=sys.stderr, flush=True)
        try:
            result, steps = measure(args, case, root)
        except RuntimeError as error:
            print(str(error), file=sys.stderr, flush=True)
            failed.append(case)
            args.keep = True
            continue
        results.append(result)
        timelines[case] = steps
        print(f"{case}: {result['committed']} steps committed", file=sys.stderr, flush=True)
    summarise(results, timelines)
    print(table(results, args))
    if failed:
        print(f"cases that did not train: {', '.join(failed)} (their logs are kept)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.keep:
        print(f"logs in {root}", file=sys.stderr)
    else:
        shutil.rmtree(root, ignore_errors=True)


def resolve_python(python):
    """tools/python is a script that runs the pinned environment's Python: that Python's path,
    so that torchft's lighthouse is found next to it."""
    found = subprocess.run([python, "-c", "import sys; print(sys.executable)"],
                           capture_output=True, text=True)
    if found.returncode != 0:
        sys.exit(f"{python} does not run: {found.stderr.strip()} (tools/setup.sh makes it)")
    return found.stdout.strip()


if __name__ == "__main__":
    main()
