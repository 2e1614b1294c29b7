#!/usr/bin/env python3
"""Compiles a PyTorch module's training step ahead of time for `launcher --model compiled`.

    tools/compile_model.py convnet.pt2                     # the recipe's ConvNet, MNIST's shape
    tools/compile_model.py gpt.pt2 --module tools/gpt_model.py:GPT \\
        --kwargs '{"vocab": 256, "block": 256}' --input-shape 256 --token-ids 256
    tools/compile_model.py resnet18.pt2 --module torchvision.models:resnet18 \\
        --kwargs '{"num_classes": 10}' --input-shape 3,32,32
    launcher --model compiled --model-options file=gpt.pt2 ...

The module is built as tools/export_model.py builds it (torch.manual_seed(--seed), then the class
or function with --kwargs; its initial values go into the package), exported with torch.export
on an example batch of --input-shape (float32 values, or int64 ids below N with --token-ids N)
whose batch axis is dynamic, its forward, loss and backward made one graph, and compiled by
AOTInductor into ONE .pt2 file holding the training program and the evaluation program
(tools/compiled_package.py). Forward returns class scores for every target element: (batch,
classes) for one label per sample, (batch, T, classes) for token ids with a label per position.
--loss says what they are (nll: log-probabilities, cross_entropy: logits, mse; by default the
output decides, as for tools/export_model.py).

A package is made for one torch, one device, one CPU instruction set and one precision; the
plugin refuses it elsewhere. Packages are kept in a cache (--cache, default
$DPL_COMPILE_CACHE or ~/.cache/dpl/compiled; --no-cache compiles anyway) keyed by the module's
own source files (the file --module names, the files of its classes, the files they import from
outside installed packages: tools/compile_cache.py), the arguments, the torch version and the
instruction set: making the same package again copies it from there, after checking that the
cached copy is whole. A module torch.export or AOTInductor cannot take is refused with the
reason and the line of its code.
"""
import argparse
import copy
import logging
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dpl_python  # noqa: E402

dpl_python.use_dpl_python()  # first: torch below is the environment's


def default_cache():
    if os.environ.get("DPL_COMPILE_CACHE"):
        return os.environ["DPL_COMPILE_CACHE"]
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "dpl", "compiled")


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output", help="the package to write (.pt2)")
    parser.add_argument("--module", help="MODULE:CLASS or FILE.py:CLASS of the torch.nn.Module, "
                                         "or a function returning one (default: the recipe's "
                                         "ConvNet)")
    parser.add_argument("--kwargs", help="constructor arguments as a JSON object")
    parser.add_argument("--input-shape", help="one sample's shape, e.g. 3,32,32 (default for the "
                                              "ConvNet: 1,28,28)")
    parser.add_argument("--token-ids", type=int, metavar="N",
                        help="samples are int64 token ids below N with a label per position")
    parser.add_argument("--loss", choices=("auto", "nll", "cross_entropy", "mse"), default="auto",
                        help="what forward returns (default: nll where its rows' exp() sum to 1, "
                             "else cross_entropy)")
    parser.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                        help="the forward pass's precision (the job's --precision)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--cpu-isa", choices=("native", "avx512", "avx2", "none"),
                        default="native", help="the vector instructions of the CPU kernels "
                        "(default: the best this CPU has; a lower one runs on older CPUs)")
    parser.add_argument("--batch", type=int, default=2, help="example batch size (default 2; "
                        "the package takes any)")
    parser.add_argument("--seed", type=int, default=0,
                        help="torch.manual_seed before building the module (default 0)")
    parser.add_argument("--cache", default=default_cache(), help="the package cache (default "
                                                                "%(default)s)")
    parser.add_argument("--no-cache", action="store_true", help="compile even when cached")
    args = parser.parse_args(argv)
    if args.batch < 1:
        parser.error("--batch must be >= 1")
    if args.token_ids is not None and args.token_ids < 1:
        parser.error("--token-ids must be >= 1")
    if not args.output.endswith(".pt2"):
        parser.error(f"the package's name must end in .pt2, got {args.output}")
    return args


import torch  # noqa: E402
import torch.nn as nn  # noqa: E402

import compile_cache as cache  # noqa: E402
from compile_refusals import (CompileError, listen, refusal,  # noqa: E402
                              refuse_input_mutation, said_where_it_works)
