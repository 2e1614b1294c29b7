"""Writes WebDataset shards for the webdataset plugin's tests, and what torchvision makes of them.

    shard_writer.py webdataset DIR       DIR/{train,val}/shard-NNNNNN.tar by webdataset's
                                         ShardWriter (7 samples a shard): PNG, JPEG and WebP
                                         images of 12x16 with .cls and .json labels, and
                                         DIR/reference-{train,val}.{raw,txt}: PIL's RGB pixels
                                         (HWC, sample after sample) and "key label" lines
    shard_writer.py formats DIR          DIR/train/*.tar by GNU tar (long names, ./ prefixes),
                                         tarfile's pax format (long UTF-8 names), ustar (prefix
                                         field), folders with dots, a member of extension seg.png;
                                         DIR/reference.txt
    shard_writer.py broken DIR CASE      DIR/train/shard.tar (and val/) with one fault: truncated,
                                         unlabelled, gzipped, unreadable-image, duplicate-key,
                                         two-inputs, label-12, truncated-jpeg, or not a fault:
                                         trailing-bytes (data after a JPEG's end marker)
    shard_writer.py sized DIR            DIR/{train,val}/sized.tar: noise images of several sizes
                                         (PNG, and one JPEG)
    shard_writer.py torchvision DIR SPLIT SIZE RESIZE SEED EPOCH FLIP
                                         DIR/expected-SPLIT.raw: each sample of DIR/SPLIT as
                                         torchvision's RandomResizedCrop(SIZE) (+ flip) with the
                                         plugin's draws for (SEED, EPOCH, index), or for val
                                         Resize(RESIZE) then CenterCrop(SIZE), CHW bytes
    shard_writer.py boxes OUT CASES      OUT: "top left height width" of RandomResizedCrop's
                                         get_params for each "height width seed epoch index
                                         scale_low scale_high ratio_low ratio_high" line of CASES,
                                         torchvision's arithmetic fed the plugin's draws
    shard_writer.py jpegs DIR            DIR/NAME.jpg: noise JPEGs of odd sizes in 4:2:0, 4:2:2,
                                         4:4:4, greyscale and progressive
    shard_writer.py indexed DIR COUNTS   DIR/train/part-N.tar holding COUNTS (e.g. 40:7:49)
                                         samples and DIR/val/part-0.tar 12: 28x28 grey PNGs whose
                                         first two pixels spell the sample's index (for
                                         sample_recorder.c), labels index % 10
    shard_writer.py tokens DIR           DIR/train/tokens.tar: .npy and .bin members of ids, and
                                         DIR/expected-tokens.txt: each member's ids

Everything is drawn from fixed seeds.
"""
import gzip
import io
import json
import os
import subprocess
import sys
import tarfile

import numpy
from PIL import Image

MASK64 = (1 << 64) - 1


def splitmix64(state):
    """One SplitMix64 step: (new state, output)."""
    state = (state + 0x9E3779B97F4A7C15) & MASK64
    z = state
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return state, z ^ (z >> 31)


class Draws:
    """The plugin's generator of (seed, epoch, index) (Note [Augmentation generator])."""

    def __init__(self, seed, epoch, index):
        step = lambda s: splitmix64(s)[1]
        self.state = step(step(step(seed) ^ epoch) ^ index)

    def next(self):
        self.state, out = splitmix64(self.state)
        return out


def crop_params(height, width, draws, scale=(0.08, 1.0), ratio=(3.0 / 4.0, 4.0 / 3.0)):
    """RandomResizedCrop.get_params itself, with torch's random calls answered from `draws`
    (Note [Random resized crop draws]): the float32 uniform and randint the plugin uses."""
    import torch
    import torchvision.transforms.transforms as transforms_module
    from torchvision import transforms

    class Uniform:
        def uniform_(self, low, high):
            low, high = numpy.float32(float(low)), numpy.float32(float(high))
            unit = numpy.float32(draws.next() >> 40) * numpy.float32(1.0 / 16777216.0)
            return torch.tensor([float(unit * (high - low) + low)], dtype=torch.float32)

    class DrawnTorch:
        def __getattr__(self, name):
            return getattr(torch, name)

        def empty(self, *size):
            return Uniform()

        def randint(self, low, high, size):
            return torch.tensor([low + draws.next() % (high - low)])

    real = transforms_module.torch
    transforms_module.torch = DrawnTorch()
    try:
        return transforms.RandomResizedCrop.get_params(torch.zeros(1, height, width), list(scale),
                                                       list(ratio))
    finally:
        transforms_module.torch = real


