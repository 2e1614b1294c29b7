#!/usr/bin/env python3
"""Finds the calls of a backend's collectives and of the store's sums outside the front.

Every collective of a worker goes through one front, launcher/training/collectives/ (Note [One
front for collectives] in collectives.hpp): the backend's collective entries (training::Backend's
Allreduce, Broadcast, Allgather, ReduceScatter, Barrier, Synchronize, or a table's allreduce, ...)
and the store's sums and votes (rendezvous::SumAcrossRanks, AnyRankVoted) are called in the
front's files only. Excepted by name: the link test (launcher/worker/link_test.cpp), whose
backend instances of two ranks each measure links, not the job; the rendezvous store's own files,
which define the sums; and the plugin host's adapters, which build an older table's entries from
its own.

    tests/style/collectives_only_in_the_front.py [ROOT]

Exits 1 and lists every call found elsewhere (path:line: the line).
"""
import pathlib
import re
import sys

ROOT = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else
                    pathlib.Path(__file__).resolve().parent.parent.parent)
FRONT = "launcher/training/collectives/"
EXCEPTED = {
    "launcher/worker/link_test.cpp": "the link test's per-link backends measure links",
}
# Not collectives, so neither found nor excepted: the step times' exchange
# (launcher/worker/step_time_exchange.cpp, Note [Stragglers] in training/stragglers.hpp) sets each
# rank's own key of the store and rank 0 reads them, from a thread and a store connection of its
# own; nothing is summed, no rank waits for another, and a step never waits for it, so it has no
# place on the front's thread. A sharded checkpoint's parts meet on disk (checkpoint_folder.hpp).
EXCEPTED_FOLDERS = {
    "launcher/rendezvous/": "the store's own sums",
    "launcher/plugin_host/": "the adapters build an older table's entries",
}
CALLS = [
    # training::Backend's collectives (the front's own methods have other names or arguments).
    re.compile(r"(\.|->)\s*(Allreduce|Allgather|ReduceScatter|Synchronize|Broadcast)\s*\("),
    re.compile(r"(\.|->)\s*Barrier\s*\(\s*\)"),
    # A backend table's entries, called directly.
    re.compile(r"(\.|->)\s*(allreduce|broadcast|allgather|reduce_scatter|barrier|synchronize)\s*\("),
    # The store's sums and votes.
    re.compile(r"\b(SumAcrossRanks|AnyRankVoted)\s*\("),
]
# What the patterns must find, so that a broken one fails this check rather than passing it.
MUST_FIND = [
    "backend_->Barrier();",
    "backend.Allreduce(&tensor, DPL_REDUCE_SUM, nullptr)",
    "table_->reduce_scatter(instance_, in, out, op, stream)",
    "rendezvous::SumAcrossRanks(client, prefix, name, rank, size, &v, t)",
    "AnyRankVoted(client, prefix, \"preempt\", step, size, yes, t)",
    "group.across_machines->Broadcast(&t, 0, nullptr)",
]
MUST_PASS = [
    "collectives.Barrier(\"the preemption's checkpoint\")",
    "collectives_.SumScalars(name, &values)",
    "collectives.BroadcastTensors(tensors, 0, stream, activity)",
]


def code_of(line):
    """The line without its // comment (string literals may hold '//' too rarely to matter)."""
    return line.split("//", 1)[0]


def finds(line):
    return any(pattern.search(code_of(line)) for pattern in CALLS)


def excepted(name):
    return (name.startswith(FRONT) or name in EXCEPTED or
            any(name.startswith(folder) for folder in EXCEPTED_FOLDERS))


def main():
    broken = [text for text in MUST_FIND if not finds(text)]
    broken += [text for text in MUST_PASS if finds(text)]
    if broken:
        print("the check's own patterns are broken on: " + "; ".join(broken))
        return 1
    found = []
    for path in sorted((ROOT / "launcher").rglob("*")):
        if path.suffix not in {".cpp", ".hpp", ".h", ".cc"}:
            continue
        name = path.relative_to(ROOT).as_posix()
        if excepted(name):
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if finds(line):
                found.append(f"{name}:{number}: {line.strip()}")
    for line in found:
        print(line)
    if found:
        print(f"{len(found)} collective call(s) outside the front ({FRONT}): make them through "
              "training::Collectives (Note [One front for collectives])")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
