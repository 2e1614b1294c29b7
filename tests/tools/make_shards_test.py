"""tools/make_shards.py on small image folders: val labels follow train's classes, a val-only
class, a second run into a folder with shards, a file of another format and an unreadable image
are refused, and a CMYK JPEG is stored as an RGB one while other images are copied as they are.

    make_shards_test.py    (MAKE_SHARDS=PATH runs another copy of the tool, e.g. an older one)
"""
import glob
import io
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import unittest

from PIL import Image

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAKE_SHARDS = os.environ.get("MAKE_SHARDS", os.path.join(REPO, "tools", "make_shards.py"))


def save_image(path, mode="RGB", value=0):
    """Writes a small image in the format its extension names (any case)."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    colour = value if mode == "L" else (value,) * len(mode)
    image_format = {".jpg": "JPEG", ".jpeg": "JPEG"}.get(os.path.splitext(path)[1].lower())
    Image.new(mode, (8, 8), colour).save(path, image_format)


def read_split(folder):
    """The samples of a split folder's shards in key order, each {extension: bytes}."""
    samples = {}
    for shard in sorted(glob.glob(os.path.join(folder, "*.tar"))):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                key, _, extension = member.name.partition(".")
                samples.setdefault(key, {})[extension] = tar.extractfile(member).read()
    return [samples[key] for key in sorted(samples)]


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def shard_bytes(folder):
    shards = sorted(glob.glob(os.path.join(folder, "*", "*.tar")))
    return {path: read_bytes(path) for path in shards}


class MakeShardsTest(unittest.TestCase):
    def setUp(self):
        scratch = tempfile.TemporaryDirectory()
        self.addCleanup(scratch.cleanup)
        self.source = os.path.join(scratch.name, "source")
        self.out = os.path.join(scratch.name, "out")

    def run_tool(self, *arguments):
        environment = dict(os.environ)
        # The tool runs under the test's interpreter rather than starting another.
        environment.setdefault("DPL_PYTHON", sys.executable)
        return subprocess.run([sys.executable, MAKE_SHARDS, self.source, self.out, *arguments],
                              capture_output=True, text=True, env=environment)

    def assert_ran(self, ran):
        self.assertEqual(ran.returncode, 0, ran.stdout + ran.stderr)

    def assert_refused(self, ran, *words):
        """One line on stderr naming each of `words`, no traceback, a nonzero exit."""
        self.assertNotEqual(ran.returncode, 0, ran.stdout)
        self.assertNotIn("Traceback", ran.stderr)
        self.assertEqual(len(ran.stderr.strip().splitlines()), 1, ran.stderr)
        for word in words:
            self.assertIn(word, ran.stderr)

    def test_val_labels_are_trains_class_indices(self):
        for split, classes in (("train", "abc"), ("val", "ac")):
            for name in classes:
                for n in range(2):
                    save_image(os.path.join(self.source, split, name, f"{n}.png"))
        self.assert_ran(self.run_tool())
        labels = {split: [int(sample["cls"])
                         for sample in read_split(os.path.join(self.out, split))]
                  for split in ("train", "val")}
        self.assertEqual(labels["train"], [0, 0, 1, 1, 2, 2])
        self.assertEqual(labels["val"], [0, 0, 2, 2])

    def test_a_val_class_that_train_lacks_is_refused(self):
        for split, classes in (("train", "ab"), ("val", "az")):
            for name in classes:
                save_image(os.path.join(self.source, split, name, "0.png"))
        self.assert_refused(self.run_tool(), os.path.join(self.source, "val"), "z")
        self.assertEqual(shard_bytes(self.out), {})

    def test_a_second_run_into_a_folder_with_shards_is_refused(self):
        for name in "ab":
            for n in range(4):
                save_image(os.path.join(self.source, "train", name, f"{n}.png"), value=n)
        self.assert_ran(self.run_tool("--samples-per-shard", "2"))
        first = shard_bytes(self.out)
        self.assertEqual(len(first), 4)
        ran = self.run_tool("--samples-per-shard", "8")
        self.assert_refused(ran, os.path.join(self.out, "train"), "4 .tar files")
        self.assertEqual(shard_bytes(self.out), first)
        self.assert_ran(self.run_tool("--samples-per-shard", "8", "--overwrite"))
        self.assertEqual(list(shard_bytes(self.out)),
                         [os.path.join(self.out, "train", "train-000000.tar")])
        self.assertEqual(len(read_split(os.path.join(self.out, "train"))), 8)

    def test_uppercase_extensions_are_images_and_other_formats_are_refused(self):
        for name in ("0.JPG", "1.PNG", "2.jpeg", ".DS_Store"):
            path = os.path.join(self.source, "train", "a", name)
            if name.startswith("."):
                with open(path, "wb") as f:
                    f.write(b"Finder's, not an image")
            else:
                save_image(path)
        self.assert_ran(self.run_tool())
        self.assertEqual([sorted(sample) for sample in read_split(os.path.join(self.out, "train"))],
                         [["cls", "jpg"], ["cls", "png"], ["cls", "jpeg"]])
        shutil.rmtree(self.out)
        bmp = os.path.join(self.source, "train", "a", "3.bmp")
        save_image(bmp)
        self.assert_refused(self.run_tool(), bmp, ".jpg, .jpeg, .png and .webp")

    def test_a_file_pillow_cannot_read_is_refused(self):
        broken = os.path.join(self.source, "train", "a", "0.jpg")
        os.makedirs(os.path.dirname(broken))
        with open(broken, "wb") as f:
            f.write(b"not a JPEG at all")
        self.assert_refused(self.run_tool(), broken)

    def test_a_cmyk_jpeg_becomes_rgb_and_other_images_are_copied(self):
        folder = os.path.join(self.source, "train", "a")
        save_image(os.path.join(folder, "0.jpg"), mode="CMYK", value=60)
        save_image(os.path.join(folder, "1.jpg"), mode="RGB", value=90)
        save_image(os.path.join(folder, "2.png"), mode="L", value=30)
        ran = self.run_tool()
        self.assert_ran(ran)
        cmyk, rgb, grey = read_split(os.path.join(self.out, "train"))
        converted = Image.open(io.BytesIO(cmyk["jpg"]))
        self.assertEqual((converted.format, converted.mode), ("JPEG", "RGB"))
        self.assertRegex(ran.stdout, r"converted 1 CMYK JPEGs? to RGB")
        self.assertEqual(rgb["jpg"], read_bytes(os.path.join(folder, "1.jpg")))
        self.assertEqual(grey["png"], read_bytes(os.path.join(folder, "2.png")))


if __name__ == "__main__":
    unittest.main()
