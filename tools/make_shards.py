#!/usr/bin/env python3
"""Writes a data set as WebDataset shards for `launcher --data webdataset`.

    tools/python tools/make_shards.py SOURCE OUT [--format imagefolder|cifar10|idx]
        [--shard-size 256M] [--samples-per-shard N] [--limit TRAIN[:VAL]] [--overwrite]

SOURCE is read as
  imagefolder  SOURCE/train/<class>/<image> and SOURCE/val/ (or test/), torchvision's ImageFolder
               order (classes sorted, labels 0..K-1). Labels are always positions in train's
               sorted class folders, so val/ may lack a class, but a val class folder that train/
               does not have is refused. Images are .jpg, .jpeg, .png and .webp files (any case:
               .JPEG is one), the formats dpl's webdataset plugin decodes; any other file in a
               class folder is refused, naming it, as is a file Pillow cannot open; hidden files
               and folders (.DS_Store) are skipped. Images are stored byte for byte, except
               CMYK (and YCCK) JPEGs, which the plugin refuses: they are converted to RGB JPEGs
               (Pillow's convert("RGB"), quality 95) and counted in one line.
  cifar10      the CIFAR-10 binary version (data_batch_1..5.bin, test_batch.bin), each image as a
               PNG
  idx          MNIST-format files (train-images-idx3-ubyte[.gz] ...; Fashion-MNIST), each image
               as a PNG
(the default guesses from SOURCE's files). OUT gets train/train-NNNNNN.tar and val/val-NNNNNN.tar
by the webdataset package's ShardWriter: one sample a key ("000000123"), its image and its class
as .cls text, shards of at most --shard-size bytes (default 256M) or --samples-per-shard samples.
Samples keep SOURCE's order (the launcher's sampler shuffles samples across all shards, so shards
need no shuffling). --limit writes only the first TRAIN (and VAL) samples.
An OUT/train or OUT/val folder that already holds .tar files is refused before anything is
written (the launcher would read old and new shards together); --overwrite removes those .tar
files first instead. SOURCE's folders and files are listed and checked before anything is
written too; only an image Pillow cannot open is found as it is read, with shards already written.
"""
import argparse
import glob
import gzip
import io
import os
import re
import sys

import dpl_python

dpl_python.use_dpl_python()  # first: PIL and webdataset below are the environment's

IMAGE_EXTENSIONS = {".jpg": "jpg", ".jpeg": "jpeg", ".png": "png", ".webp": "webp"}
# Above 95 files grow a lot for no visible gain; ImageNet's own JPEGs are of lower quality.
CONVERTED_JPEG_QUALITY = 95


def fail(message):
    sys.exit(f"make_shards.py: {message}")


def size_in_bytes(text):
    match = re.fullmatch(r"(\d+)([KMG]?)", text.upper())
    if not match:
        raise argparse.ArgumentTypeError(f"expected a size such as 256M, got {text!r}")
    return int(match.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[match.group(2)]


def png_bytes(array):
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(array).save(out, "PNG")
    return out.getvalue()


def class_folders(folder):
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir())


def class_images(class_folder):
    """[(path, extension)] below `class_folder` in torchvision's order (folders, then names,
    sorted); refuses a file that is not an image the webdataset plugin decodes."""
    walked = []
    for directory, folders, names in os.walk(class_folder):
        folders[:] = [name for name in folders if not name.startswith(".")]
        walked.append((directory, names))
    images = []
    for directory, names in sorted(walked):
        for name in sorted(names):
            if name.startswith("."):
                continue
            path = os.path.join(directory, name)
            extension = IMAGE_EXTENSIONS.get(os.path.splitext(name)[1].lower())
            if extension is None:
                fail(f"{path}: not an image this tool stores; only .jpg, .jpeg, .png and .webp "
                     "files (any case) are, the formats dpl's webdataset plugin decodes; convert "
                     "it or move it out of the folder")
            images.append((path, extension))
    return images