import compiled_package as package  # noqa: E402
import export_model  # noqa: E402
from recipe_convnet import INPUT_SHAPE as RECIPE_INPUT_SHAPE  # noqa: E402


CHECK_BATCH = 8  # samples of the package's check against the module's eager step


def example_batch(args, shape, classes, target_shape, device, count=None):
    """`count` (default --batch) seeded samples of `shape` and targets below `classes`."""
    count = count or args.batch
    generator = torch.Generator().manual_seed(args.seed)
    if args.token_ids is not None:
        inputs = torch.randint(0, args.token_ids, (count,) + shape, generator=generator)
    else:
        inputs = torch.randn((count,) + shape, generator=generator)
    targets = torch.randint(0, classes, (count,) + target_shape, generator=generator)
    return inputs.to(device), targets.to(device)


def probe(module, args, files):
    """(sample shape, classes, target shape, loss) from one eval-mode forward of a batch."""
    if args.input_shape:
        shape = export_model.parse_shape(args.input_shape)
    elif not args.module:
        shape = RECIPE_INPUT_SHAPE
    else:
        raise CompileError("--input-shape is needed: one sample's shape, e.g. 3,32,32")
    inputs, _ = example_batch(args, shape, 1, (), args.device)
    module.eval()
    try:
        with torch.no_grad():
            output = module(inputs)
    except Exception as error:  # the module's own code
        raise refusal(error, files, f"forward of a {tuple(inputs.shape)} batch failed")
    finally:
        module.train()
    if not isinstance(output, torch.Tensor) or output.dim() < 2 or output.shape[0] != args.batch:
        raise CompileError(f"forward must return one tensor of class scores (batch, ..., "
                           f"classes); it returned {describe_value(output)}")
    target_shape = tuple(output.shape[1:-1])
    if args.token_ids is not None and target_shape != shape:
        raise CompileError(f"a language model's forward returns (batch, T, classes) for (batch, "
                           f"T) token ids; it returned {tuple(output.shape)} for "
                           f"{tuple(inputs.shape)}")
    # Log-probabilities: exp() of every row sums to 1 (the torchscript plugin's test, 1e-3).
    sums = output.double().exp().sum(-1)
    log_probabilities = torch.allclose(sums, torch.ones_like(sums), atol=1e-3)
    if args.loss == "nll" and not log_probabilities:
        raise CompileError(f"with --loss nll forward must return log-probabilities (end it with "
                           f"log_softmax), but on the example batch exp(output) sums to "
                           f"{sums.flatten()[0].item():.3g} over the classes, not 1; use --loss "
                           f"cross_entropy for a module that returns logits")
    loss = args.loss if args.loss != "auto" else "nll" if log_probabilities else "cross_entropy"
    return shape, output.shape[-1], target_shape, loss


def describe_value(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def device_facts(args, isa):
    if args.device == "cuda":
        major, minor = torch.cuda.get_device_capability()
        return [("device", "cuda"), ("cuda_capability", f"{major}.{minor}")]
    name, march, needs = isa
    return [("device", "cpu"), ("cpu_isa", name), ("cpu_march", march or "native"),
            ("cpu_needs", " ".join(needs) if needs else "-")]


def programs(module, args, batch, loss, files, clues):
    """{"train": ..., "eval": ...}: each an exported program and its example inputs, and the
    layout they share."""
    layout = package.Layout(module)
    try:
        with said_where_it_works():
            found = exported_programs(module, args, batch, loss, layout, files)
    except CompileError:
        raise
    except package.PackageError as error:
        raise CompileError(str(error))
    except Exception as error:  # torch.export's refusals of the module's code
        raise refusal(error, files, f"torch.export cannot take {type(module).__name__}", clues)
    finally:
        module.train()
    return found, layout


def exported_programs(module, args, batch, loss, layout, files):
    """The training program (forward, loss and backward: one graph) and the evaluation program
    (eval-mode forward), each flattened to the package's calling convention."""
    autocast = package.PRECISIONS[args.precision]
    wrapper = package.WithLoss(module, loss, autocast)
    module.train()
    exported = package.exported(wrapper, batch)
    refuse_input_mutation(exported, files)
    joint = package.joint_program(wrapper, exported)
    train = package.CallingConvention(joint, wrapper, layout, training=True)
    train_inputs = package.flat_inputs(layout, True, batch)
    train_program = package.flat_program(train, train_inputs, 2)
    module.eval()
    scores = package.Scores(module, autocast)
    evaluation = package.exported(scores, batch[:1])
    evaluate = package.CallingConvention(package.without_unread_state(evaluation, scores),
                                         scores, layout, training=False)
    eval_inputs = package.flat_inputs(layout, False, batch[:1])
    eval_program = package.flat_program(evaluate, eval_inputs, 1)
    return {"train": (train_program, train_inputs), "eval": (eval_program, eval_inputs)}


def draws_random_numbers(module, program):
    """Whether the training step draws random numbers: a dropout layer with p > 0, or an op of
    the program that draws them (one with a dropout probability only where it is not 0)."""
    if any(isinstance(layer, nn.modules.dropout._DropoutNd) and layer.p > 0
           for layer in module.modules()):
        return True
    for node in program.graph.nodes:
        if torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ()):
            continue
        names = [argument.name for argument in node.target._schema.arguments]
        probability = next((name for name in ("dropout_p", "p") if name in names), None)
        if probability is None:
            return True
        index = names.index(probability)
        value = node.args[index] if index < len(node.args) else node.kwargs.get(probability, 0)
        if value != 0:
            return True
    return False


