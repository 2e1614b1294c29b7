"""tools/compile_model.py on tiny modules: the cache gives no package of other code (two factories
of one class in two files, a class edited in the file beside the one --module names) and serves
no damaged package; a non-contiguous parameter, loss nll on logits and a forward calling .item()
are refused in a line or two naming the cause; FILE.py imports the files beside it; a conv and
BatchNorm module passes its self-check without a warning; the package gets the umask's mode.

    compile_model_test.py    (COMPILE_MODEL=PATH runs another copy of the tool, e.g. an older one)

Each compile takes tens of seconds on a small machine: the modules are tiny and compiled once.
"""
import glob
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import unittest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
COMPILE_MODEL = os.environ.get("COMPILE_MODEL",
                               os.path.join(REPO, "tools", "compile_model.py"))
sys.path.insert(0, os.path.join(REPO, "tools"))

import compiled_package  # noqa: E402  (the package reader; imports torch)

TINY_MLP = '''\
import torch
import torch.nn as nn


class TinyMLP(nn.Module):
    def __init__(self, hidden=32, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))
'''

FACTORY = '''\
from mymlp import TinyMLP


def make():
    return TinyMLP(hidden={hidden})
'''

NEIGHBOUR = '''\
from net3 import Net3


def make():
    return Net3()
'''

NET3 = TINY_MLP.replace("TinyMLP", "Net3")

REFUSED = '''\
import torch
import torch.nn as nn


class NonContiguous(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(10, 784).t() * 0.01)

    def forward(self, x):
        return x.flatten(1) @ self.w


class Item(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(784, 8)
        self.fc2 = nn.Linear(8, 10)

    def forward(self, x):
        h = torch.relu(self.fc1(x.flatten(1)))
        s = h.mean().item()
        return self.fc2(h) * s


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3, stride=2)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(4 * 13 * 13, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))
'''
ITEM_LINE = REFUSED.splitlines().index("        s = h.mean().item()") + 1


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as out:
        out.write(text)


def parameters(package):
    """{name: shape text} of a package's description."""
    lines, _ = compiled_package.read_package(package)
    return {words[1]: words[3] for words in lines if words[0] == "parameter"}


class CompileModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.scratch = tempfile.mkdtemp(prefix="dpl-compile-model-test-")
        cls.modules = os.path.join(cls.scratch, "modules")
        write(os.path.join(cls.modules, "mymlp.py"), TINY_MLP)
        write(os.path.join(cls.modules, "zoo", "__init__.py"), "")
        write(os.path.join(cls.modules, "zoo", "first.py"), FACTORY.format(hidden=8))
        write(os.path.join(cls.modules, "zoo", "second.py"), FACTORY.format(hidden=20))
        write(os.path.join(cls.modules, "build3.py"), NEIGHBOUR)
        write(os.path.join(cls.modules, "net3.py"), NET3)
        write(os.path.join(cls.modules, "refused.py"), REFUSED)
        cls.conv_bn = None

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.scratch, ignore_errors=True)

    def run_tool(self, output, *arguments, cache="cache", pythonpath=False, shape="1,28,28"):
        """The tool's (exit code, stdout, stderr) for `output` in the scratch folder, run in the
        modules' folder under umask 022; Inductor's cache is shared by every run."""
        environment = dict(os.environ,
                           TORCHINDUCTOR_CACHE_DIR=os.path.join(self.scratch, "inductor"))
        environment.pop("PYTHONPATH", None)
        if pythonpath:
            environment["PYTHONPATH"] = self.modules
        command = [sys.executable, COMPILE_MODEL, os.path.join(self.scratch, output),
                   "--cache", os.path.join(self.scratch, cache)]
        command += ["--input-shape", shape] if shape else []
        done = subprocess.run(command + list(arguments), capture_output=True, text=True,
                              cwd=self.modules, env=environment, preexec_fn=lambda: os.umask(0o22))
        return done.returncode, done.stdout, done.stderr

    def compiled(self, output, *arguments, **options):
        code, out, err = self.run_tool(output, *arguments, **options)
        self.assertEqual(code, 0, out + err)
        return os.path.join(self.scratch, output), out, err

    def compiled_conv_bn(self):
        """The ConvBN package, compiled once into a cache of its own: (path, stdout, stderr)."""
        if CompileModelTest.conv_bn is None:
            CompileModelTest.conv_bn = self.compiled("conv_bn.pt2", "--module",
                                                     "refused.py:ConvBN", cache="conv_bn_cache")
        return CompileModelTest.conv_bn

    def test_two_factories_of_one_class_give_their_own_packages(self):
        first, _, _ = self.compiled("first.pt2", "--module", "zoo.first:make", pythonpath=True)
        second, out, _ = self.compiled("second.pt2", "--module", "zoo.second:make",
                                       pythonpath=True)
        self.assertEqual(parameters(first)["fc1.weight"], "[8,784]")
        self.assertEqual(parameters(second)["fc1.weight"], "[20,784]", out)
        self.assertIn("(15910 elements)", out)  # the package's count, not another module's

    def test_a_class_edited_in_the_file_beside_is_compiled_again(self):
        before, _, _ = self.compiled("net3_relu.pt2", "--module", "build3.py:make",
                                     pythonpath=True)
        net3 = os.path.join(self.modules, "net3.py")
        write(net3, NET3.replace("torch.relu", "torch.sin"))
        try:
            after, out, _ = self.compiled("net3_sin.pt2", "--module", "build3.py:make",
                                          pythonpath=True)
        finally:
            write(net3, NET3)
        self.assertNotIn("from the cache", out)
        with open(before, "rb") as one, open(after, "rb") as other:
            self.assertNotEqual(one.read(), other.read())

    def test_a_non_contiguous_parameter_is_refused(self):
        code, out, err = self.run_tool("noncontiguous.pt2", "--module", "refused.py:NonContiguous")
        self.assertEqual(code, 1, out + err)
        self.assertIn("parameter w is not contiguous", err)
        self.assertIn("nn.Parameter(tensor.contiguous())", err)

    def test_loss_nll_on_logits_is_refused(self):
        code, out, err = self.run_tool("nll.pt2", "--module", "mymlp.py:TinyMLP", "--loss", "nll")
        self.assertEqual(code, 1, out + err)
        self.assertIn("must return log-probabilities", err)
        self.assertIn("cross_entropy", err)

    def test_item_in_forward_is_refused_naming_the_line(self):
        code, out, err = self.run_tool("item.pt2", "--module", "refused.py:Item")
        self.assertEqual(code, 1, out + err)
        self.assertNotIn("Traceback", err)
        path = os.path.join(self.modules, "refused.py")
        self.assertIn(f"  at {path}:{ITEM_LINE}: s = h.mean().item()", err)
        self.assertLessEqual(len(err.strip().splitlines()), 3, err)

    def test_a_file_imports_the_files_beside_it(self):
        # No PYTHONPATH: build3.py's `from net3 import Net3` finds net3.py beside it. Without
        # --input-shape the tool stops after building the module, before compiling.
        code, out, err = self.run_tool("neighbour.pt2", "--module", "build3.py:make", shape=None)
        self.assertNotIn("ModuleNotFoundError", err)
        self.assertIn("--input-shape is needed", err)

    def test_conv_and_batchnorm_pass_the_self_check(self):
        _, out, err = self.compiled_conv_bn()
        self.assertIn("checked:", out)
        self.assertNotIn("warning", out + err)
        self.assertNotIn("dropout", out + err)

    def test_a_truncated_cached_package_is_compiled_again(self):
        path, _, _ = self.compiled_conv_bn()
        (cached,) = glob.glob(os.path.join(self.scratch, "conv_bn_cache", "*.pt2"))
        size = os.path.getsize(cached)
        with open(cached, "r+b") as package:
            package.truncate(size // 2)
        again, out, err = self.compiled("conv_bn_again.pt2", "--module", "refused.py:ConvBN",
                                        cache="conv_bn_cache")
        self.assertIn("warning: the cached package", err)
        self.assertNotIn("from the cache", out)
        self.assertEqual(parameters(again)["conv.weight"], "[4,1,3,3]")
        self.assertGreater(os.path.getsize(cached), size // 2)

    def test_the_package_gets_the_umasks_mode(self):
        path, _, _ = self.compiled_conv_bn()
        self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o644)


if __name__ == "__main__":
    unittest.main(verbosity=2)