def imagefolder_listing(root, split):
    """[(path, extension, label)] of SOURCE/split, labelled by train's classes: the labels of
    every split must be train's for a model trained on train/ to be scored right."""
    train = os.path.join(root, "train")
    if not os.path.isdir(train):
        fail(f"{train} is missing: an image folder is SOURCE/train/<class>/<image>")
    classes = class_folders(train)
    if not classes:
        fail(f"{train} holds no class folder (train/<class>/<image>)")
    folder = os.path.join(root, split)
    known = set(classes)
    unknown = [name for name in class_folders(folder) if name not in known]
    if unknown:
        fail(f"{folder}: its class folder{'s' * (len(unknown) > 1)} {', '.join(unknown)} "
             f"{'are' if len(unknown) > 1 else 'is'} not among the "
             f"{len(classes)} class folders of {train}; labels are positions in train's classes, "
             f"so every {split} class needs a train folder of the same name")
    listing = []
    for label, name in enumerate(classes):
        if os.path.isdir(os.path.join(folder, name)):
            listing += [(path, extension, label)
                        for path, extension in class_images(os.path.join(folder, name))]
    return listing


def rgb_if_cmyk(path, data):
    """An RGB JPEG of the image in `data` when it is a CMYK or YCCK JPEG (Pillow reads both as
    mode CMYK), which dpl's webdataset plugin refuses; else None."""
    from PIL import Image

    try:
        image = Image.open(io.BytesIO(data))  # reads the header only
    except OSError as error:
        fail(f"{path}: Pillow cannot read it as an image ({error})")
    if image.format != "JPEG" or image.mode != "CMYK":
        return None
    out = io.BytesIO()
    image.convert("RGB").save(out, "JPEG", quality=CONVERTED_JPEG_QUALITY)
    return out.getvalue()


def stored_images(listing, converted):
    """(extension, bytes, label) of each listed image; appends the paths of converted ones to
    `converted`."""
    for path, extension, label in listing:
        with open(path, "rb") as f:
            data = f.read()
        rgb = rgb_if_cmyk(path, data)
        if rgb is not None:
            converted.append(path)
            data = rgb
        yield extension, data, label


def imagefolder_samples(root, split, converted):
    return stored_images(imagefolder_listing(root, split), converted)


def cifar10_samples(root, split):
    names = [f"data_batch_{n}.bin" for n in range(1, 6)] if split == "train" else ["test_batch.bin"]
    missing = [name for name in names if not os.path.isfile(os.path.join(root, name))]
    if missing:
        fail(f"{root} has no {', '.join(missing)} (CIFAR-10's binary version)")
    return cifar10_records([os.path.join(root, name) for name in names])


def cifar10_records(paths):
    import numpy

    for path in paths:
        with open(path, "rb") as f:
            data = f.read()
        if len(data) % 3073:
            fail(f"{path} holds {len(data)} bytes, not a whole number of CIFAR-10 records of "
                 "3073 bytes: is it truncated?")
        for record in numpy.frombuffer(data, numpy.uint8).reshape(-1, 3073):
            yield "png", png_bytes(record[1:].reshape(3, 32, 32).transpose(1, 2, 0)), int(record[0])


def read_idx(path):
    import numpy

    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    if len(data) < 4 or data[:3] != b"\0\0\x08":
        fail(f"{path} is not an IDX file of bytes (its header is not 0 0 8 N)")
    ndim = data[3]
    extents = [int.from_bytes(data[4 + 4 * k:8 + 4 * k], "big") for k in range(ndim)]
    expected = 4 + 4 * ndim + int(numpy.prod(extents))
    if len(data) != expected:
        fail(f"{path} holds {len(data)} bytes, but its header {tuple(extents)} asks for "
             f"{expected}: is it truncated?")
    return numpy.frombuffer(data, numpy.uint8, offset=4 + 4 * ndim).reshape(extents)


def idx_path(root, name):
    for candidate in (name + ".gz", name):
        if os.path.exists(os.path.join(root, candidate)):
            return os.path.join(root, candidate)
    fail(f"{root} has no {name} or {name}.gz")


def idx_samples(root, split):
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(idx_path(root, f"{prefix}-images-idx3-ubyte"))
    labels = read_idx(idx_path(root, f"{prefix}-labels-idx1-ubyte"))
    if len(images) != len(labels):
        fail(f"{root}: {prefix}'s files hold {len(images)} images but {len(labels)} labels")
    return (("png", png_bytes(image), int(label)) for image, label in zip(images, labels))


