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
$DPL_COMPILE_CACHE or ~/.cache/dpl/compiled) keyed by the module's source file, the arguments,
the torch version and the instruction set: making the same package again copies it from there.
A module torch.export cannot take is refused with the reason and the line of its code.
"""
import argparse
import copy
import hashlib
import inspect
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import traceback

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

import compiled_package as package  # noqa: E402
import export_model  # noqa: E402
from recipe_convnet import INPUT_SHAPE as RECIPE_INPUT_SHAPE  # noqa: E402


CHECK_BATCH = 8  # samples of the package's check against the module's eager step


class CompileError(Exception):
    pass


def module_source(spec, module):
    """The file of the module's code: the FILE.py of --module, or where its class lives."""
    if spec and spec.rpartition(":")[0].endswith(".py"):
        return os.path.abspath(spec.rpartition(":")[0])
    if not spec:
        return os.path.join(HERE, "recipe_convnet.py")
    try:
        return os.path.abspath(inspect.getsourcefile(type(module)))
    except TypeError:
        return None


def refusal(error, source, what):
    """`what` failed with `error`: the reason, and the innermost line of the module's own code
    on the way (in the traceback, or named in the message)."""
    reason = next((line.strip() for line in str(error).splitlines() if line.strip()),
                  type(error).__name__)
    frames, seen = [], error
    while seen is not None:
        frames = traceback.extract_tb(seen.__traceback__) + frames
        seen = seen.__cause__ or seen.__context__
    line = None
    for frame in frames:
        if source and os.path.abspath(frame.filename) == source:
            line = f"{frame.filename}:{frame.lineno}: {frame.line}"
    if line is None and source:
        for text in str(error).splitlines():
            if source in text or os.path.basename(source) in text:
                line = text.strip()
    return CompileError(f"{what}: {type(error).__name__}: {reason}" +
                        (f"\n  at {line}" if line else
                         "\n  (no line of the module's own code in the traceback)"))


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


def probe(module, args, source):
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
        raise refusal(error, source, f"forward of a {tuple(inputs.shape)} batch failed")
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
    loss = args.loss
    if loss == "auto":
        sums = output.double().exp().sum(-1)
        loss = "nll" if torch.allclose(sums, torch.ones_like(sums), atol=1e-3) else "cross_entropy"
    return shape, output.shape[-1], target_shape, loss


def describe_value(value):
    if isinstance(value, torch.Tensor):
        return f"a tensor of shape {tuple(value.shape)}"
    return f"a {type(value).__name__}"


def cache_key(args, source, isa):
    """What a package depends on: this tool, the module's code and arguments, torch, the device,
    the instruction set and the precision."""
    digest = hashlib.sha256()
    for tool in ("compile_model.py", "compiled_package.py", "export_model.py"):
        with open(os.path.join(HERE, tool), "rb") as code:
            digest.update(code.read())
    if source:
        with open(source, "rb") as code:
            digest.update(code.read())
    arguments = {key: getattr(args, key) for key in ("module", "kwargs", "input_shape", "token_ids",
                                                      "loss", "precision", "device", "batch",
                                                      "seed")}
    if arguments["kwargs"]:
        arguments["kwargs"] = json.loads(arguments["kwargs"])
    if source and arguments["module"]:  # the file's contents count, not where it lies
        arguments["module"] = arguments["module"].rpartition(":")[2]
    arguments.update(torch=torch.__version__, isa=isa, format=package.FORMAT)
    digest.update(json.dumps(arguments, sort_keys=True).encode())
    return digest.hexdigest()[:32]


def device_facts(args, isa):
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise CompileError("--device cuda: this torch sees no GPU (torch.cuda.is_available() "
                               "is False); make a CUDA package on a machine with one")
        major, minor = torch.cuda.get_device_capability()
        return [("device", "cuda"), ("cuda_capability", f"{major}.{minor}")]
    name, march, needs = isa
    return [("device", "cpu"), ("cpu_isa", name), ("cpu_march", march or "native"),
            ("cpu_needs", " ".join(needs) if needs else "-")]


def programs(module, args, batch, loss, source):
    """{"train": ..., "eval": ...}: each an exported program and its example inputs, and the
    layout they share."""
    layout = package.Layout(module)
    autocast = package.PRECISIONS[args.precision]
    wrapper = package.WithLoss(module, loss, autocast)
    try:
        module.train()
        joint = package.joint_program(wrapper, batch)
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
    except package.PackageError as error:
        raise CompileError(str(error))
    except Exception as error:  # torch.export's refusals of the module's code
        raise refusal(error, source, f"torch.export cannot take {type(module).__name__}")
    finally:
        module.train()
    return {"train": (train_program, train_inputs), "eval": (eval_program, eval_inputs)}, layout


def inductor_options(args, isa):
    if args.device != "cpu" or isa[1] is None:
        return {}
    return {"cpp.march": isa[1]}


