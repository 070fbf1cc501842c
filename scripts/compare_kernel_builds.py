#!/usr/bin/env python3
"""Compiles the same kernel specializations from two kernel-source trees and compares the generated code.

Usage:
  scripts/compare_kernel_builds.py --flashrtc PATH --arch ARCH [--work DIR] [--jobs N] BASE_TREE NEW_TREE

BASE_TREE and NEW_TREE are directories holding kernel_sources/ (checkouts or worktrees of two commits). For
each tree it runs `flashrtc compile --all --arch ARCH --json` (every default specialization for the arch and
every tuned one) with FLASHRTC_KERNEL_DIR=<tree>/kernel_sources and a cache directory of its own under
--work (default: a new temporary directory; a cache left there by an earlier run is reused, its keys cover
the sources). The same flashrtc binary compiles both sides, so only the sources differ; the libraries in
its directory come first on LD_LIBRARY_PATH.

Kernels are matched by name expression and their cubins compared, each a verdict:
  identical     byte for byte the same;
  same code     the same but for debug sections (the line table of -lineinfo moves with the source lines);
  same text     the same machine code (every .text section) but other sections differ: listed, e.g. constants
                NVRTC emits for a class's static constexpr members, which shift symbol indices in .nv.info;
  differs       some .text section differs: the sections that differ are listed, and whether the PTX differs
                with its .loc / .file directives, comments and debug sections stripped.

Exit status: 0 when every kernel is on both sides with the same machine code, 1 when one differs or is on one
side only, 2 when a compile fails or the command cannot run.

Example:
  git worktree add /tmp/kernels-base e71bbf6
  scripts/compare_kernel_builds.py --flashrtc /tmp/flashrtc-base/flashrtc --arch sm_90a /tmp/kernels-base .
"""

import argparse
import json
import os
import re
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

# Sections that carry line and debug information only: they move with the source lines, not the code.
DEBUG_SECTION = re.compile(r"^\.(rela?\.)?(nv_)?debug")