def guess_format(root):
    if os.path.isdir(os.path.join(root, "train")):
        return "imagefolder"
    if os.path.exists(os.path.join(root, "data_batch_1.bin")):
        return "cifar10"
    if any(name.startswith("train-images-idx3-ubyte") for name in os.listdir(root)):
        return "idx"
    fail(f"cannot tell the format of {root}; pass --format")


def source_split(root, data_format, split):
    """The source's part for OUT's `split` ("train" or "val")."""
    if data_format != "imagefolder" or split == "train":
        return split
    for name in ("val", "test"):
        if os.path.isdir(os.path.join(root, name)):
            return name
    return None


def clear_or_refuse(folder, overwrite):
    """The launcher reads every .tar of a split folder, so old shards left beside new ones would
    be trained on as well: stale or duplicate samples, without a word."""
    shards = sorted(glob.glob(os.path.join(glob.escape(folder), "*.tar")))
    if shards and not overwrite:
        fail(f"{folder} already holds {len(shards)} .tar file{'s' * (len(shards) != 1)}, which "
             "the launcher would read together with the new shards; choose an empty folder, "
             "remove them, or pass --overwrite to remove them first")
    for shard in shards:
        os.remove(shard)


def write_split(samples, folder, split, args, limit):
    import webdataset

    os.makedirs(folder, exist_ok=True)
    pattern = os.path.join(folder, f"{split}-%06d.tar")
    count = 0
    with webdataset.ShardWriter(pattern, maxcount=args.samples_per_shard, maxsize=args.shard_size,
                                verbose=0) as sink:
        for extension, data, label in samples:
            if limit is not None and count >= limit:
                break
            sink.write({"__key__": f"{count:09d}", extension: data, "cls": label})
            count += 1
        shards = sink.shard
    print(f"{split}: {count} samples in {shards} shards under {folder}")


def positive(text):
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}")
    return int(text)


def sample_limits(text):
    """--limit TRAIN[:VAL]: the samples to write of each split (VAL defaults to TRAIN)."""
    parts = text.split(":")
    if len(parts) > 2 or not all(part.isdigit() for part in parts):
        raise argparse.ArgumentTypeError(f"expected TRAIN[:VAL], whole numbers, got {text!r}")
    return [int(part) for part in parts]


def parse_arguments():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("source")
    parser.add_argument("out")
    parser.add_argument("--format", choices=("imagefolder", "cifar10", "idx"))
    parser.add_argument("--shard-size", type=size_in_bytes, default=256 << 20)
    parser.add_argument("--samples-per-shard", type=positive, default=10 ** 9)
    parser.add_argument("--limit", type=sample_limits, help="TRAIN[:VAL] samples to write")
    parser.add_argument("--overwrite", action="store_true",
                        help="remove the .tar files already in OUT/train and OUT/val first "
                             "(without it such a folder is refused, before anything is written)")
    args = parser.parse_args()
    if not os.path.isdir(args.source):
        parser.error(f"the source {args.source} is not a folder")
    return args


def main():
    args = parse_arguments()
    data_format = args.format or guess_format(args.source)
    limits = args.limit or [None, None]
    # Every check of SOURCE and OUT comes before the first shard, so that a refusal leaves OUT
    # as it was.
    converted = {"train": [], "val": []}
    splits = []
    for split, limit in zip(("train", "val"), limits + limits[-1:]):
        part = source_split(args.source, data_format, split)
        if part is None:
            samples = None
        elif data_format == "imagefolder":
            samples = imagefolder_samples(args.source, part, converted[split])
        else:
            samples = {"cifar10": cifar10_samples, "idx": idx_samples}[data_format](
                args.source, part)
        splits.append((split, samples, limit))
    for split, _, _ in splits:
        clear_or_refuse(os.path.join(args.out, split), args.overwrite)
    for split, samples, limit in splits:
        if samples is None:
            print(f"{split}: {args.source} has no val/ or test/ folder; none written")
            continue
        write_split(samples, os.path.join(args.out, split), split, args, limit)
        if converted[split]:
            print(f"{split}: converted {len(converted[split])} CMYK JPEGs to RGB JPEGs (quality "
                  f"{CONVERTED_JPEG_QUALITY}), as dpl's webdataset plugin reads only greyscale "
                  "and RGB images; every other image is stored as it is")


if __name__ == "__main__":
    try:
        main()
    except OSError as error:  # an unreadable file or a full disk: one line, not a traceback
        fail(error)