def self_check(path, module, layout, batch, loss, args):
    """Runs the package's training program once in Python and compares it with the module's own
    step (eager autograd) on a batch of CHECK_BATCH samples (BatchNorm's statistics of two samples
    amplify rounding); a warning where they differ more than the precision allows (dropout draws
    other numbers in the two)."""
    from torch._inductor.package import load_package
    train = load_package(path, "train")
    inputs = list(package.flat_inputs(layout, True, batch))
    (compiled_loss,) = train(*inputs)
    reference = copy.deepcopy(module).train()
    eager = package.WithLoss(reference, loss, package.PRECISIONS[args.precision])
    (eager_loss,) = eager(*batch)
    eager_loss.backward()
    count = len(layout.parameters)
    names = [name for name, _ in reference.named_parameters()]
    worst = 0.0
    for gradient, name in zip(inputs[count + len(layout.buffers):][:count], names):
        expected = reference.get_parameter(name).grad
        scale = expected.abs().max().item() or 1.0
        worst = max(worst, (gradient - expected).abs().max().item() / scale)
    tolerance = 1e-4 if args.precision == "fp32" else 5e-2
    loss_difference = abs(compiled_loss.item() - eager_loss.item()) / max(abs(eager_loss.item()),
                                                                          1e-12)
    text = (f"checked: loss {compiled_loss.item():.6g} (eager {eager_loss.item():.6g}), gradients "
            f"within {worst:.2g} of the largest")
    if max(worst, loss_difference) > tolerance:
        text = (f"warning: the compiled step differs from the eager one beyond {tolerance:g} "
                f"(expected where forward draws random numbers, e.g. dropout); {text}")
    return text


def compile_package(args, module, source, shape, classes, target_shape, loss, isa):
    """Writes the package to `args.output`: export, compile, write, check."""
    batch = example_batch(args, shape, classes, target_shape, args.device)
    values = package.initial_values(package.Layout(module))  # before anything runs the module
    started = time.monotonic()
    found, layout = programs(module, args, batch, loss, source)
    exported_in = time.monotonic() - started
    facts = [("torch", torch.__version__)] + device_facts(args, isa) + [
        ("precision", args.precision), ("loss", loss),
        ("input", package.DTYPES[batch[0].dtype] + " " + package.shape_text(shape)),
        ("target", "int64 " + package.shape_text(target_shape)), ("classes", classes),
        ("module", f"{args.module or 'recipe_convnet.py:ConvNet'} {args.kwargs or '{}'}")]
    files = package.compile_programs(found, inductor_options(args, isa))
    directory = os.path.dirname(os.path.abspath(args.output))
    with tempfile.NamedTemporaryFile(dir=directory, suffix=".pt2", delete=False) as partial:
        pass
    try:
        package.write_package(partial.name, files, package.description(facts, layout), values)
        check = example_batch(args, shape, classes, target_shape, args.device, CHECK_BATCH)
        checked = self_check(partial.name, module, layout, check, loss, args)
        os.replace(partial.name, args.output)
    finally:
        if os.path.exists(partial.name):
            os.unlink(partial.name)
    compiled_in = time.monotonic() - started - exported_in
    return layout, f"exported in {exported_in:.0f} s, compiled in {compiled_in:.0f} s; {checked}"


def summary(args, module, layout, shape, classes, loss, isa):
    elements = sum(t.numel() for _, t, _ in layout.parameters)
    where = args.device if args.device == "cuda" else f"cpu ({isa[0]})"
    return (f"wrote {args.output}: {type(module).__name__}'s training and evaluation programs, "
            f"{len(layout.parameters)} parameter tensors ({elements} elements), "
            f"{len(layout.buffers)} buffers, for {where}, {args.precision}; input "
            f"{tuple(shape)} -> {classes} classes, loss {loss}")


def run(args):
    export_model.check_output(args.output)  # before minutes of compiling
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(args.cache, "inductor"))
    # torch.export logs the graph around a refused line at length; the refusal names the line.
    for name in ("torch.fx.experimental.symbolic_shapes", "torch.utils.cpp_extension"):
        logging.getLogger(name).setLevel(logging.ERROR)
    package.use_torch_libraries_first()
    try:
        isa = package.cpu_instruction_set(args.cpu_isa) if args.device == "cpu" else ("-", None, [])
        module = export_model.build(args, factories=True)
    except (export_model.ExportError, package.PackageError) as error:
        raise CompileError(str(error))
    module.to(args.device)
    source = module_source(args.module, module)
    shape, classes, target_shape, loss = probe(module, args, source)
    args.loss = loss
    cached = os.path.join(args.cache, cache_key(args, source, isa) + ".pt2")
    if os.path.exists(cached) and not args.no_cache:
        shutil.copyfile(cached, args.output)
        print(summary(args, module, package.Layout(module), shape, classes, loss, isa) +
              f"; from the cache ({cached})")
    else:
        layout, timing = compile_package(args, module, source, shape, classes, target_shape,
                                         loss, isa)
        os.makedirs(args.cache, exist_ok=True)
        shutil.copyfile(args.output, cached + ".partial")
        os.replace(cached + ".partial", cached)
        print(summary(args, module, layout, shape, classes, loss, isa) + f"; {timing}")
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
