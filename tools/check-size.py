#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""tools/check-size.py - no source file over 900 lines, no C function over 100.

A file or a function may be longer only where the file's header (its first
comment) says why, in a line of the form

    Long file: <why>
    Long function: <name> - <why>

The C files are read in kernel style (clang-format keeps it so): a function's
body opens with '{' alone in column 0 and closes with '}' in column 0; its
name is the identifier before the first '(' of the lines above the '{'.
Other sources (.py, .sh) are checked for their length only.

Usage: tools/check-size.py [--all] [--file-max N] [--fn-max N] [PATH...]
  PATH: files or folders (default: the folders of the repository that hold
  code).  Prints path:line: message for each file or function over its limit
  that its header does not excuse, and exits 1 if there is any; with --all
  it lists the excused ones too (marked 'excused') and exits 0.
"""
import os
import re
import subprocess
import sys

DIRS = ["runtime", "transport", "include", "tools", "examples", "python", "bench", "tests"]
EXTS = (".c", ".h", ".py", ".sh")
NAME = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*\(")


def header(lines):
    """The file's header: a C file's first /* comment */ (with the lines above
    it), a script's leading # lines, or a Python module's docstring."""
    text = "\n".join(lines[:400])
    if text.lstrip().startswith(("//", "/*")):
        end = text.find("*/", text.find("/*"))
        return text[:end] if end >= 0 else text
    out = []
    for ln in lines[:400]:
        if ln.startswith("#") or not ln.strip():
            out.append(ln)
        else:
            break
    rest = "\n".join(lines[len(out):400])
    for q in ('"""', "'''"):
        if rest.startswith(q):
            end = rest.find(q, 3)
            out.append(rest[:end] if end >= 0 else rest)
    return "\n".join(out)


def functions(lines):
    """(name, first line, length) of each C function: '{' ... '}' in column 0."""
    out = []
    i = 0
    while i < len(lines):
        if lines[i].rstrip() == "{":
            name = None
            j = i - 1
            while j >= 0 and j >= i - 8 and name is None:
                m = NAME.search(lines[j])
                if m and not lines[j].startswith(("\t", " ")):
                    name = m.group(1)
                    break
                j -= 1
            start = j if name else i
            k = i + 1
            while k < len(lines) and not lines[k].startswith("}"):
                k += 1
            out.append((name or "?", start + 1, k - start + 1))
            i = k
        i += 1
    return out


def files(paths):
    """The files git tracks under @paths (every file there outside a checkout)."""
    try:
        r = subprocess.run(["git", "ls-files", "--"] + paths, capture_output=True, text=True,
                           check=True)
        return [f for f in r.stdout.split() if f.endswith(EXTS) and os.path.isfile(f)]
    except (OSError, subprocess.CalledProcessError):
        out = []
        for p in paths:
            if os.path.isfile(p):
                out.append(p)
            for root, _, names in os.walk(p):
                out += [os.path.join(root, n) for n in names if n.endswith(EXTS)]
        return out


def main(argv):
    show_all = "--all" in argv
    file_max, fn_max = 900, 100
    paths = []
    it = iter(a for a in argv if a != "--all")
    for a in it:
        if a == "--file-max":
            file_max = int(next(it))
        elif a == "--fn-max":
            fn_max = int(next(it))
        else:
            paths.append(a)
    bad = 0
    for f in sorted(files(paths or DIRS)):
        with open(f, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        head = header(lines)
        if len(lines) > file_max:
            ok = "Long file:" in head
            if show_all or not ok:
                print(f"{f}:1: {len(lines)} lines (over {file_max})" + (" excused" if ok else ""))
            bad += not ok
        if not f.endswith((".c", ".h")):
            continue
        for name, start, n in functions(lines):
            if n <= fn_max:
                continue
            ok = re.search(r"Long function: .*\b%s\b" % re.escape(name), head) is not None
            if show_all or not ok:
                print(f"{f}:{start}: {name}() {n} lines (over {fn_max})" +
                      (" excused" if ok else ""))
            bad += not ok
    return 1 if bad and not show_all else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
