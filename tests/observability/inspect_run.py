"""Reads what a launcher run wrote, independently of dpl's C++ code, for the observability tests.

Usage: inspect_run.py metrics FILE
         Checks that every line is a JSON object of a known kind with its keys, and prints one
         line per object: "step STEP EPOCH BATCH LOSS LR", "epoch EPOCH STEP LOSS SAMPLES
         LOSS_BATCHES",
         "eval STEP LOSS ACCURACY CORRECT COUNT" (numbers as Python's repr).
       inspect_run.py trace FILE RANKS
         Checks the --trace file: valid JSON trace events; every rank's process and threads named;
         spans of one thread never overlap; every rank has data, forward/backward, communication
         wait and optimizer spans and allreduce spans on its communication thread; every allreduce
         starts at or after the backward of its step began and ends before that step's
         communication wait is over; every submission arrow starts inside that backward or wait.
         Prints "ok ranks=R steps=S allreduces=A submitted_in_backward=B".
Exits 1 with a message naming the first problem.
"""

import collections
import json
import sys

STEP_KEYS = {"kind", "epoch", "step", "batch", "loss", "lr", "samples_per_s", "time_s", "phase_ms"}
PHASES = {"data", "forward_backward", "communication_wait", "optimizer", "host_copies"}
EPOCH_KEYS = {"kind", "epoch", "step", "loss", "loss_batches", "seconds", "samples", "samples_per_s",
              "time_s"}
EVAL_KEYS = {"kind", "epoch", "step", "loss", "accuracy", "correct", "count", "time_s"}
EPSILON_US = 0.002  # the file's microseconds have three decimals


def fail(message):
    print(message)
    sys.exit(1)


def metrics(path):
    with open(path) as f:
        for number, line in enumerate(f, 1):
            try:
                row = json.loads(line)
            except ValueError as error:
                fail(f"{path}:{number}: not JSON ({error})")
            kind = row.get("kind")
            expected = {"step": STEP_KEYS, "epoch": EPOCH_KEYS, "eval": EVAL_KEYS}.get(kind)
            if expected is None:
                fail(f"{path}:{number}: unknown kind {kind!r}")
            if set(row) != expected:
                fail(f"{path}:{number}: keys {sorted(row)} are not {sorted(expected)}")
            if kind == "step":
                if set(row["phase_ms"]) != PHASES:
                    fail(f"{path}:{number}: phases {sorted(row['phase_ms'])}")
                print("step", row["step"], row["epoch"], row["batch"], repr(row["loss"]),
                      repr(row["lr"]))
            elif kind == "epoch":
                print("epoch", row["epoch"], row["step"], repr(row["loss"]), row["samples"],
                      row["loss_batches"])
            else:
                print("eval", row["step"], repr(row["loss"]), repr(row["accuracy"]),
                      row["correct"], row["count"])


def trace(path, ranks):
    with open(path) as f:
        document = json.load(f)
    events = document["traceEvents"]
    spans = collections.defaultdict(list)  # (pid, tid) -> spans
    names = set()
    flows = {}
    for e in events:
        if e["ph"] == "M":
            names.add((e["name"], e["pid"], e.get("tid")))
        elif e["ph"] == "X":
            spans[(e["pid"], e["tid"])].append(e)
        elif e["ph"] in ("s", "f"):
            flows.setdefault(e["id"], {})[e["ph"]] = e
    for rank in range(ranks):
        for meta, tid in (("process_name", None), ("thread_name", 1), ("thread_name", 2)):
            if (meta, rank, tid) not in names:
                fail(f"rank {rank}: no {meta} event for thread {tid}")
    if {pid for pid, _ in spans} != set(range(ranks)):
        fail(f"spans of ranks {sorted({pid for pid, _ in spans})}, expected 0..{ranks - 1}")
    for (pid, tid), row in spans.items():
        row.sort(key=lambda e: e["ts"])
        for a, b in zip(row, row[1:]):
            if b["ts"] < a["ts"] + a["dur"] - EPSILON_US:
                fail(f"rank {pid} thread {tid}: {a['name']} at {a['ts']} overlaps {b['name']}")
    allreduces = submitted_in_backward = 0
    steps = set()
    for rank in range(ranks):
        training = spans[(rank, 1)]
        communication = spans[(rank, 2)]
        present = {e["name"] for e in training}
        for needed in ("data", "communication wait", "optimizer"):
            if needed not in present:
                fail(f"rank {rank}: no {needed!r} span")
        if not ({"forward", "backward"} <= present or "forward+backward" in present):
            fail(f"rank {rank}: no forward and backward spans")
        backward = {}  # step -> start of its backward
        wait_end = {}
        for e in training:
            step = e["args"]["step"]
            if e["name"] in ("backward", "forward+backward"):
                backward[step] = e["ts"]  # the last micro-batch's, the one that is summed
            elif e["name"] == "communication wait":
                wait_end[step] = e["ts"] + e["dur"]
        for e in communication:
            if not e["name"].startswith("allreduce"):
                continue
            allreduces += 1
            step = e["args"]["step"]
            steps.add(step)
            if step not in backward or step not in wait_end:
                fail(f"rank {rank}: {e['name']} of step {step}, a step without backward or wait")
            if e["ts"] < backward[step] - EPSILON_US:
                fail(f"rank {rank}: {e['name']} of step {step} starts at {e['ts']}, before its "
                     f"backward at {backward[step]}")
            if e["ts"] + e["dur"] > wait_end[step] + EPSILON_US:
                fail(f"rank {rank}: {e['name']} of step {step} ends after its communication wait")
        if not any(e["name"].startswith("allreduce") for e in communication):
            fail(f"rank {rank}: no allreduce span")
    phases = {}  # rank -> its backward and wait spans, by step
    for rank in range(ranks):
        for e in spans[(rank, 1)]:
            if e["name"] in ("backward", "forward+backward", "communication wait"):
                phases.setdefault((rank, e["args"]["step"]), []).append(e)
    span_at = {(e["pid"], e["ts"]): e for (pid, tid), row in spans.items() if tid == 2 for e in row}
    for flow_id, ends in flows.items():
        if set(ends) != {"s", "f"}:
            fail(f"arrow {flow_id} has only {sorted(ends)}")
        start, end = ends["s"], ends["f"]
        target = span_at.get((end["pid"], end["ts"]))
        if target is None:
            fail(f"arrow {flow_id} ends at {end['ts']} on rank {end['pid']}, where no span starts")
        if not target["name"].startswith("allreduce"):
            continue  # the broadcast before the first step
        step = target["args"]["step"]
        inside = [e for e in phases.get((start["pid"], step), [])
                  if e["ts"] - EPSILON_US <= start["ts"] <= e["ts"] + e["dur"] + EPSILON_US]
        if not inside:
            fail(f"rank {start['pid']}: {target['name']} of step {step} submitted at "
                 f"{start['ts']}, outside its backward and communication wait")
        if inside[-1]["name"] != "communication wait":
            submitted_in_backward += 1
    print(f"ok ranks={ranks} steps={len(steps)} allreduces={allreduces} "
          f"submitted_in_backward={submitted_in_backward}")


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "metrics":
        metrics(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "trace":
        trace(sys.argv[2], int(sys.argv[3]))
    else:
        fail(__doc__)


if __name__ == "__main__":
    main()