def noise_image(height, width, seed, mode="RGB"):
    rng = numpy.random.default_rng(seed)
    shape = (height, width, 3) if mode == "RGB" else (height, width)
    return Image.fromarray(rng.integers(0, 256, shape, dtype=numpy.uint8), mode)


def encoded(image, fmt, **options):
    out = io.BytesIO()
    image.save(out, fmt, **options)
    return out.getvalue()


def write_webdataset(root):
    import webdataset

    formats = [("png", "PNG", {}), ("jpg", "JPEG", {"quality": 90}),
               ("webp", "WEBP", {"lossless": True})]
    for split, count, seed in (("train", 20, 1), ("val", 6, 2)):
        os.makedirs(f"{root}/{split}", exist_ok=True)
        with webdataset.ShardWriter(f"{root}/{split}/shard-%06d.tar", maxcount=7,
                                    verbose=0) as sink, \
                open(f"{root}/reference-{split}.raw", "wb") as pixels, \
                open(f"{root}/reference-{split}.txt", "w") as listing:
            for i in range(count):
                extension, fmt, options = formats[i % 3]
                image = noise_image(12, 16, seed * 1000 + i)
                data = encoded(image, fmt, **options)
                label = (i * 3) % 5
                key = f"{split}{i:06d}"
                fields = {"label": label, "note": "a \"quoted\", {text}"}
                if i % 2:  # a field twice, as hand-written JSON may have: json.loads takes the last
                    fields = ('{"label": %d, "note": "x", "label": %d}' % ((label + 1) % 5, label)
                              ).encode()
                sink.write({"__key__": key, extension: data, "cls": label, "json": fields})
                pixels.write(numpy.asarray(Image.open(io.BytesIO(data)).convert("RGB")).tobytes())
                listing.write(f"{key} {label}\n")


def add_bytes(archive, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    archive.addfile(info, io.BytesIO(data))


def write_formats(root):
    """The same kind of sample through several tar writers; reference.txt lists key and label in
    the order the plugin serves them (shards sorted by name)."""
    os.makedirs(f"{root}/train", exist_ok=True)
    listing = []
    image = encoded(noise_image(8, 8, 5), "PNG")
    # GNU tar of a folder: ./ prefixes, a name over 100 bytes (a long-name header), folders.
    source = f"{root}/gnu-source"
    long_folder = "deep/" + "x" * 120
    for n, key in enumerate(["a/000", long_folder + "/001", "b.c/002"]):
        os.makedirs(os.path.dirname(f"{source}/{key}"), exist_ok=True)
        with open(f"{source}/{key}.png", "wb") as f:
            f.write(image)
        with open(f"{source}/{key}.cls", "w") as f:
            f.write(f"{n}\n")
    # As WebDataset reads names, this is key b.c/002's "seg.png", which the default layout skips.
    with open(f"{source}/b.c/002.seg.png", "wb") as f:
        f.write(image)
    subprocess.run(["tar", "--format=gnu", "--sort=name", "-C", source, "-cf",
                    f"{root}/train/1-gnu.tar", "."], check=True)
    listing += [("a/000", 0), ("b.c/002", 2), (f"{long_folder}/001", 1)]
    # pax: a long UTF-8 name, a folder with dots.
    with tarfile.open(f"{root}/train/2-pax.tar", "w", format=tarfile.PAX_FORMAT) as archive:
        for n, key in enumerate(["données/" + "é" * 80 + "/003", "v1.2/004"]):
            add_bytes(archive, key + ".png", image)
            add_bytes(archive, key + ".cls", str(3 + n).encode())
            listing.append((key, 3 + n))
    # ustar: a name split into the prefix field.
    ustar_key = "p" * 90 + "/" + "q" * 60 + "/005"
    with tarfile.open(f"{root}/train/3-ustar.tar", "w", format=tarfile.USTAR_FORMAT) as archive:
        add_bytes(archive, ustar_key + ".png", image)
        add_bytes(archive, ustar_key + ".cls", b"5")
        listing.append((ustar_key, 5))
    with open(f"{root}/reference.txt", "w") as f:
        for key, label in listing:
            f.write(f"{key}\t{label}\n")


def tar_bytes(members):
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.GNU_FORMAT) as archive:
        for name, data in members:
            add_bytes(archive, name, data)
    return out.getvalue()


