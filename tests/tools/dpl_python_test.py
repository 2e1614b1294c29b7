"""tools/dpl_python.py: a tool started by any python3 runs under dpl's Python environment, or
under $DPL_PYTHON, and every tool that imports the environment's packages asks for it first.

    dpl_python_test.py BASE_PYTHON    (BASE_PYTHON: another interpreter, e.g. /usr/bin/python3)
Exits 0 when every check holds, else 1 naming each that failed.
"""
import os
import re
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = os.path.join(REPO, "tools")
# What a tool run under the wrong interpreter would import from there instead.
ENVIRONMENT_PACKAGES = re.compile(r"^\s*(import|from) (torch|numpy|matplotlib|PIL|webdataset)\b",
                                  re.MULTILINE)
failures = []


def check(condition, what):
    print(("ok   " if condition else "FAIL ") + what)
    if not condition:
        failures.append(what)


def probe(python, folder, **env):
    """Runs a tool that prints the interpreter it ended up in, under `python`."""
    path = os.path.join(folder, "probe.py")
    with open(path, "w") as out:
        out.write(f"import sys\nsys.path.insert(0, {TOOLS!r})\nimport dpl_python\n"
                  "dpl_python.use_dpl_python()\nprint(sys.executable, sys.prefix, *sys.argv[1:])\n")
    environment = {k: v for k, v in os.environ.items() if k != "DPL_PYTHON"}
    environment.update(env)
    return subprocess.run([python, path, "an argument"], capture_output=True, text=True,
                          env=environment)


def main():
    base = sys.argv[1]
    with tempfile.TemporaryDirectory() as folder:
        located = subprocess.run([os.path.join(TOOLS, "python_env.sh"), "python"],
                                 capture_output=True, text=True)
        ran = probe(base, folder)
        if located.returncode == 0:
            environment = located.stdout.strip()
            check(ran.returncode == 0 and ran.stdout.split()[0] == environment and
                  ran.stdout.endswith("an argument\n"),
                  f"{base} starts a tool again under dpl's environment {environment}, with its "
                  f"arguments (got {ran.stdout.strip()!r} {ran.stderr.strip()!r})")
        else:
            check(ran.returncode != 0 and "run tools/setup.sh" in ran.stderr,
                  f"without dpl's environment a tool says to run tools/setup.sh (got "
                  f"{ran.stderr.strip()!r})")
        if located.returncode == 0 and located.stdout.startswith(
                os.path.expanduser("~/.cache/dpl/")) and not os.environ.get("DPL_PYTHON_ENV_HOME"):
            # An environment in ~/.cache/dpl is still found once $XDG_CACHE_HOME points elsewhere
            # (to move dpl's data cache, say), instead of being downloaded again.
            moved = subprocess.run([os.path.join(TOOLS, "python_env.sh"), "python"],
                                   capture_output=True, text=True,
                                   env=dict(os.environ, XDG_CACHE_HOME=folder))
            check(moved.returncode == 0 and moved.stdout == located.stdout,
                  f"with XDG_CACHE_HOME={folder} the environment in ~/.cache/dpl is used (got "
                  f"{moved.stdout.strip()!r} {moved.stderr.strip()!r})")
        ran = probe(sys.executable, folder, DPL_PYTHON=base)
        check(ran.returncode == 0 and ran.stdout.split()[0] == base,
              f"DPL_PYTHON={base} runs a tool there (got {ran.stdout.strip()!r} "
              f"{ran.stderr.strip()!r})")
        ran = probe(sys.executable, folder, DPL_PYTHON="/no/such/python")
        check(ran.returncode != 0 and "DPL_PYTHON=/no/such/python is not an interpreter" in
              ran.stderr, f"a DPL_PYTHON that cannot run is named (got {ran.stderr.strip()!r})")

    for folder in (TOOLS, os.path.join(TOOLS, "bench")):
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if not name.endswith(".py"):
                continue
            text = open(path).read()
            first_package = ENVIRONMENT_PACKAGES.search(text)
            if not text.startswith("#!") or not first_package:
                continue  # a module other tools import, or a tool of the standard library only
            asks = text.find("dpl_python.use_dpl_python()")
            relative = os.path.relpath(path, REPO)
            check(0 <= asks < first_package.start(),
                  f"{relative} calls dpl_python.use_dpl_python() before it imports "
                  f"{first_package.group(2)}")
            check(text.startswith("#!/usr/bin/env python3\n"),
                  f"{relative} starts with #!/usr/bin/env python3")
    if failures:
        sys.exit(f"{len(failures)} checks failed")


if __name__ == "__main__":
    main()
