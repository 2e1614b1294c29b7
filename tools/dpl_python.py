"""Runs dpl's Python tools under dpl's Python environment, whatever interpreter started them.

A tool started as `tools/bench/bench_lm.py` (its shebang finds the first python3 on the PATH,
Debian's, whose torch is 1.13 or none) calls use_dpl_python() before it imports torch; when the
running interpreter is not the environment's, the tool starts again under it with the same
arguments. The environment is the one tools/setup.sh makes from tools/requirements.txt, found
through tools/python_env.sh (the one place that says where it is); a missing one ends the tool
with the command that makes it.

DPL_PYTHON=INTERPRETER runs the tools under another Python instead, e.g. Debian's
(DPL_PYTHON=/usr/bin/python3, for a build against Debian's libtorch: tools/build.sh
--system-torch); the tests set it to the Python of the torch they were built against. The tool
exports DPL_PYTHON to the programs it starts, so every tool of one run uses one interpreter.
"""
import os
import shutil
import subprocess
import sys

TOOLS = os.path.dirname(os.path.abspath(__file__))
# Set for the one exec below, so that a Python whose sys.executable names another path (a
# symbolic link, say) runs the tool instead of starting it again.
_STARTED = "DPL_PYTHON_STARTED"


def dpl_python():
    """The interpreter the tools run under: $DPL_PYTHON, else the environment's. Exits saying
    what to run when neither is there."""
    chosen = os.environ.get("DPL_PYTHON")
    if chosen:
        found = shutil.which(chosen)
        if not found:
            sys.exit(f"dpl: DPL_PYTHON={chosen} is not an interpreter that can be run; set it to "
                     "one (e.g. /usr/bin/python3) or unset it for dpl's Python environment")
        return os.path.abspath(found)
    located = subprocess.run([os.path.join(TOOLS, "python_env.sh"), "python"],
                             capture_output=True, text=True)
    if located.returncode != 0:
        sys.exit(located.stderr.strip() + "\n(or set DPL_PYTHON=/usr/bin/python3 to run the "
                 "tool under another Python and its torch)")
    return located.stdout.strip()


def use_dpl_python():
    """Starts the running tool again under dpl_python() unless it runs there already. Only a tool
    run as the program does: one imported as a module (by a test, or by a spawned worker, which
    imports the program as __mp_main__) runs under whatever its importer chose."""
    if sys._getframe(1).f_globals.get("__name__") != "__main__":
        return
    if os.environ.pop(_STARTED, None):
        return
    target = dpl_python()
    os.environ["DPL_PYTHON"] = target  # the programs this tool starts use it too
    if os.path.abspath(sys.executable) == target:
        return
    os.environ[_STARTED] = "1"
    os.execv(target, [target, *sys.orig_argv[1:]])
