"""tools/compile_model.py's package cache: what a package's key covers, whether a cached package
is whole, and copying packages in and out.

A package depends on the module's code, and that code is rarely one file: `--module
zoo.small:make` builds a class of another file, a FILE.py imports its classes from the files
beside it. The key therefore covers the module's own source files (own_files): the file
--module names, the file of every class among the built module's submodules, and every file that
loading the module imported from outside the installed packages (helpers its forward calls).
torch's own files are keyed by torch's version instead.
"""
import hashlib
import inspect
import json
import os
import shutil
import sys
import sysconfig
import tempfile
import zipfile

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
TOOLS = ("compile_model.py", "compile_cache.py", "compile_refusals.py", "compiled_package.py",
         "export_model.py")
TORCH_DIR = os.path.dirname(os.path.abspath(torch.__file__)) + os.sep
ARGUMENTS = ("module", "kwargs", "input_shape", "token_ids", "loss", "precision", "device",
             "batch", "seed")
INSTALLED = tuple({sysconfig.get_paths()[name] + os.sep
                   for name in ("stdlib", "platstdlib", "purelib", "platlib")})


def installed(path):
    """Whether `path` belongs to Python or an installed package: not the module's own code."""
    return (os.sep + "site-packages" + os.sep in path or os.sep + "dist-packages" + os.sep in path
            or path.startswith(INSTALLED))


def given_file(spec):
    """The file --module names: FILE.py, or the file of the Python module MODULE."""
    if not spec:
        return os.path.join(HERE, "recipe_convnet.py")
    name = spec.rpartition(":")[0]
    if name.endswith(".py"):
        return os.path.abspath(name)
    path = getattr(sys.modules.get(name), "__file__", None)
    return os.path.abspath(path) if path else None


def own_files(spec, module, modules_before):
    """The sorted source files of the module's own code (the module docstring): `modules_before`
    is the set of sys.modules' names before --module was loaded."""
    files = {given_file(spec)}
    for layer in module.modules():
        try:
            files.add(inspect.getsourcefile(type(layer)))
        except TypeError:  # a class of no Python file
            pass
    for name in set(sys.modules) - modules_before:
        path = getattr(sys.modules.get(name), "__file__", None)
        if path and path.endswith(".py") and not installed(os.path.abspath(path)):
            files.add(path)
    files = {os.path.abspath(path) for path in files if path}
    return sorted(path for path in files
                  if os.path.isfile(path) and not path.startswith(TORCH_DIR))


def key(args, files, isa):
    """What a package depends on: this tool, the module's own files (their contents, not where
    they lie), the arguments, torch (and torchvision), the device, the instruction set and the
    precision."""
    digest = hashlib.sha256()
    for tool in TOOLS:
        with open(os.path.join(HERE, tool), "rb") as code:
            digest.update(code.read())
    contents = []
    for path in files:
        with open(path, "rb") as code:
            contents.append((os.path.basename(path), hashlib.sha256(code.read()).hexdigest()))
    arguments = {name: getattr(args, name) for name in ARGUMENTS}
    if arguments["kwargs"]:
        arguments["kwargs"] = json.loads(arguments["kwargs"])
    if (arguments["module"] or "").rpartition(":")[0].endswith(".py"):
        arguments["module"] = arguments["module"].rpartition(":")[2]  # the file is in `contents`
    torchvision = sys.modules.get("torchvision")
    arguments.update(files=sorted(contents), torch=torch.__version__, isa=isa,
                     torchvision=getattr(torchvision, "__version__", None))
    digest.update(json.dumps(arguments, sort_keys=True).encode())
    return digest.hexdigest()[:32]


def whole(path):
    """Whether the cached package `path` can be served: it exists and its archive reads back
    with every entry's checksum right. A damaged one (a copy cut short by a full disk or a
    killed process) is removed, with a warning, so that it is compiled again."""
    if not os.path.exists(path):
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
        problem = f"its entry {damaged} is damaged" if damaged else None
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        problem = str(error) or type(error).__name__
    if problem is None:
        return True
    print(f"warning: the cached package {path} is damaged ({problem}); removing it and "
          f"compiling again (--no-cache compiles without reading the cache)", file=sys.stderr)
    os.unlink(path)
    return False


def copy(source, target):
    """Copies `source` to `target` through a partial file beside it, so that no reader sees half
    a file; the copy gets the mode the umask gives a new file."""
    partial = f"{target}.{os.getpid()}.partial"
    try:
        shutil.copyfile(source, partial)
        os.replace(partial, target)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)


def new_file(folder):
    """An empty .pt2 file in `folder` (torch loads packages by that suffix) with the mode the
    umask gives a new file: tempfile's own 0600 would make the package unreadable to others."""
    handle, path = tempfile.mkstemp(dir=folder, suffix=".pt2")
    os.close(handle)
    mask = os.umask(0o022)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
    return path
