#!/usr/bin/python3
"""Side-by-side benchmark of dpl against the PyTorch DDP recipe (../shared/peers/convnet_ddp.py).

Both run the same model, data, optimizer and global batch (128) on the same machine, back to
back. Every figure is the median of --repeats runs, and is reported as a ratio in one table.

Method (identical for dpl and the peer, so no implementation has to time itself):
  * each configuration runs twice per repeat, for K1 and K2 training steps (wall-clock of the
    whole command, process start to exit);
  * steady samples/s = (K2 - K1) * 128 / (wall(K2) - wall(K1))   -- warm-up and start-up cancel;
  * start-up to the first step = wall(K1) - K1 * 128 / steady      -- what is left of the short run;
  * peak RSS per worker = the largest VmHWM of any worker process (polled every 20 ms over the
    process tree; the launcher/spawn parent is excluded).
The peer runs twice: as users run it, and "tuned" with glibc malloc thresholds raised
(MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_), which avoids page faults on every step.
"""
import argparse
import os
import statistics
import subprocess
import sys
import time

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


def timed_run(cmd, env, worker_name_filter):
    """Runs cmd; returns (wall seconds, peak RSS KiB of the largest worker)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peaks = {}
    while proc.poll() is None:
        for pid in descendants(proc.pid):
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    cmdline = f.read()
            except OSError:
                continue
            if worker_name_filter(cmdline):
                peaks[pid] = max(peaks.get(pid, 0), peak_rss_kib(pid))
        time.sleep(0.02)
    wall = time.perf_counter() - start
    output = proc.stdout.read().decode(errors="replace")
    if proc.returncode != 0:
        sys.exit(f"benchmark command failed ({proc.returncode}): {' '.join(cmd)}\n{output[-3000:]}")
    return wall, max(peaks.values(), default=0)


def dpl_command(args, processes, threads, backend, steps):
    return [args.launcher, "--backend", backend, "--model", "convnet",
            "--num-processes", str(processes), "--threads-per-worker", str(threads),
            "--batch-size", str(GLOBAL_BATCH), "--max-steps", str(steps), "--data-dir", args.data,
            "--master-port", "0", "--no-progress", "--no-eval"]


def peer_command(args, processes, backend, steps, port):
    return [sys.executable, args.peer, "--data", args.data, "--num-processes", str(processes),
            "--batch-size", str(GLOBAL_BATCH // processes), "--backend", backend,
            "--max-batches", str(steps), "--quiet", "--port", str(port)]


def measure(make_cmd, env, worker_filter, k1, k2, repeats):
    rates, startups, rss = [], [], []
    for _ in range(repeats):
        wall1, rss1 = timed_run(make_cmd(k1), env, worker_filter)
        wall2, rss2 = timed_run(make_cmd(k2), env, worker_filter)
        rate = (k2 - k1) * GLOBAL_BATCH / (wall2 - wall1)
        rates.append(rate)
        startups.append(wall1 - k1 * GLOBAL_BATCH / rate)
        rss.append(max(rss1, rss2))
    return {"rate": statistics.median(rates), "startup": statistics.median(startups),
            "rss_mib": statistics.median(rss) / 1024.0}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--launcher", default=os.path.join(REPO, "build", "launcher", "launcher"))
    p.add_argument("--peer", default=os.path.join(os.path.dirname(REPO), "shared", "peers", "convnet_ddp.py"))
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--k1", type=int, default=20, help="steps of the short run")
    p.add_argument("--k2", type=int, default=120, help="steps of the long run")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--configs", default="1x2-gloo,2x1-gloo,2x1-tcp",
                   help="comma list of <processes>x<threads>-<backend>")
    args = p.parse_args()

    base_env = dict(os.environ)
    base_env.pop("MALLOC_MMAP_THRESHOLD_", None)
    base_env.pop("MALLOC_TRIM_THRESHOLD_", None)
    port = 29610
    rows = []
    for config in args.configs.split(","):
        shape, backend = config.split("-")
        processes, threads = (int(v) for v in shape.split("x"))
        env = dict(base_env, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))
        dpl = measure(lambda k: dpl_command(args, processes, threads, backend, k), env,
                      lambda c: b"--worker" in c, args.k1, args.k2, args.repeats)
        # The peer has no tcp backend: its row for a dpl tcp config is gloo.
        peer_backend = "gloo"
        port += 1
        peer_filter = lambda c: b"multiprocessing" in c  # spawn children
        peer = measure(lambda k: peer_command(args, processes, peer_backend, k, port), env,
                       peer_filter, args.k1, args.k2, args.repeats)
        port += 1
        tuned = measure(lambda k: peer_command(args, processes, peer_backend, k, port),
                        dict(env, **TUNED_MALLOC), peer_filter, args.k1, args.k2, args.repeats)
        rows.append((config, dpl, peer, tuned))

    print(f"median of {args.repeats} runs; steady rate from {args.k1} vs {args.k2} steps; global batch {GLOBAL_BATCH}")
    print("| config | dpl samples/s | peer | peer tuned | dpl/peer | dpl/tuned | dpl start s | peer start s | start ratio | dpl RSS MiB | peer RSS MiB | RSS ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for config, dpl, peer, tuned in rows:
        print(f"| {config} | {dpl['rate']:.0f} | {peer['rate']:.0f} | {tuned['rate']:.0f} | "
              f"{dpl['rate'] / peer['rate']:.2f}x | {dpl['rate'] / tuned['rate']:.2f}x | "
              f"{dpl['startup']:.2f} | {peer['startup']:.2f} | {dpl['startup'] / peer['startup']:.2f} | "
              f"{dpl['rss_mib']:.0f} | {peer['rss_mib']:.0f} | {dpl['rss_mib'] / peer['rss_mib']:.2f} |")
    by_config = {r[0]: r[1] for r in rows}
    if "1x2-gloo" in by_config and "2x1-gloo" in by_config:
        print(f"communication hidden: 2x1 gloo / 1x2 = {by_config['2x1-gloo']['rate'] / by_config['1x2-gloo']['rate']:.2f}")


if __name__ == "__main__":
    main()
