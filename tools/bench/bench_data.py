#!/usr/bin/env python3
"""The data path alone: images/s of the webdataset plugin against PyTorch's DataLoader with the
webdataset package and torchvision's transforms, on the same shards and the same cores; and the
anonymous memory of the process that reads them as the set grows.

    tools/python tools/bench/bench_data.py [--images 4000] [--threads 2] [--batch 64]
        [--memory 10000:100000] [--scratch DIR]

Writes --images JPEGs (quality 90, 256 to 400 pixels on the long side, aspect 3:4 to 4:3) made
from Fashion-MNIST images (upscaled, tinted, with a synthetic texture laid over them; synthetic
textures alone when /usr/share/datasets/fashion-mnist is missing) into WebDataset shards of up to
1000 samples (at least 8) with webdataset's ShardWriter, then times one epoch, in a random order, of:
  - dpl: the plugin (build/plugins_out/libdpl_dataset_webdataset.so, driven through its C ABI
    with ctypes) filling batches of --batch on --threads threads: read with pread, JPEG decoded
    by libjpeg-turbo (only the crop's rows and columns, at full scale), RandomResizedCrop to 224
    with Pillow's bilinear arithmetic, flip, normalise to float32;
  - PyTorch: DataLoader(num_workers=--threads, batch_size=--batch) over
    webdataset.WebDataset(shards).shuffle(1000).decode("pil") with torchvision's
    RandomResizedCrop(224), RandomHorizontalFlip, ToTensor and Normalize.
The first pass of each warms the page cache (and builds dpl's shard index; starts the
DataLoader's persistent workers), the second is timed.

--memory A:B (e.g. 10000:100000) then writes sets of A and B samples (the same images under new
keys) and reports, for each, the RssAnon of a fresh process that opens the set with the plugin
(its index in the data cache) and fills one epoch: the anonymous memory a worker holds for the
data path; the shards' pages are the page cache's, not the process's.
"""
import argparse
import ctypes
import gzip
import io
import os
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import dpl_python  # noqa: E402  (tools/dpl_python.py)

dpl_python.use_dpl_python()  # first: the packages imported below are the environment's

import numpy  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from decode_bench import Config, DLDataType, DLDevice, DLTensor, Info, Table  # noqa: E402

FASHION_MNIST = "/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
SIZE = 224
PLUGIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "build",
                      "plugins_out", "libdpl_dataset_webdataset.so")


def make_images(count, seed=0):
    """`count` JPEG files' bytes as the module's doc says, and their labels."""
    from PIL import Image

    rng = numpy.random.default_rng(seed)
    sources = None
    if os.path.exists(FASHION_MNIST):
        with gzip.open(FASHION_MNIST) as f:
            sources = numpy.frombuffer(f.read(), numpy.uint8, offset=16).reshape(-1, 28, 28)
    images = []
    for i in range(count):
        long_side = int(rng.integers(256, 401))
        short_side = int(long_side * rng.uniform(0.75, 1.0))
        width, height = (long_side, short_side) if rng.random() < 0.5 else (short_side, long_side)
        yy, xx = numpy.mgrid[0:height, 0:width].astype(numpy.float32)
        texture = numpy.stack([
            127 + 60 * numpy.sin(xx * rng.uniform(0.02, 0.2) + yy * rng.uniform(0.02, 0.2) + c)
            for c in range(3)], axis=-1)
        texture += rng.normal(0, 12, texture.shape)
        if sources is not None:
            base = Image.fromarray(sources[i % len(sources)]).resize((width, height),
                                                                     Image.BICUBIC)
            tint = rng.uniform(0.4, 1.0, 3)
            texture = 0.45 * texture + 0.55 * numpy.asarray(base, numpy.float32)[..., None] * tint
        image = Image.fromarray(numpy.clip(texture, 0, 255).astype(numpy.uint8), "RGB")
        out = io.BytesIO()
        image.save(out, "JPEG", quality=90)
        images.append((out.getvalue(), i % 10))
    return images


