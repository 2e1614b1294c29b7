"""A PyTorch module's training step and forward pass as one AOTInductor package (.pt2) for
`launcher --model compiled` (models/compiled): the programs, the description the plugin reads,
and the files of the package. tools/compile_model.py is the command; docs/compiled.md says why
each step is done the way it is.

The package holds, under its archive folder:
  data/aotinductor/train/  the training program. Inputs: the parameters, the buffers, one tensor
      per parameter for its gradient, the batch's input and target; output: (loss,). It writes
      every gradient into the tensor given for it and every buffer the step updates (BatchNorm's
      running statistics) into the buffer. Its dropout draws from libtorch's CPU generator.
  data/aotinductor/eval/   the evaluation program: the module in eval mode. Inputs: the
      parameters, the buffers, the input; output: (scores,).
  dpl/description          what the plugin checks and lays out, one fact a line (DESCRIPTION).
  dpl/initial_values       the parameters' and buffers' values as the module was built, their
      raw bytes one after another in the description's order.
The batch is dynamic (any size from 1); everything else is fixed when the package is made.
"""
import os
import platform

import torch
import torch.nn as nn
import torch.nn.functional as F

FORMAT = 1
DESCRIPTION_RECORD = "dpl/description"
VALUES_RECORD = "dpl/initial_values"
DTYPES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16",
          torch.float64: "float64", torch.int64: "int64", torch.int32: "int32",
          torch.uint8: "uint8", torch.bool: "bool"}
PRECISIONS = {"fp32": None, "bf16": torch.bfloat16}

# What a compiler flag of Inductor's vector instruction set needs of the CPU, in the names of
# libtorch's CPU capabilities (torch.cpu.get_capabilities(), at::cpu::get_cpu_capabilities()).
FLAG_NEEDS = {"-mavx2": "avx2", "-mfma": "fma3", "-mf16c": "f16c", "-mavx512f": "avx512_f",
              "-mavx512dq": "avx512_dq", "-mavx512vl": "avx512_vl", "-mavx512bw": "avx512_bw",
              "-mavx512vnni": "avx512_vnni", "-mavx512bf16": "avx512_bf16",
              "-mamx-tile": "amx_tile", "-mamx-bf16": "amx_bf16", "-mamx-int8": "amx_int8",
              "-mamx-fp16": "amx_fp16"}
# The -march level the kernels are compiled for (Inductor's default, -march=native, would let the
# compiler use whatever this CPU has) and what that level needs.
MARCH_NEEDS = {"x86-64-v3": ["avx", "avx2", "bmi", "bmi2", "f16c", "fma3", "lzcnt"],
               "x86-64-v4": ["avx", "avx2", "bmi", "bmi2", "f16c", "fma3", "lzcnt", "avx512_f",
                             "avx512_bw", "avx512_cd", "avx512_dq", "avx512_vl"]}


class PackageError(Exception):
    pass


def use_torch_libraries_first():
    """Inductor links its programs with -L<Python's LIBDIR> before torch's own lib folder. Where
    that folder holds another libtorch (Debian's libtorch-dev puts 1.13 in /usr/lib/<triplet>),
    the linker takes it: the programs then miss torch 2's symbols, fail to load, and Inductor's
    check of the vector instruction sets fails too, so every kernel is compiled scalar. Putting
    torch's folder first links the torch that runs them. Inductor keeps the check's result in its
    cache folder (TORCHINDUCTOR_CACHE_DIR), so a folder where the check once failed keeps failing:
    the tool uses a folder of its own."""
    from torch._inductor import cpp_builder
    import sysconfig
    libdir = sysconfig.get_config_var("LIBDIR") or ""
    if not os.path.exists(os.path.join(libdir, "libtorch_cpu.so")):
        return
    original = cpp_builder._get_python_related_args
    torch_lib = os.path.join(os.path.dirname(torch.__file__), "lib")

    def torch_first():
        include_dirs, library_dirs = original()
        return include_dirs, [torch_lib] + library_dirs

    cpp_builder._get_python_related_args = torch_first