def inductor_options(args, isa):
    if args.device != "cpu" or isa[1] is None:
        return {}
    return {"cpp.march": isa[1]}


def self_check(path, module, layout, batch, loss, args, random):
    """Runs the package's training program once in Python and compares it with the module's own
    step (eager autograd) on a batch of CHECK_BATCH samples (BatchNorm's statistics of two samples
    amplify rounding); a warning where they differ more than the precision allows. Gradients are
    compared to the largest gradient of all: a gradient that is 0 but for rounding (a bias before
    BatchNorm) has no scale of its own."""
    from torch._inductor.package import load_package
    train = load_package(path, "train")
    inputs = list(package.flat_inputs(layout, True, batch))
    (compiled_loss,) = train(*inputs)
    reference = copy.deepcopy(module).train()
    eager = package.WithLoss(reference, loss, package.PRECISIONS[args.precision])
    (eager_loss,) = eager(*batch)
    eager_loss.backward()
    count = len(layout.parameters)
    expected = [reference.get_parameter(name).grad for name, _ in reference.named_parameters()]
    expected = [torch.zeros_like(t) if g is None else g
                for g, (_, t, _) in zip(expected, layout.parameters)]
    scale = max(g.abs().max().item() for g in expected) or 1.0
    gradients = inputs[count + len(layout.buffers):][:count]
    worst = max((g - e).abs().max().item() for g, e in zip(gradients, expected)) / scale
    tolerance = 1e-4 if args.precision == "fp32" else 5e-2
    loss_difference = abs(compiled_loss.item() - eager_loss.item()) / max(abs(eager_loss.item()),
                                                                          1e-12)
    text = (f"checked: loss {compiled_loss.item():.6g} (eager {eager_loss.item():.6g}), gradients "
            f"within {worst:.2g} of the largest")
    if max(worst, loss_difference) > tolerance:
        why = ("expected: forward draws random numbers (dropout), and the package draws others "
               "than eager PyTorch" if random else "forward draws no random numbers")
        text = (f"warning: the compiled step differs from the eager one beyond {tolerance:g} "
                f"({why}); {text}")
    return text