def write_shards(images, root):
    """Shards of up to 1000 samples under root/train, at least 8 (the DataLoader's workers each
    read whole shards)."""
    import webdataset

    os.makedirs(f"{root}/train", exist_ok=True)
    per_shard = min(1000, -(-len(images) // 8))
    with webdataset.ShardWriter(f"{root}/train/train-%06d.tar", maxcount=per_shard,
                                verbose=0) as sink:
        for key, (data, label) in enumerate(images):
            sink.write({"__key__": f"{key:09d}", "jpg": data, "cls": label})
    return sorted(os.path.join(root, "train", name) for name in os.listdir(f"{root}/train"))


class Plugin:
    """The dataset plugin through its C ABI (dpl/dataset_v2.h)."""

    def __init__(self, path):
        self.library = ctypes.CDLL(path)
        self.table = Table.in_dll(self.library, "dpl_dataset_plugin_v2")

    def create(self, root, options, threads, cache, seed=0):
        config = Config(ctypes.sizeof(Config), 2, root.encode(), options.encode(), 0, threads,
                        cache.encode(), seed, None, None)
        handle = ctypes.c_void_p()
        if self.table.create(ctypes.byref(config), ctypes.byref(handle)) != 0:
            raise RuntimeError(self.table.last_error().decode())
        info = Info(ctypes.sizeof(Info))
        self.table.describe(handle, ctypes.byref(info))
        return handle, info

    def epoch(self, handle, info, batch, epoch):
        """Fills every sample once in a random order; returns the samples filled."""
        shape = [info.input.shape[d] for d in range(info.input.ndim)]
        inputs = numpy.empty([batch] + shape, numpy.float32)
        labels = numpy.empty(batch, numpy.int64)
        order = numpy.random.default_rng(epoch).permutation(info.count).astype(numpy.int64)
        for first in range(0, info.count, batch):
            indices = numpy.ascontiguousarray(order[first:first + batch])
            n = len(indices)
            x_shape = (ctypes.c_int64 * 4)(n, *shape)
            y_shape = (ctypes.c_int64 * 1)(n)
            x = DLTensor(inputs.ctypes.data, DLDevice(1, 0), 4, DLDataType(2, 32, 1), x_shape,
                         None, 0)
            y = DLTensor(labels.ctypes.data, DLDevice(1, 0), 1, DLDataType(0, 64, 1), y_shape,
                         None, 0)
            if self.table.fill(handle, indices.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)),
                               epoch, ctypes.byref(x), ctypes.byref(y)) != 0:
                raise RuntimeError(self.table.last_error().decode())
        return info.count


def dpl_options():
    mean = ":".join(str(v) for v in MEAN)
    std = ":".join(str(v) for v in STD)
    return f"size={SIZE},flip=horizontal,mean={mean},std={std}"


def time_dpl(root, args):
    plugin = Plugin(os.path.abspath(args.plugin))
    handle, info = plugin.create(root, dpl_options(), args.threads, f"{root}/cache")
    try:
        plugin.epoch(handle, info, args.batch, 0)  # the page cache
        start = time.perf_counter()
        count = plugin.epoch(handle, info, args.batch, 1)
        return count / (time.perf_counter() - start)
    finally:
        plugin.table.destroy(handle)


