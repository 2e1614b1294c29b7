"""tools/compile_model.py's refusals: what the module's code does that a package cannot hold,
reported as the reason and the innermost line of the module's own files (`files`, the sorted
list of tools/compile_cache.py's own_files), with no traceback.

torch.export runs the module's Python as written (non-strict), so most errors carry a frame of
the module's code. Some surface later with none: the export's check that the batch stays
dynamic, and Inductor's compile of a value read with .item(). Their lines are taken from the
stack while torch.export's shapes log the guard or the value (ShapeClues); an in-place write into
the input is found in the export's graph, whose nodes keep the stack they were traced at.
"""
import contextlib
import io
import linecache
import logging
import os
import re
import sys
import traceback

import torch

STACK_LINE = re.compile(r'File "([^"]+)", line (\d+), in [^\n]*\n[ \t]*([^\n]*)')


class CompileError(Exception):
    """What the tool cannot make a package of, said in a line or two (compile_model.py prints it
    and exits 1)."""


class ShapeClues(logging.Filter):
    """The lines of the module's own code where torch.export's shapes met a guard on the batch
    size or a tensor's value read as a number (.item()). What fails because of them fails later
    (the export's check of the dynamic batch, Inductor's compile) with no frame of the module's
    code in the traceback, so each line is taken from the stack while the record is logged. As a
    filter of the shapes' logger it also keeps that logger's INFO records (the graph around a
    refused line, at length) off the console."""

    def __init__(self, files):
        super().__init__()
        self.files = set(files)
        self.guards, self.unbacked = [], []  # (expression, "file:line: code")

    def filter(self, record):
        args = record.args if isinstance(record.args, tuple) else ()
        if "[guard added]" in str(record.msg) and len(args) > 1:
            self.remember(self.guards, str(args[1]))
        elif args and str(args[0]).startswith("create_unbacked"):
            self.remember(self.unbacked, str(args[1]) if len(args) > 1 else "")
        return record.levelno >= logging.ERROR

    def remember(self, found, expression):
        frame = sys._getframe(2)
        while frame is not None:
            name = frame.f_code.co_filename
            if name in self.files or os.path.abspath(name) in self.files:
                code = linecache.getline(name, frame.f_lineno).strip()
                found.append((expression, f"{name}:{frame.f_lineno}: {code}"))
                return
            frame = frame.f_back

    def explain(self, text):
        """(a hint, the line) for an error whose messages are `text`, or (None, None)."""
        if "Constraints violated" in text:
            fixed = [line for expression, line in self.guards if expression.startswith("Eq(")]
            lines = fixed or [line for _, line in self.guards]
            return ("the batch dimension must stay dynamic: forward must not depend on the batch "
                    "size (a branch on x.shape[0], a view with the batch's extent written out "
                    "instead of -1)", lines[0] if lines else None)
        if "data-dependent" in text or "GuardOnDataDependentSymNode" in text:
            return ("forward turns a tensor's value into a Python number (.item(), float(), an "
                    "if on a tensor), which a compiled step cannot compute with; keep it a "
                    "tensor", self.unbacked[0][1] if self.unbacked else None)
        return None, None


def listen(files):
    """ShapeClues on the shapes' logger, for the module's own `files`."""
    logger = logging.getLogger("torch.fx.experimental.symbolic_shapes")
    clues = ShapeClues(files)
    logger.addFilter(clues)
    logger.setLevel(logging.INFO)
    return clues


def refusal(error, files, what, clues=None):
    """`what` failed with `error`: the reason, and the innermost line of the module's own code
    on the way (in the traceback, named in the message, or found by `clues`)."""
    reason = next((line.strip() for line in str(error).splitlines() if line.strip()),
                  type(error).__name__)
    reason = re.sub(r"!?\s*For more information, run with .*$", "", reason)
    frames, seen, texts = [], error, []
    while seen is not None:
        frames = traceback.extract_tb(seen.__traceback__) + frames
        texts.append(f"{type(seen).__name__}: {seen}")
        seen = seen.__cause__ or seen.__context__
    line = None
    for frame in frames:
        if os.path.abspath(frame.filename) in files:
            line = f"{frame.filename}:{frame.lineno}: {frame.line}"
    for text in str(error).splitlines() if line is None else ():
        if any(path in text or os.path.basename(path) in text for path in files):
            line = text.strip()
    hint, clue = clues.explain("\n".join(texts)) if clues else (None, None)
    line = line or clue
    return CompileError(f"{what}: {type(error).__name__}: {reason}" +
                        (f"; {hint}" if hint else "") +
                        (f"\n  at {line}" if line else
                         "\n  (no line of the module's own code in the traceback)"))


@contextlib.contextmanager
def said_where_it_works():
    """Holds back what the block writes to stderr, and writes it after the block unless the block
    raises: torch.export prints the partial graph of a refused module there (twice), which the
    refusal's line says in one."""
    held = io.StringIO()
    with contextlib.redirect_stderr(held):
        yield
    sys.stderr.write(held.getvalue())


def stack_line(stack_trace, files):
    """The innermost "file:line: code" of the module's own `files` in a node's stack trace."""
    found = [f"{path}:{number}: {code.strip()}"
             for path, number, code in STACK_LINE.findall(stack_trace or "")
             if os.path.abspath(path) in files]
    return found[-1] if found else None


def refuse_input_mutation(program, files):
    """Refuses a forward that changes its input in place (the batch is the plugin's, and a
    package's program cannot write it), naming the line."""
    line = input_write(program.graph_module, set(program.graph_signature.user_inputs), files)
    if line is not None:
        raise CompileError("forward changes its input in place, which the package cannot do: "
                           "compute a new tensor instead (x = x * 2, not x.mul_(2))" +
                           (f"\n  at {line}" if line else ""))


def input_write(graph_module, inputs, files):
    """The line ("" where none is found) of an in-place op of `graph_module` that writes into
    one of the placeholders named `inputs` or a view of it, or None. The export's graph still
    has the op, inside the subgraph of the forward's autocast (whose placeholders are the
    operands after the subgraph)."""
    for node in graph_module.graph.nodes:
        if node.op != "call_function":
            continue
        subgraph = next((i for i, value in enumerate(node.args) if isinstance(value, torch.fx.Node)
                         and value.op == "get_attr" and isinstance(
                             getattr(graph_module, value.target, None), torch.fx.GraphModule)),
                        None)
        if subgraph is not None:
            inner = getattr(graph_module, node.args[subgraph].target)
            names = [n.name for n in inner.graph.nodes if n.op == "placeholder"]
            written = {name for name, value in zip(names, node.args[subgraph + 1:])
                       if isinstance(value, torch.fx.Node) and viewed_node(value).name in inputs}
            line = input_write(inner, written, files) if written else None
            if line is not None:
                return line
            continue
        schema = getattr(node.target, "_schema", None)
        for argument, value in zip(schema.arguments if schema else (), node.args):
            if (argument.alias_info is not None and argument.alias_info.is_write and
                    isinstance(value, torch.fx.Node) and viewed_node(value).name in inputs):
                return stack_line(node.meta.get("stack_trace"), files) or ""
    return None


def viewed_node(node):
    """The node whose tensor `node` views (through x.flatten(), x[0], ...), or `node` itself."""
    while node.op == "call_function" and getattr(node.target, "_schema", None) is not None:
        arguments = node.target._schema.arguments
        if not arguments or arguments[0].alias_info is None or not node.args or \
                not isinstance(node.args[0], torch.fx.Node):
            break
        node = node.args[0]
    return node