def compile_package(args, module, files, clues, shapes, loss, isa):
    """Writes the package to `args.output`: export, compile, write, check. `shapes`: the
    sample's shape, the classes, the target's shape."""
    shape, classes, target_shape = shapes
    batch = example_batch(args, shape, classes, target_shape, args.device)
    values = package.initial_values(package.Layout(module))  # before anything runs the module
    started = time.monotonic()
    found, layout = programs(module, args, batch, loss, files, clues)
    exported_in = time.monotonic() - started
    facts = [("torch", torch.__version__)] + device_facts(args, isa) + [
        ("precision", args.precision), ("loss", loss),
        ("input", package.DTYPES[batch[0].dtype] + " " + package.shape_text(shape)),
        ("target", "int64 " + package.shape_text(target_shape)), ("classes", classes),
        ("module", f"{args.module or 'recipe_convnet.py:ConvNet'} {args.kwargs or '{}'}")]
    try:
        with said_where_it_works():
            compiled = package.compile_programs(found, inductor_options(args, isa))
    except Exception as error:  # what the export took and Inductor cannot (.item(), ...)
        raise refusal(error, files, f"AOTInductor cannot compile {type(module).__name__}", clues)
    partial = cache.new_file(os.path.dirname(os.path.abspath(args.output)))
    try:
        package.write_package(partial, compiled, package.description(facts, layout), values)
        check = example_batch(args, shape, classes, target_shape, args.device, CHECK_BATCH)
        random = draws_random_numbers(module, found["train"][0])
        checked = self_check(partial, module, layout, check, loss, args, random)
        os.replace(partial, args.output)
    finally:
        if os.path.exists(partial):
            os.unlink(partial)
    compiled_in = time.monotonic() - started - exported_in
    return f"exported in {exported_in:.0f} s, compiled in {compiled_in:.0f} s; {checked}"


def summary(path, name):
    """What the package at `path` holds, from its own description (a cached package too)."""
    lines, _ = package.read_package(path)
    facts = package.facts_of(lines)
    parameters = [words for words in lines if words[0] == "parameter"]
    elements = sum(math.prod(int(extent) for extent in words[3].strip("[]").split(",") if extent)
                   for words in parameters)
    buffers = sum(words[0] == "buffer" for words in lines)
    where = "cuda" if facts["device"] == ["cuda"] else f"cpu ({facts['cpu_isa'][0]})"
    return (f"wrote {path}: {name}'s training and evaluation programs, {len(parameters)} "
            f"parameter tensors ({elements} elements), {buffers} buffers, for {where}, "
            f"{facts['precision'][0]}; input {' '.join(facts['input'])} -> "
            f"{facts['classes'][0]} classes, loss {facts['loss'][0]}")


def keep(output, cached):
    """Copies the package into the cache; a cache that cannot be written costs a warning."""
    try:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        cache.copy(output, cached)
    except OSError as error:
        print(f"warning: cannot keep {output} in the cache: {error}", file=sys.stderr)


def built(args):
    """(the module on its device, its own source files, the instruction set)."""
    modules_before = set(sys.modules)
    try:
        isa = package.cpu_instruction_set(args.cpu_isa) if args.device == "cpu" else ("-", None, [])
        module = export_model.build(args, factories=True)
        module.to(args.device)
        package.Layout(module)  # its refusals (frozen or non-contiguous parameters) first
    except (export_model.ExportError, package.PackageError) as error:
        raise CompileError(str(error))
    return module, cache.own_files(args.module, module, modules_before), isa


def run(args):
    export_model.check_output(args.output)  # before minutes of compiling
    if args.device == "cuda" and not torch.cuda.is_available():
        raise CompileError("--device cuda: no CUDA device here (torch.cuda.is_available() is "
                           "False); make a CUDA package on a machine with an NVIDIA GPU")
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(args.cache, "inductor"))
    # torch.export logs the graph around a refused line at length, and Inductor's compiler
    # lookup that a CPU machine has no CUDA; the refusals name the line (listen, below).
    for name in ("torch.fx.experimental.symbolic_shapes", "torch.utils.cpp_extension"):
        logging.getLogger(name).setLevel(logging.ERROR)
    package.use_torch_libraries_first()
    # Built before the cache is looked at: the key holds the files of its classes.
    module, files, isa = built(args)
    clues = listen(files)
    shape, classes, target_shape, loss = probe(module, args, files)
    args.loss = loss
    cached = os.path.join(args.cache, cache.key(args, files, isa) + ".pt2")
    if not args.no_cache and cache.whole(cached):
        cache.copy(cached, args.output)
        done = f"from the cache ({cached}; --no-cache compiles it again)"
    else:
        done = compile_package(args, module, files, clues, (shape, classes, target_shape), loss,
                               isa)
        keep(args.output, cached)
    print(summary(args.output, type(module).__name__) + "; " + done)
    print(f"train it with: launcher --model compiled --model-options file={args.output} "
          f"--precision {args.precision}")


def main(argv=None):
    args = parse_arguments(sys.argv[1:] if argv is None else argv)
    try:
        run(args)
    except (CompileError, export_model.ExportError, package.PackageError) as error:
        print(f"compile_model.py: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