def write_broken(root, case):
    side = 64 if case == "truncated-jpeg" else 8
    image = encoded(noise_image(side, side, 6), "JPEG", quality=90)
    members = [("000.jpg", image), ("000.cls", b"1"), ("001.jpg", image), ("001.cls", b"2")]
    if case == "unlabelled":
        members = members[:3]
    elif case == "unreadable-image":
        members[2] = ("001.jpg", b"GIF89a not a jpeg")
    elif case == "truncated-jpeg":  # its header whole, its scan cut short
        members[2] = ("001.jpg", image[:len(image) * 3 // 4])
    elif case == "trailing-bytes":  # data after the end marker, as some cameras append
        members[2] = ("001.jpg", image + b"appended after the end marker")
    elif case == "duplicate-key":
        members.append(("001.jpg", encoded(noise_image(8, 8, 7), "JPEG")))
    elif case == "two-inputs":
        members.append(("001.png", encoded(noise_image(8, 8, 7), "PNG")))
    elif case == "label-12":
        members[3] = ("001.cls", b"12")
    data = tar_bytes(members)
    if case == "truncated":
        data = data[:512 + 300]  # inside the first member's data
    elif case == "gzipped":
        data = gzip.compress(data)
    for split in ("train", "val"):
        os.makedirs(f"{root}/{split}", exist_ok=True)
        with open(f"{root}/{split}/shard.tar", "wb") as f:
            f.write(data)


def write_sized(root):
    """Noise images of several sizes (a few upscaled, so crops see structure), labels 0..3."""
    sizes = [(40, 60), (64, 48), (33, 33), (80, 50), (45, 90), (20, 200), (200, 20), (57, 71)]
    for split, seed in (("train", 3), ("val", 4)):
        members = []
        for i, (height, width) in enumerate(sizes):
            image = noise_image(height // 2 + 1, width // 2 + 1, seed * 100 + i)
            image = image.resize((width, height), Image.NEAREST)
            fmt, extension = ("JPEG", "jpg") if i == 3 else ("PNG", "png")
            members.append((f"{i:03d}.{extension}", encoded(image, fmt, quality=95)))
            members.append((f"{i:03d}.cls", str(i % 4).encode()))
        os.makedirs(f"{root}/{split}", exist_ok=True)
        with open(f"{root}/{split}/sized.tar", "wb") as f:
            f.write(tar_bytes(members))


def samples_of(root, split):
    """(key, image bytes) of every sample of DIR/SPLIT's shards, in the plugin's order."""
    import webdataset

    shards = sorted(os.path.join(root, split, name) for name in os.listdir(f"{root}/{split}"))
    dataset = webdataset.WebDataset(shards, shardshuffle=False)
    for sample in dataset:
        data = next(sample[k] for k in ("jpg", "png", "webp") if k in sample)
        yield sample["__key__"], data


def write_torchvision(root, split, size, resize, seed, epoch, flip):
    import torchvision.transforms.functional as F
    from torchvision import transforms

    with open(f"{root}/expected-{split}.raw", "wb") as out:
        for index, (_, data) in enumerate(samples_of(root, split)):
            image = Image.open(io.BytesIO(data)).convert("RGB")
            if split == "train":
                draws = Draws(seed, epoch, index)
                flipped = flip and (draws.next() >> 63) == 1
                top, left, height, width = crop_params(image.height, image.width, draws)
                image = F.resized_crop(image, top, left, height, width, [size, size],
                                       transforms.InterpolationMode.BILINEAR, antialias=True)
                if flipped:
                    image = F.hflip(image)
            else:
                image = transforms.CenterCrop(size)(transforms.Resize(resize)(image))
            out.write(numpy.asarray(image).transpose(2, 0, 1).tobytes())


def write_boxes(out, cases):
    with open(cases) as lines, open(out, "w") as boxes:
        for line in lines:
            height, width, seed, epoch, index = (int(v) for v in line.split()[:5])
            scale_low, scale_high, ratio_low, ratio_high = (float(v) for v in line.split()[5:])
            draws = Draws(seed, epoch, index)
            draws.next()  # the flip's draw
            box = crop_params(height, width, draws, (scale_low, scale_high),
                              (ratio_low, ratio_high))
            boxes.write(" ".join(str(v) for v in box) + "\n")


def write_jpegs(root):
    os.makedirs(root, exist_ok=True)
    for name, size, mode, options in (
            ("420", (53, 37), "RGB", {"subsampling": 2}), ("422", (250, 333), "RGB",
                                                          {"subsampling": 1}),
            ("444", (61, 45), "RGB", {"subsampling": 0}), ("grey", (77, 64), "L", {}),
            ("progressive", (120, 95), "RGB", {"progressive": True})):
        image = noise_image(size[1] // 3 + 1, size[0] // 3 + 1, len(name), mode)
        image = image.resize(size, Image.BILINEAR)
        image.save(f"{root}/{name}.jpg", quality=90, **options)


def write_indexed(root, counts):
    for split, sizes in (("train", [int(c) for c in counts.split(":")]), ("val", [12])):
        os.makedirs(f"{root}/{split}", exist_ok=True)
        index = 0
        for part, size in enumerate(sizes):
            members = []
            for _ in range(size):
                pixels = numpy.zeros((28, 28), numpy.uint8)
                pixels[0, 0], pixels[0, 1] = index % 256, index // 256
                members.append((f"{index:06d}.png", encoded(Image.fromarray(pixels, "L"), "PNG")))
                members.append((f"{index:06d}.cls", str(index % 10).encode()))
                index += 1
            with open(f"{root}/{split}/part-{part}.tar", "wb") as f:
                f.write(tar_bytes(members))


def write_tokens(root):
    rng = numpy.random.default_rng(9)
    members = []
    os.makedirs(f"{root}/train", exist_ok=True)
    listing = open(f"{root}/expected-tokens.txt", "w")
    for i in range(6):
        ids = rng.integers(0, 50, 9 + i)
        listing.write(" ".join(str(v) for v in ids) + "\n")
        if i % 2:
            members.append((f"{i:03d}.bin", ids.astype(numpy.uint16).tobytes()))
        else:
            out = io.BytesIO()
            numpy.save(out, ids.astype(numpy.int32))
            members.append((f"{i:03d}.npy", out.getvalue()))
    with open(f"{root}/train/tokens.tar", "wb") as f:
        f.write(tar_bytes(members))
    listing.close()


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    if command == "webdataset":
        write_webdataset(*arguments)
    elif command == "formats":
        write_formats(*arguments)
    elif command == "broken":
        write_broken(*arguments)
    elif command == "sized":
        write_sized(*arguments)
    elif command == "torchvision":
        root, split, size, resize, seed, epoch, flip = arguments
        write_torchvision(root, split, int(size), int(resize), int(seed), int(epoch), flip == "1")
    elif command == "boxes":
        write_boxes(*arguments)
    elif command == "indexed":
        write_indexed(*arguments)
    elif command == "jpegs":
        write_jpegs(*arguments)
    elif command == "tokens":
        write_tokens(*arguments)
    else:
        sys.exit(f"shard_writer.py: unknown command {command!r}")