def cpu_instruction_set(requested):
    """(Inductor's vector instruction set, the -march level, what the CPU needs) for `requested`:
    'native' (the best this CPU has), 'avx512', 'avx2' or 'none' (scalar kernels). A lower one
    than native is made Inductor's only choice."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return ("native", None, [])
    from torch._inductor import cpu_vec_isa
    if requested != "native":
        chosen = {"avx512": cpu_vec_isa.VecAVX512, "avx2": cpu_vec_isa.VecAVX2}.get(requested)
        isas = [chosen()] if chosen is not None else []
        if isas and not isas[0]:
            raise PackageError(f"--cpu-isa {requested}: this CPU or compiler cannot build "
                               f"{requested} kernels")
        cpu_vec_isa.valid_vec_isa_list = lambda: isas
    isa = cpu_vec_isa.pick_vec_isa()
    if not isa:
        return ("none", "x86-64", [])
    march = "x86-64-v4" if str(isa).startswith("avx512") else "x86-64-v3"
    flags = [FLAG_NEEDS[flag] for flag in isa.build_arch_flags().split() if flag in FLAG_NEEDS]
    return (str(isa).replace(" ", "+"), march, sorted(set(MARCH_NEEDS[march]) | set(flags)))


def element_loss(loss, output, target):
    """The mean loss over every target element of (batch, target shape..., classes) scores, in
    float32: the SDK's FlatLoss (sdk/include/dpl/torch_model/loss.hpp), term for term."""
    classes = output.shape[-1]
    scores = output.reshape(-1, classes).float()
    labels = target.reshape(-1)
    if loss == "nll":
        return F.nll_loss(scores, labels)
    if loss == "cross_entropy":
        return F.nll_loss(F.log_softmax(scores, 1), labels)
    one_hot = F.one_hot(labels, classes).float()
    return F.mse_loss(scores, one_hot, reduction="sum") / (classes * labels.numel())


class WithLoss(nn.Module):
    """The module and its loss: what the training program differentiates."""

    def __init__(self, module, loss, autocast):
        super().__init__()
        self.module, self.loss, self.autocast = module, loss, autocast

    def forward(self, input, target):
        with torch.autocast(input.device.type, dtype=self.autocast,
                            enabled=self.autocast is not None):
            output = self.module(input)
        return (element_loss(self.loss, output, target),)


class Scores(nn.Module):
    """The module in eval mode, under the package's precision: what evaluation runs."""

    def __init__(self, module, autocast):
        super().__init__()
        self.module, self.autocast = module, autocast

    def forward(self, input):
        with torch.autocast(input.device.type, dtype=self.autocast,
                            enabled=self.autocast is not None):
            return self.module(input)


class Layout:
    """The package's parameters and buffers in their order: the module's named_parameters()
    (each tensor once, under its first name; its other names are aliases) and its persistent
    buffers."""

    def __init__(self, module):
        self.parameters = []  # (name, tensor, [alias names])
        first_name = {}
        for name, parameter in module.named_parameters(remove_duplicate=False):
            if id(parameter) in first_name:
                self.parameters[first_name[id(parameter)]][2].append(name)
                continue
            if not parameter.requires_grad:
                raise PackageError(f"parameter {name} does not require grad: the compiled step "
                                   "trains every parameter; make frozen tensors buffers")
            if not parameter.is_contiguous():
                # The plugin lays every parameter out densely in row-major order; a program
                # compiled for other strides would read those values in another order.
                raise PackageError(f"parameter {name} is not contiguous: the plugin lays "
                                   "parameters out densely; make it "
                                   "nn.Parameter(tensor.contiguous())")
            first_name[id(parameter)] = len(self.parameters)
            self.parameters.append((name, parameter, []))
        transient = set()
        for prefix, owner in module.named_modules():
            transient |= {f"{prefix}.{name}" if prefix else name
                          for name in owner._non_persistent_buffers_set}
        self.buffers = [(name, buffer) for name, buffer in module.named_buffers()
                        if name not in transient]
        for name, buffer in self.buffers:
            if not buffer.is_contiguous():
                raise PackageError(f"buffer {name} is not contiguous: the plugin lays buffers "
                                   "out densely; register tensor.contiguous()")
        self.updated = set()  # buffers the training step writes
        self._index = {id(t): ("parameter", i) for i, (_, t, _) in enumerate(self.parameters)}
        self._index.update({id(t): ("buffer", i) for i, (_, t) in enumerate(self.buffers)})

    def slot(self, tensor):
        """("parameter" | "buffer", index) of one of the module's tensors, or None."""
        return self._index.get(id(tensor))


def batch_dimension():
    """The batch axis every program takes at any size from 1."""
    return torch.export.Dim("batch", min=1)


def exported(module, example):
    """torch.export (non-strict: the module's Python runs as written, on fake tensors) with the
    batch axis of every example tensor dynamic."""
    batch = batch_dimension()
    return torch.export.export(module, example, dynamic_shapes=tuple({0: batch} for _ in example),
                               strict=False)


