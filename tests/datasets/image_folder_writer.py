"""Writes image folders for the imagefolder plugin's tests with PIL, and the reference pixels
as torchvision's ImageFolder reads them (its file order, PIL's decoding, convert and resize)."""
import os
import sys

import numpy
from PIL import Image

EXTENSIONS = (".png", ".jpg", ".jpeg")


def noise(height, width, channels, seed):
    shape = (height, width) if channels == 1 else (height, width, channels)
    return numpy.random.default_rng(seed).integers(0, 256, shape, dtype=numpy.uint8)


def save(path, image, **options):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    image.save(path, **options)


def standard_folder(root, height=5, width=6):
    """train/cat and train/dog with every kind of image, test/cat and test/dog with one each."""
    grey = lambda seed: Image.fromarray(noise(height, width, 1, seed), "L")
    rgb = lambda seed: Image.fromarray(noise(height, width, 3, seed), "RGB")
    save(f"{root}/train/cat/a.png", grey(1))
    save(f"{root}/train/cat/b.jpg", rgb(2), quality=90)
    save(f"{root}/train/cat/sub/c.png", rgb(3))
    save(f"{root}/train/cat/sub/d.JPEG", grey(4), quality=80)
    with open(f"{root}/train/cat/notes.txt", "w") as f:
        f.write("not an image\n")
    palette = rgb(5).convert("P", palette=Image.ADAPTIVE, colors=16)
    save(f"{root}/train/dog/p.png", palette, transparency=0)
    rgba = rgb(6).convert("RGBA")
    rgba.putalpha(Image.fromarray(noise(height, width, 1, 7), "L"))
    save(f"{root}/train/dog/q.png", rgba)
    save(f"{root}/train/dog/r.png", grey(8).convert("LA"))
    save(f"{root}/train/dog/s.jpg", rgb(9))  # quality 75, 4:2:0 chroma subsampling
    save(f"{root}/train/dog/t.png", grey(10).convert("1"))  # 1 bit per pixel
    save(f"{root}/test/cat/x.png", rgb(11))
    save(f"{root}/test/dog/y.jpg", rgb(12))


def sized_folder(root):
    """Images of several sizes, for resize."""
    for name, (height, width, channels) in {
            "a.png": (5, 6, 3), "b.jpg": (9, 4, 3), "c.png": (12, 13, 1), "d.png": (3, 3, 3),
            "e.png": (7, 8, 3), "f.jpg": (20, 31, 3)}.items():
        array = noise(height, width, channels, len(name) + height)
        image = Image.fromarray(array, "L" if channels == 1 else "RGB")
        save(f"{root}/train/only/{name}", image)


def image_files(root, split):
    """(label, path) in torchvision's ImageFolder order."""
    directory = os.path.join(root, split)
    classes = sorted(entry.name for entry in os.scandir(directory) if entry.is_dir())
    files = []
    for label, name in enumerate(classes):
        for folder, _, names in sorted(os.walk(os.path.join(directory, name), followlinks=True)):
            for file_name in sorted(names):
                if file_name.lower().endswith(EXTENSIONS):
                    files.append((label, os.path.join(folder, file_name)))
    return files


def reference(root, split, mode, size, out):
    """The pixels (HWC bytes, one image after the other) and a 'label path' line per image."""
    with open(out + ".raw", "wb") as pixels, open(out + ".txt", "w") as listing:
        for label, path in image_files(root, split):
            image = Image.open(path).convert(mode)
            if size is not None:
                image = image.resize((size[1], size[0]), Image.BILINEAR)
            pixels.write(numpy.asarray(image).tobytes())
            listing.write(f"{label} {path}\n")


if __name__ == "__main__":
    command, root = sys.argv[1], sys.argv[2]
    if command == "standard":
        standard_folder(root)
    elif command == "sized":
        sized_folder(root)
    elif command == "reference":
        split, mode, size, out = sys.argv[3:7]
        reference(root, split, mode,
                  None if size == "none" else tuple(int(v) for v in size.split("x")), out)
