#!/usr/bin/env python3
"""Writes a PyTorch module as a TorchScript file for `launcher --model torchscript`.

    tools/export_model.py convnet.pt                       # the recipe's ConvNet, scripted
    tools/export_model.py net.pt --module mypkg.nets:ResNet --kwargs '{"width": 32}'
    tools/export_model.py net.pt --module ./nets.py:ResNet --trace --input-shape 3,32,32
    tools/export_model.py gpt.pt --module tools/gpt_model.py:GPT --kwargs '{"vocab": 256}' \
        --input-shape 256 --token-ids 256     # a language model: int64 token ids in, logits out
    launcher --model torchscript --model-options file=net.pt ...

The module is built with torch.manual_seed(--seed) first (its initial parameters are the ones
the launcher starts from) and saved with torch.jit.save of torch.jit.script (the default), or of
torch.jit.trace on a random example batch of --input-shape with --trace (float32 normal values,
or int64 ids below N with --token-ids N). Tracing records the train/eval mode as a constant: a
traced BatchNorm or dropout keeps the training behaviour it was traced with (the plugin's log
says so); script modules with such layers.

The file is loaded back and run once; the summary says which --model-options loss fits the
output (nll for log-probabilities, cross_entropy for logits). Runs under dpl's Python
environment (tools/dpl_python.py).
"""
import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import re
import sys
import tempfile
import traceback
import warnings

import dpl_python

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

from recipe_convnet import INPUT_SHAPE as RECIPE_INPUT_SHAPE, ConvNet  # noqa: E402

MODE_DEPENDENT = (nn.modules.batchnorm._BatchNorm, nn.modules.dropout._DropoutNd,
                  nn.modules.instancenorm._InstanceNorm)


class ExportError(Exception):
    pass


# torch 2.11 and later deprecate TorchScript (torch.export replaces it), and torch.jit.script,
# trace, save and load each warn so; they still work, and the plugin trains what they write.
TORCHSCRIPT_DEPRECATED = re.compile(r"`torch\.jit\.\w+` is deprecated")


@contextlib.contextmanager
def deprecation_said_once():
    """Runs the block with TorchScript's deprecation warnings held back, then says it once;
    other warnings pass as they would."""
    with warnings.catch_warnings(record=True) as caught:
        yield
    deprecated = False
    for warning in caught:
        if TORCHSCRIPT_DEPRECATED.search(str(warning.message)):
            deprecated = True
        else:
            warnings.showwarning(warning.message, warning.category, warning.filename,
                                 warning.lineno)
    if deprecated:
        print(f"note: torch {torch.__version__} deprecates TorchScript in favour of torch.export; "
              "it still scripts, saves and loads it, and --model torchscript trains this file",
              file=sys.stderr)


def load_class(spec, factories=False):
    """`package.module:Class` (importable from the working directory or PYTHONPATH) or
    `path/to/file.py:Class`; with `factories`, also a function that returns a module
    (torchvision.models:resnet18)."""
    module_name, separator, class_name = spec.rpartition(":")
    if not separator or not module_name or not class_name:
        raise ExportError(f"--module {spec!r} is not MODULE:CLASS (e.g. mypkg.nets:ResNet)")
    if module_name.endswith(".py"):
        if not os.path.isfile(module_name):
            raise ExportError(f"--module {spec!r}: no file {module_name}")
        # As `python FILE.py` would: the file's folder first on the path, so that it imports the
        # files beside it (and stays there for imports its classes make later).
        folder = os.path.dirname(os.path.abspath(module_name))
        if sys.path[0] != folder:
            sys.path.insert(0, folder)
        loaded = importlib.util.spec_from_file_location(
            os.path.splitext(os.path.basename(module_name))[0], module_name)
        module = importlib.util.module_from_spec(loaded)
        try:
            loaded.loader.exec_module(module)
        except Exception as error:  # the file's own code: a syntax error, a missing import, ...
            raise ExportError(f"--module {spec!r}: cannot load {module_name}: "
                              f"{failure_line(error)}")
    else:
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except Exception as error:
            raise ExportError(f"--module {spec!r}: cannot import {module_name}: "
                              f"{failure_line(error)}")
    cls = getattr(module, class_name, None)
    is_module_class = isinstance(cls, type) and issubclass(cls, nn.Module)
    if cls is None or not (is_module_class or (factories and callable(cls))):
        raise ExportError(f"--module {spec!r}: {module_name} has no torch.nn.Module class "
                          f"{class_name}")
    return cls


