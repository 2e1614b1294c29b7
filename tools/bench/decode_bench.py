#!/usr/bin/env python3
"""Image decoding throughput of the imagefolder dataset plugin against Python's PIL, in one run.

Writes a folder <scratch>/train/<label>/<i>.png of 28x28 greyscale PNGs (the first images of
Fashion-MNIST when /usr/share/datasets/fashion-mnist is there, else random pixels), warms the
page cache, then times, best of --repeats:
  - the plugin's create, which lists, reads and decodes every image into memory (no data cache),
    with 1 thread and with --threads threads;
  - the plugin's fill of every sample in batches of 128 with cache_mb=0, where each batch is read
    and decoded when it is filled (and normalised to float32);
  - PIL, one core: Image.open(path).convert("L") and numpy.asarray for every file, the work
    torchvision's ImageFolder loader does per sample before ToTensor.
The plugin is driven through its C ABI with ctypes (build it first: cmake --build build --target
dpl_dataset_imagefolder). Figures are images per second, and per core for the threaded run.
"""
import argparse
import ctypes
import gzip
import os
import shutil
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import numpy  # noqa: E402
from PIL import Image  # noqa: E402

FASHION_MNIST = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class Config(ctypes.Structure):  # dpl_dataset_config_v2 (v1's)
    _fields_ = [("struct_size", ctypes.c_uint32), ("version", ctypes.c_uint32),
                ("path", ctypes.c_char_p), ("options", ctypes.c_char_p),
                ("split", ctypes.c_int32), ("num_threads", ctypes.c_int32),
                ("cache_dir", ctypes.c_char_p), ("seed", ctypes.c_uint64),
                ("log", ctypes.c_void_p), ("log_context", ctypes.c_void_p)]


class SampleTensor(ctypes.Structure):  # dpl_sample_tensor_v2
    _fields_ = [("dtype", DLDataType), ("ndim", ctypes.c_uint32), ("shape", ctypes.c_int64 * 8)]


class Info(ctypes.Structure):  # dpl_dataset_info_v2
    _fields_ = [("struct_size", ctypes.c_uint32), ("reserved", ctypes.c_uint32),
                ("input", SampleTensor), ("target", SampleTensor), ("count", ctypes.c_int64),
                ("num_classes", ctypes.c_int64)]


class Header(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("magic", ctypes.c_uint32),
                ("kind", ctypes.c_uint32), ("abi_version", ctypes.c_uint32),
                ("name", ctypes.c_char_p), ("version", ctypes.c_char_p),
                ("description", ctypes.c_char_p)]


class Table(ctypes.Structure):  # dpl_dataset_plugin_v2
    _fields_ = [
        ("header", Header),
        ("create", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Config),
                                    ctypes.POINTER(ctypes.c_void_p))),
        ("destroy", ctypes.CFUNCTYPE(None, ctypes.c_void_p)),
        ("describe", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(Info))),
        ("fill", ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64),
                                  ctypes.c_int64, ctypes.POINTER(DLTensor),
                                  ctypes.POINTER(DLTensor))),
        ("last_error", ctypes.CFUNCTYPE(ctypes.c_char_p)),
    ]


def write_folder(root, count):
    if os.path.exists(FASHION_MNIST):
        with gzip.open(FASHION_MNIST) as f:
            images = numpy.frombuffer(f.read(), numpy.uint8, offset=16).reshape(-1, 28, 28)
        source = "Fashion-MNIST"
    else:
        images = numpy.random.default_rng(0).integers(0, 256, (count, 28, 28), dtype=numpy.uint8)
        source = "random pixels"
    for i in range(count):
        folder = f"{root}/train/{i % 10}"
        os.makedirs(folder, exist_ok=True)
        Image.fromarray(images[i % len(images)], "L").save(f"{folder}/{i:06d}.png")
    return source


class Plugin:
    def __init__(self, path):
        self.library = ctypes.CDLL(path)
        self.table = Table.in_dll(self.library, "dpl_dataset_plugin_v2")

    def create(self, root, options, threads):
        config = Config(ctypes.sizeof(Config), 2, root.encode(), options.encode(), 0, threads,
                        b"", 0, None, None)
        handle = ctypes.c_void_p()
        if self.table.create(ctypes.byref(config), ctypes.byref(handle)) != 0:
            raise RuntimeError(self.table.last_error().decode())
        return handle

    def fill_all(self, handle, batch=128):
        info = Info(ctypes.sizeof(Info))
        self.table.describe(handle, ctypes.byref(info))
        elements = 1
        for d in range(info.input.ndim):
            elements *= info.input.shape[d]
        inputs = numpy.empty((batch, elements), numpy.float32)
        labels = numpy.empty(batch, numpy.int64)
        for first in range(0, info.count, batch):
            n = min(batch, info.count - first)
            indices = numpy.arange(first, first + n, dtype=numpy.int64)
            input_shape = (ctypes.c_int64 * 4)(n, *info.input.shape[:3])
            label_shape = (ctypes.c_int64 * 1)(n)
            x = DLTensor(inputs.ctypes.data, DLDevice(1, 0), 4, DLDataType(2, 32, 1),
                         input_shape, None, 0)
            y = DLTensor(labels.ctypes.data, DLDevice(1, 0), 1, DLDataType(0, 64, 1),
                         label_shape, None, 0)
            status = self.table.fill(handle, indices.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                                     0, ctypes.byref(x), ctypes.byref(y))
            if status != 0:
                raise RuntimeError(self.table.last_error().decode())
        return info.count


def best(repeats, run):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plugin", default=os.path.join(os.path.dirname(__file__), "..", "..",
                                                         "build", "plugins_out",
                                                         "libdpl_dataset_imagefolder.so"))
    parser.add_argument("--images", type=int, default=10000)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()

    plugin = Plugin(os.path.abspath(args.plugin))
    root = tempfile.mkdtemp(prefix="dpl-decode-bench-")
    try:
        source = write_folder(root, args.images)
        files = sorted(os.path.join(d, f) for d, _, names in os.walk(root) for f in names)
        size = sum(os.path.getsize(f) for f in files)
        print(f"{len(files)} PNGs of 28x28 grey ({source}), {size / len(files):.0f} bytes each")

        def decode_create(threads):
            plugin.table.destroy(plugin.create(root, "", threads))

        def pil():
            for path in files:
                numpy.asarray(Image.open(path).convert("L"))

        pil()  # warm the page cache and both code paths
        decode_create(1)
        n = len(files)
        one = best(args.repeats, lambda: decode_create(1))
        many = best(args.repeats, lambda: decode_create(args.threads))
        per_batch = plugin.create(root, "cache_mb=0", 1)
        try:
            batched = best(args.repeats, lambda: plugin.fill_all(per_batch))
        finally:
            plugin.table.destroy(per_batch)
        reference = best(args.repeats, pil)
        print(f"plugin create (list, read, decode all), 1 thread:  {n / one:9.0f} images/s")
        print(f"plugin create, {args.threads} threads: {n / many:9.0f} images/s "
              f"({n / many / args.threads:.0f} per core)")
        print(f"plugin fill, decoded per batch of 128, 1 thread: {n / batched:9.0f} images/s")
        print(f"PIL open + convert('L') + numpy.asarray, 1 core:  {n / reference:9.0f} images/s")
        print(f"plugin / PIL per core: {one and reference / one:.2f}x (create), "
              f"{reference / batched:.2f}x (per batch)")
    finally:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