def without_unread_state(program, root):
    """`program` without the parameters and buffers its graph never reads: the other names of a
    tied weight (the graph reads one of them). A parameter that is not such a name and that no
    node reads would get no gradient: refused."""
    from torch.export.graph_signature import InputKind
    graph = program.graph_module.graph
    unread = {node.name for node in graph.nodes if node.op == "placeholder" and not node.users}
    kept = []
    for spec in program.graph_signature.input_specs:
        if spec.arg.name not in unread or spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER):
            kept.append(spec)
            continue
        if spec.kind == InputKind.PARAMETER:
            name = spec.target.split(".", 1)[1]
            read = {id(root.get_parameter(s.target)) for s in program.graph_signature.input_specs
                    if s.kind == InputKind.PARAMETER and s.arg.name not in unread}
            if id(root.get_parameter(spec.target)) not in read:
                raise PackageError(f"parameter {name} is not used by forward, so it has no "
                                   "gradient; remove it or use it")
        program.state_dict.pop(spec.target, None)
    for node in list(graph.nodes):
        if node.name in unread:
            graph.erase_node(node)
    program.graph_module.recompile()
    program.graph_signature.input_specs[:] = kept
    return program


def joint_program(wrapper, program):
    """The forward pass, the loss and the backward pass as one graph (torch.export's
    forward-backward export) of `program`, `exported(wrapper, example)`, whose outputs are the
    updated buffers, the loss and a gradient for every parameter. No decompositions: the core
    ATen table turns the CPU flash attention's forward into its math form but keeps the flash
    backward, fed the softmax where it expects the log-sum-exp, and every gradient before the
    attention comes out wrong (docs/compiled.md)."""
    from torch.export.exported_program import _decompose_exported_program
    from torch.export.experimental import _copy_graph_module_and_signature, _remove_detach_pass
    program = without_unread_state(program, wrapper)
    program = _decompose_exported_program(program, cia_to_decomp={}, python_decomp_table={},
                                          joint_loss_index=0, decompose_custom_triton_ops=False)
    graph_module, signature = _copy_graph_module_and_signature(program)
    _remove_detach_pass(graph_module, signature)
    return program._update(graph_module, signature)


class CallingConvention(nn.Module):
    """An exported graph called with the package's inputs: the parameters, the buffers, in
    training the gradients' tensors, then the batch. What the graph returns for a buffer or a
    gradient is copied into its tensor (Inductor writes it there, mostly without the copy); the
    rest is the program's output."""

    def __init__(self, program, root, layout, training):
        super().__init__()
        from torch.export.graph_signature import InputKind, OutputKind
        self.graph = program.graph_module
        self.counts = (len(layout.parameters), len(layout.buffers), training)
        self.sources, constants = [], []
        for spec in program.graph_signature.input_specs:
            if spec.kind == InputKind.USER_INPUT:
                self.sources.append(("batch", len([s for s in self.sources if s[0] == "batch"])))
                continue
            tensor = (root.get_parameter(spec.target) if spec.kind == InputKind.PARAMETER
                      else program.constants.get(spec.target))
            if tensor is None:
                tensor = root.get_buffer(spec.target)
            slot = layout.slot(tensor)
            if slot is None:  # a constant or a non-persistent buffer: part of the program
                self.register_buffer(f"constant_{len(constants)}", tensor.detach().clone(),
                                     persistent=False)
                slot = ("constant", len(constants))
                constants.append(tensor)
            self.sources.append(slot)
        self.results = []
        for spec in program.graph_signature.output_specs:
            if spec.kind == OutputKind.BUFFER_MUTATION:
                slot = layout.slot(root.get_buffer(spec.target))
                if slot is None:
                    raise PackageError(f"forward updates the non-persistent buffer "
                                       f"{spec.target.split('.', 1)[1]}, which the package "
                                       "cannot keep between steps; make it persistent")
                layout.updated.add(slot[1])
                self.results.append(slot)
            elif spec.kind == OutputKind.GRADIENT_TO_PARAMETER:
                self.results.append(("gradient", layout.slot(root.get_parameter(spec.target))[1]))
            elif spec.kind in (OutputKind.LOSS_OUTPUT, OutputKind.USER_OUTPUT):
                self.results.append(("output", 0))
            elif spec.kind == OutputKind.USER_INPUT_MUTATION:
                raise PackageError("forward changes its input in place, which the package "
                                   "cannot do; compute a new tensor (x = x * 2, not x.mul_(2))")
            else:
                raise PackageError(f"forward {spec.kind.name.lower().replace('_', ' ')} "
                                   f"({spec.target}): the package cannot do that")

    def forward(self, *flat):
        parameter_count, buffer_count, training = self.counts
        parameters = flat[:parameter_count]
        buffers = flat[parameter_count:parameter_count + buffer_count]
        rest = flat[parameter_count + buffer_count:]
        gradients, batch = ((rest[:parameter_count], rest[parameter_count:]) if training
                            else ((), rest))
        pick = {"parameter": parameters, "buffer": buffers, "batch": batch}
        arguments = [pick[kind][index] if kind in pick else getattr(self, f"constant_{index}")
                     for kind, index in self.sources]
        outputs = []
        for (kind, index), value in zip(self.results, self.graph(*arguments)):
            if kind == "buffer":
                buffers[index].copy_(value)
            elif kind == "gradient":
                gradients[index].copy_(value)
            else:
                outputs.append(value)
        return tuple(outputs)