def torch_loader(shards, args):
    import torch
    import webdataset
    from torchvision import transforms

    transform = transforms.Compose([
        transforms.RandomResizedCrop(SIZE), transforms.RandomHorizontalFlip(),
        transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    dataset = (webdataset.WebDataset(shards, shardshuffle=len(shards), empty_check=False,
                                     workersplitter=webdataset.split_by_worker)
               .shuffle(1000).decode("pil").to_tuple("jpg", "cls")
               .map_tuple(transform, lambda label: label))
    return torch.utils.data.DataLoader(dataset, batch_size=args.batch, num_workers=args.threads,
                                       persistent_workers=True)


def time_torch(shards, args):
    loader = torch_loader(shards, args)
    for _ in loader:  # the page cache, and the workers' imports
        pass
    start = time.perf_counter()
    count = sum(len(labels) for _, labels in loader)
    return count / (time.perf_counter() - start)


def rss_anon_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    return 0


def memory_child(root, args):
    """In a fresh process: open the set (its index from the data cache), fill one epoch, print
    the RssAnon after create and the largest seen during the epoch."""
    plugin = Plugin(os.path.abspath(args.plugin))
    handle, info = plugin.create(root, dpl_options(), args.threads, f"{root}/cache")
    if args.index_only:
        return
    after_create = rss_anon_kib()
    largest = after_create
    shape = [info.input.shape[d] for d in range(info.input.ndim)]
    # The epoch in slices of 20 batches, the memory sampled after each.
    for first in range(0, info.count, args.batch * 20):
        end = min(info.count, first + args.batch * 20)
        plugin_epoch_slice(plugin, handle, shape, first, end, args.batch)
        largest = max(largest, rss_anon_kib())
    print(f"{info.count} {after_create} {largest}")


def plugin_epoch_slice(plugin, handle, shape, first, end, batch):
    inputs = numpy.empty([batch] + shape, numpy.float32)
    labels = numpy.empty(batch, numpy.int64)
    for start in range(first, end, batch):
        indices = numpy.arange(start, min(end, start + batch), dtype=numpy.int64)
        x = DLTensor(inputs.ctypes.data, DLDevice(1, 0), 4, DLDataType(2, 32, 1),
                     (ctypes.c_int64 * 4)(len(indices), *shape), None, 0)
        y = DLTensor(labels.ctypes.data, DLDevice(1, 0), 1, DLDataType(0, 64, 1),
                     (ctypes.c_int64 * 1)(len(indices)), None, 0)
        if plugin.table.fill(handle, indices.ctypes.data_as(ctypes.POINTER(ctypes.c_int64)), 0,
                             ctypes.byref(x), ctypes.byref(y)) != 0:
            raise RuntimeError(plugin.table.last_error().decode())


def measure_memory(images, scratch, args):
    sizes = [int(v) for v in args.memory.split(":")]
    results = []
    for size in sizes:
        root = f"{scratch}/memory-{size}"
        copies = -(-size // len(images))
        write_shards((images * copies)[:size], root)
        child = [sys.executable, os.path.abspath(__file__), "--memory-child", root, "--plugin",
                 args.plugin, "--threads", str(args.threads), "--batch", str(args.batch)]
        subprocess.run(child + ["--index-only"], check=True)  # builds the index
        out = subprocess.run(child, check=True, capture_output=True, text=True).stdout.split()
        results.append([int(v) for v in out])
        shutil.rmtree(root)
    print("\nRssAnon of a process that opens the set and fills one epoch (the index mapped from "
          "the data cache):")
    print("| samples | after create | largest during the epoch |")
    print("| ---: | ---: | ---: |")
    for count, after, largest in results:
        print(f"| {count} | {after / 1024:.1f} MiB | {largest / 1024:.1f} MiB |")
    growth = results[-1][2] / results[0][2] - 1
    print(f"growth from {results[0][0]} to {results[-1][0]} samples: {100 * growth:+.1f} %")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--plugin", default=PLUGIN)
    parser.add_argument("--images", type=int, default=4000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--memory", default="", help="A:B samples, e.g. 10000:100000")
    parser.add_argument("--scratch", default="")
    parser.add_argument("--memory-child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--index-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_child:
        memory_child(args.memory_child, args)
        return
    scratch = args.scratch or tempfile.mkdtemp(prefix="dpl-bench-data-")
    try:
        images = make_images(args.images)
        shards = write_shards(images, f"{scratch}/speed")
        sizes = [len(data) for data, _ in images]
        print(f"{len(images)} JPEGs (quality 90, 256-400 px long side), "
              f"{sum(sizes) / len(sizes) / 1024:.1f} KiB each, in {len(shards)} shards; "
              f"{args.threads} threads / workers, batches of {args.batch}, {os.cpu_count()} "
              "cores")
        dpl = time_dpl(f"{scratch}/speed", args)
        torch = time_torch(shards, args)
        print("| data path | images/s |")
        print("| --- | ---: |")
        print(f"| dpl webdataset plugin, {args.threads} threads | {dpl:.0f} |")
        print(f"| DataLoader + webdataset + torchvision, {args.threads} workers | {torch:.0f} |")
        print(f"dpl / DataLoader: {dpl / torch:.2f}x")
        if args.memory:
            measure_memory(images, scratch, args)
    finally:
        if not args.scratch:
            shutil.rmtree(scratch)


if __name__ == "__main__":
    main()