def failure_line(error):
    """`error` in one line with where it happened: the file and line of a syntax error, else the
    innermost frame of the traceback outside this tool, importlib and torch."""
    if isinstance(error, SyntaxError):
        return f"{error.filename}:{error.lineno}: {type(error).__name__}: {error.msg}"
    reason = str(error).strip().splitlines()
    text = f"{type(error).__name__}: {reason[0]}" if reason else type(error).__name__
    skipped = (os.path.abspath(__file__), os.path.dirname(importlib.__file__),
               os.path.dirname(torch.__file__))
    frames = [frame for frame in traceback.extract_tb(error.__traceback__)
              if not frame.filename.startswith("<") and
              not os.path.abspath(frame.filename).startswith(skipped)]
    if not frames:
        return text
    return f"{text} (at {frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line})"


def parse_shape(text):
    try:
        shape = tuple(int(extent) for extent in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(extent < 1 for extent in shape):
        raise ExportError(f"--input-shape {text!r} is not a comma-separated list of positive "
                          "extents, e.g. 1,28,28")
    return shape


def build(args, factories=False):
    kwargs = {}
    if args.kwargs:
        try:
            kwargs = json.loads(args.kwargs)
        except json.JSONDecodeError as error:
            raise ExportError(f"--kwargs is not JSON: {error}")
        if not isinstance(kwargs, dict):
            raise ExportError("--kwargs must be a JSON object of constructor arguments")
    cls = load_class(args.module, factories) if args.module else ConvNet
    torch.manual_seed(args.seed)
    try:
        module = cls(**kwargs)
    except TypeError as error:
        raise ExportError(f"{cls.__name__}(**{kwargs}) failed: {error}")
    except Exception as error:  # the module's own constructor
        raise ExportError(f"{cls.__name__}(**{kwargs}) failed: {failure_line(error)}")
    if not isinstance(module, nn.Module):
        raise ExportError(f"--module {args.module!r} returned a {type(module).__name__}, not a "
                          "torch.nn.Module")
    return module


def example_batch(args, input_shape):
    generator = torch.Generator().manual_seed(args.seed)
    if args.token_ids is not None:
        return torch.randint(0, args.token_ids, (args.batch,) + input_shape, generator=generator)
    return torch.randn((args.batch,) + input_shape, generator=generator)


def check_output(path):
    """Refuses, before any work, an output path the file could not be written to. A file is
    created beside it and removed: permissions do not tell (root passes os.access on /sys, and
    a read-only file system says no only when written)."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ExportError(f"cannot write {path}: the folder {folder} does not exist")
    if os.path.exists(path) and not os.path.isfile(path):
        raise ExportError(f"cannot write {path}: it exists and is not a regular file")
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-"):
            pass
    except OSError as error:
        raise ExportError(f"cannot write {path}: cannot create a file in {folder} "
                          f"({error.strerror or error})")


def check_forward(module, example):
    """Refuses, before the file is written, a forward that does not return one tensor of class
    scores (a tuple, a dict): the plugin takes one tensor."""
    module.eval()
    try:
        with torch.no_grad():
            output = module(example)
    finally:
        module.train()
    if not isinstance(output, torch.Tensor):
        raise ExportError(f"forward must return one tensor of class scores (batch, ..., classes); "
                          f"{type(module).__name__} returned a {type(output).__name__}")


def export(args):
    with deprecation_said_once():
        summary, options = export_and_check(args)
    print(summary)
    print(f"train it with: launcher --model torchscript --model-options {options}")


def export_and_check(args):
    """Writes args.output and loads it back: (what it wrote, the plugin's --model-options)."""
    module = build(args)
    if args.input_shape:
        input_shape = parse_shape(args.input_shape)
    elif not args.module:
        input_shape = RECIPE_INPUT_SHAPE
    else:
        input_shape = None
    if args.trace and input_shape is None:
        raise ExportError("--trace needs --input-shape, one sample's shape (e.g. 1,28,28)")
    if args.token_ids is not None and not args.input_shape:
        raise ExportError("--token-ids needs --input-shape, the tokens of one sample (e.g. 256)")
    example = example_batch(args, input_shape) if input_shape else None
    if example is not None:
        check_forward(module, example)
    module.train()
    if args.trace:
        fixed = sorted({type(layer).__name__ for layer in module.modules()
                        if isinstance(layer, MODE_DEPENDENT)})
        if fixed:
            print(f"note: tracing records the train mode of {', '.join(fixed)}: they will train "
                  "and evaluate as in training; script the module to let them follow the mode",
                  file=sys.stderr)
        with torch.no_grad():
            compiled = torch.jit.trace(module, example, check_trace=False)
    else:
        try:
            compiled = torch.jit.script(module)
        except Exception as error:  # TorchScript reports unsupported Python in many types
            raise ExportError(f"torch.jit.script({type(module).__name__}) failed (try --trace): "
                              f"{error}")
    torch.jit.save(compiled, args.output)

    loaded = torch.jit.load(args.output)
    parameters = list(loaded.parameters())
    elements = sum(parameter.numel() for parameter in parameters)
    buffers = list(loaded.buffers())
    summary = (f"wrote {args.output}: {'traced' if args.trace else 'scripted'} "
               f"{type(module).__name__}, {len(parameters)} parameter tensors ({elements} "
               f"elements), {len(buffers)} buffers")
    options = f"file={args.output}"
    if example is not None:
        loaded.eval()
        with torch.no_grad():
            output = loaded(example)
        summary += f"; input {input_shape} -> output {tuple(output.shape[1:])}"
        # Class scores on the last axis: (batch, classes), or (batch, T, classes) for tokens.
        if output.dim() >= 2 and not torch.allclose(output.double().exp().sum(-1),
                                                    torch.ones(output.shape[:-1],
                                                               dtype=torch.float64),
                                                    atol=1e-3):
            options += ",loss=cross_entropy"
    else:
        summary += ("; forward not run (no --input-shape): if it returns logits, not "
                    "log-probabilities, add ,loss=cross_entropy to the --model-options below")
    return summary, options


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="the TorchScript file to write")
    parser.add_argument("--module", help="MODULE:CLASS or FILE.py:CLASS of the torch.nn.Module "
                                         "to export (default: the recipe's ConvNet)")
    parser.add_argument("--kwargs", help="constructor arguments as a JSON object")
    parser.add_argument("--trace", action="store_true",
                        help="torch.jit.trace instead of torch.jit.script")
    parser.add_argument("--input-shape", help="one sample's shape, e.g. 1,28,28 (needed by "
                                              "--trace; default for the ConvNet)")
    parser.add_argument("--token-ids", type=int, metavar="N",
                        help="the example batch holds int64 token ids below N (language models), "
                             "not float32 values")
    parser.add_argument("--batch", type=int, default=2, help="example batch size (default 2)")
    parser.add_argument("--seed", type=int, default=0,
                        help="torch.manual_seed before building the module (default 0)")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be >= 1")
    if args.token_ids is not None and args.token_ids < 1:
        parser.error("--token-ids must be >= 1")
    try:
        check_output(args.output)
        export(args)
    except ExportError as error:
        print(f"export_model.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