def fail(message):
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def elf_sections(data):
    """{name: bytes} of a 64-bit little-endian ELF (a cubin); NOBITS sections map to their size."""
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        raise ValueError("not a 64-bit little-endian ELF")
    shoff = struct.unpack_from("<Q", data, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    headers = []
    for i in range(shnum):
        name, kind, _flags, _addr, offset, size = struct.unpack_from("<IIQQQQ", data, shoff + i * shentsize)
        headers.append((name, kind, offset, size))
    names_offset = headers[shstrndx][2]
    sections = {}
    for name, kind, offset, size in headers:
        end = data.index(b"\0", names_offset + name)
        label = data[names_offset + name:end].decode("ascii", "replace")
        content = str(size).encode() if kind == 8 else data[offset:offset + size]  # 8: SHT_NOBITS
        if label in sections:
            label = f"{label}#{len(sections)}"
        sections[label] = content
    return sections


def code_sections(sections):
    return {name: content for name, content in sections.items() if not DEBUG_SECTION.match(name)}


def stripped_ptx(text):
    """The PTX without comments, .loc / .file directives, blank lines and the debug sections after the code."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"//.*", "", line).strip()
        if line.startswith(".section"):
            break
        if not line or line.startswith(".loc") or line.startswith(".file"):
            continue
        lines.append(line)
    return "\n".join(lines)


def compile_tree(flashrtc, arch, tree, cache, jobs):
    """{name expression: entry directory} of every kernel `compile --all` builds from tree."""
    sources = Path(tree).resolve() / "kernel_sources"
    if not sources.is_dir():
        fail(f"{sources} is not a directory")
    env = dict(os.environ, FLASHRTC_KERNEL_DIR=str(sources), FLASHRTC_CACHE_DIR=str(cache))
    # The libraries beside the command come first: a build's flashrtc would otherwise load its build tree's,
    # which may have changed since.
    libraries = str(Path(flashrtc).resolve().parent)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(filter(None, [libraries, os.environ.get("LD_LIBRARY_PATH")]))
    command = [flashrtc, "compile", "--all", "--arch", arch, "--json"]
    if jobs:
        command += ["--jobs", str(jobs)]
    print(f"compiling {sources} for {arch} (cache {cache})", file=sys.stderr, flush=True)
    try:
        run = subprocess.run(command, env=env, capture_output=True, text=True)
    except OSError as e:
        fail(f"{flashrtc}: {e}")
    kernels, failures, summary = {}, [], None
    for line in run.stdout.splitlines():
        if not line.strip():
            continue
        row = json.loads(line)
        if "summary" in row:
            summary = row["summary"]
        elif "error" in row:
            failures.append(f"{row['specialization']}: {row['error']['message']}")
        else:
            kernel = row["kernel"]
            if not kernel.get("entry_dir"):
                fail(f"{kernel['name_expression']} has no cache entry (is the disk cache off?)")
            kernels[kernel["name_expression"]] = Path(kernel["entry_dir"])
    if failures or run.returncode != 0 or summary is None:
        for failure in failures:
            print(f"compile failed: {failure}", file=sys.stderr)
        print(run.stderr, file=sys.stderr)
        fail(f"{' '.join(command)} failed for {sources} (exit {run.returncode})")
    return kernels


def compare(base_entry, new_entry):
    """(verdict, details): verdict "identical", "same code", "same text" or "differs" (the module docstring)."""
    base_cubin = (base_entry / "kernel.cubin").read_bytes()
    new_cubin = (new_entry / "kernel.cubin").read_bytes()
    if base_cubin == new_cubin:
        return "identical", ""
    base_code = code_sections(elf_sections(base_cubin))
    new_code = code_sections(elf_sections(new_cubin))
    if base_code == new_code:
        return "same code", ""
    differing = sorted(name for name in base_code.keys() | new_code.keys()
                       if base_code.get(name) != new_code.get(name))
    sections = ", ".join(name if len(name) <= 40 else name[:40] + "..." for name in differing)
    if not any(name.startswith(".text") for name in differing):
        return "same text", f"sections {sections}"
    base_ptx = stripped_ptx((base_entry / "kernel.ptx").read_text())
    new_ptx = stripped_ptx((new_entry / "kernel.ptx").read_text())
    ptx = "PTX the same" if base_ptx == new_ptx else "PTX differs"
    return "differs", f"sections {sections}; {ptx} (stripped of .loc, .file, comments and debug sections)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--flashrtc", required=True, help="the flashrtc command that compiles both trees")
    parser.add_argument("--arch", required=True, help="target architecture, e.g. sm_90a or sm_80")
    parser.add_argument("--work", help="directory for the two caches (default: a new temporary directory)")
    parser.add_argument("--jobs", type=int, help="parallel compiles (default: flashrtc's, the number of cores)")
    parser.add_argument("base", help="the tree to compare against (holds kernel_sources/)")
    parser.add_argument("new", help="the tree under test (holds kernel_sources/)")
    args = parser.parse_args()

    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="compare_kernel_builds."))
    sides = {}
    for label, tree in (("base", args.base), ("new", args.new)):
        cache = work / f"cache-{label}-{args.arch}"
        cache.mkdir(parents=True, exist_ok=True)
        sides[label] = compile_tree(args.flashrtc, args.arch, tree, cache, args.jobs)
    base, new = sides["base"], sides["new"]

    counts = {"identical": 0, "same code": 0, "same text": 0, "differs": 0}
    notes, problems = [], []
    for name in sorted(base.keys() & new.keys()):
        verdict, details = compare(base[name], new[name])
        counts[verdict] += 1
        if verdict == "same text":
            notes.append(f"same text: {name}: {details}")
        elif verdict == "differs":
            problems.append(f"differs: {name}: {details}")
    problems += [f"base only: {name}" for name in sorted(base.keys() - new.keys())]
    problems += [f"new only: {name}" for name in sorted(new.keys() - base.keys())]

    compared = sum(counts.values())
    print(f"{args.arch}: {compared} kernels compared ({len(base)} base, {len(new)} new): "
          f"{counts['identical']} identical, {counts['same code']} same code (debug sections differ), "
          f"{counts['same text']} same text (other sections differ), {counts['differs']} differ")
    for line in notes + problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