def flat_inputs(layout, training, batch):
    """Example inputs of a program: copies of the module's tensors (export reads them only),
    zeroed gradient tensors in training, then the batch."""
    values = [t.detach().clone() for _, t, _ in layout.parameters]
    values += [t.detach().clone() for _, t in layout.buffers]
    if training:
        values += [torch.zeros_like(t) for _, t, _ in layout.parameters]
    return tuple(values) + tuple(batch)


def flat_program(convention, inputs, batch_size):
    """The convention exported on its own: every tensor an input, the batch axis dynamic."""
    batch = batch_dimension()
    shapes = tuple({0: batch} if i >= len(inputs) - batch_size else None
                   for i in range(len(inputs)))
    return torch.export.export(convention, inputs, dynamic_shapes=(shapes,), strict=False)


def shape_text(shape):
    return "[" + ",".join(str(int(extent)) for extent in shape) + "]"


def description(facts, layout):
    """The package's description: `key value...` lines, then a line per parameter (name, dtype,
    shape, aliases...) and per buffer (name, dtype, shape, "updated" or "kept")."""
    lines = [f"format {FORMAT}"] + [f"{key} {value}" for key, value in facts]
    for name, parameter, aliases in layout.parameters:
        lines.append(" ".join(["parameter", name, DTYPES[parameter.dtype],
                               shape_text(parameter.shape)] + aliases))
    for index, (name, buffer) in enumerate(layout.buffers):
        lines.append(" ".join(["buffer", name, DTYPES[buffer.dtype], shape_text(buffer.shape),
                               "updated" if index in layout.updated else "kept"]))
    return "\n".join(lines) + "\n"


def initial_values(layout):
    """The parameters' and buffers' bytes in the description's order (little-endian, as the
    machines dpl runs on)."""
    tensors = [t for _, t, _ in layout.parameters] + [t for _, t in layout.buffers]
    return b"".join(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                    for t in tensors)


def compile_programs(programs, inductor_options):
    """{name: AOTInductor's files} of {name: (exported program, example inputs)}."""
    import torch._inductor
    files = {}
    for name, (program, inputs) in programs.items():
        options = dict(inductor_options, **{"aot_inductor.package": True})
        files[name] = torch._inductor.aot_compile(program.module(), inputs, options=options)
    return files


def write_package(path, files, text, values):
    """One .pt2 archive: the programs, the description and the initial values."""
    from torch.export.pt2_archive._package import PT2ArchiveWriter, _package_aoti_files
    from torch.serialization import DEFAULT_PROTOCOL
    with PT2ArchiveWriter(path) as writer:
        _package_aoti_files(writer, files, pickle_protocol=DEFAULT_PROTOCOL)
        writer.write_string(DESCRIPTION_RECORD, text)
        writer.write_bytes(VALUES_RECORD, values)


def read_package(path):
    """(description lines as lists of words, {name: tensor} of the initial values) of a package,
    for Python code that looks into one (the tests)."""
    from torch.export.pt2_archive._package import PT2ArchiveReader
    with PT2ArchiveReader(path) as reader:
        text = reader.read_string(DESCRIPTION_RECORD)
        values = reader.read_bytes(VALUES_RECORD)
    lines = [line.split() for line in text.splitlines() if line.strip()]
    dtypes = {name: dtype for dtype, name in DTYPES.items()}
    tensors, offset = {}, 0
    for words in lines:
        if words[0] not in ("parameter", "buffer"):
            continue
        shape = [int(e) for e in words[3].strip("[]").split(",") if e]
        dtype = dtypes[words[2]]
        count = int(torch.Size(shape).numel()) * torch.empty((), dtype=dtype).element_size()
        raw = torch.frombuffer(bytearray(values[offset:offset + count]), dtype=torch.uint8)
        tensors[words[1]] = raw.view(dtype).reshape(shape) if count else torch.empty(shape,
                                                                                    dtype=dtype)
        offset += count
    return lines, tensors


def facts_of(lines):
    """{key: [words]} of a description's `key value...` lines."""
    return {words[0]: words[1:] for words in lines if words[0] not in ("parameter", "buffer")}
