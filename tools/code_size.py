#!/usr/bin/env python3
"""Lists the C and C++ functions over a line limit and the files over a size limit.

dpl keeps a function to about 60 lines and a file to 500 (docs/style.md: a longer one is a sign
to split), in the host, the plugins, the SDK and the tests alike. This reads the sources as text: comments, strings and preprocessor lines are blanked,
then braces are matched; a brace block whose head has a parameter list and is not a control
statement, a class or a namespace is a function, from its head's first line to its closing brace.
Lambdas and local classes count as part of the function around them.

    tools/code_size.py [--max-function-lines 60] [--max-file-lines 500] [FOLDER ...]

Exits 1 and lists every offender (path:line, the function's head, its length) when there is one.
"""
import argparse
import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
DEFAULT_FOLDERS = ["launcher", "plugins", "models", "datasets", "sdk", "tests"]
SUFFIXES = {".c", ".h", ".cc", ".cpp", ".hpp"}
NOT_FUNCTION_HEADS = re.compile(
    r"^\s*(?:if|for|while|switch|catch|do|else|try|return)\b|"
    r"\b(?:class|struct|union|enum|namespace)\b[^()]*$|=\s*$|=\s*\w*\s*\($")


def blank_comments_and_strings(text):
    """The text with comments, string and character literals and preprocessor lines turned into
    spaces, newlines kept, so line numbers and braces of code stay where they were."""
    out = []
    i, n = 0, len(text)
    at_line_start = True
    while i < n:
        c = text[i]
        if at_line_start and c == "#":
            # A preprocessor line (with its continuations).
            while i < n and text[i] != "\n":
                if text[i] == "\\" and i + 1 < n and text[i + 1] == "\n":
                    out.append(" \n")
                    i += 2
                    continue
                out.append(" ")
                i += 1
            continue
        if c == "/" and text.startswith("//", i):
            while i < n and text[i] != "\n":
                out.append(" ")
                i += 1
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append(re.sub(r"[^\n]", " ", text[i:end]))
            i = end
            continue
        if c == "R" and text.startswith('R"', i):
            match = re.match(r'R"([^(\s]*)\(', text[i:])
            if match:
                terminator = ")" + match.group(1) + '"'
                end = text.find(terminator, i + len(match.group(0)))
                end = n if end < 0 else end + len(terminator)
                out.append(re.sub(r"[^\n]", " ", text[i:end]))
                i = end
                continue
        if c in "\"'" and not (c == "'" and i > 0 and text[i - 1].isalnum()):
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(" " * (min(j + 1, n) - i))
            i = j + 1
            continue
        out.append(c)
        at_line_start = c == "\n" or (at_line_start and c in " \t")
        i += 1
    return "".join(out)


def long_functions(path, limit):
    """(line, head, length) of every function in `path` longer than `limit` lines."""
    code = blank_comments_and_strings(path.read_text(encoding="utf-8", errors="replace"))
    found = []
    stack = []  # per open brace: (is_function_start, head line, head text)
    head_start = 0  # offset where the current statement's text begins
    inside_function = 0
    for offset, c in enumerate(code):
        if c in ";{}":
            if c == "{":
                head = code[head_start:offset]
                is_function = (inside_function == 0 and "(" in head and ")" in head and
                               not NOT_FUNCTION_HEADS.search(head.strip()))
                first = head_start + (len(head) - len(head.lstrip()))
                stack.append((is_function, code.count("\n", 0, first) + 1, " ".join(head.split())))
                if is_function:
                    inside_function += 1
            elif c == "}" and stack:
                is_function, line, head = stack.pop()
                if is_function:
                    inside_function -= 1
                    length = code.count("\n", 0, offset) + 1 - line + 1
                    if length > limit:
                        found.append((line, head[:100], length))
            head_start = offset + 1
    return found


def tracked_sources(folders):
    listed = subprocess.run(["git", "ls-files", "-z", "--", *folders], cwd=ROOT, check=True,
                            capture_output=True).stdout.decode().split("\0")
    return [ROOT / name for name in listed
            if pathlib.Path(name).suffix in SUFFIXES and (ROOT / name).exists()]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-function-lines", type=int, default=60)
    parser.add_argument("--max-file-lines", type=int, default=500)
    parser.add_argument("folders", nargs="*", default=DEFAULT_FOLDERS)
    args = parser.parse_args()
    offenders = 0
    for path in tracked_sources(args.folders):
        name = path.relative_to(ROOT)
        lines = path.read_text(encoding="utf-8", errors="replace").count("\n")
        if lines > args.max_file_lines:
            print(f"{name}: file of {lines} lines (limit {args.max_file_lines})")
            offenders += 1
        for line, head, length in long_functions(path, args.max_function_lines):
            print(f"{name}:{line}: function of {length} lines (limit "
                  f"{args.max_function_lines}): {head}")
            offenders += 1
    if offenders:
        print(f"{offenders} over the limits: split them (docs/style.md, 'one room per job')")
    return 1 if offenders else 0


if __name__ == "__main__":
    sys.exit(main())
