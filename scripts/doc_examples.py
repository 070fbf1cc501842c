#!/usr/bin/env python3
"""Runs the `$ flashrtc ...` examples of the docs and compares what they print with what the docs show.

An example is a fenced block whose first line starts with `$ `: each `$ COMMAND` line is followed by its
output. Each document's commands run in order against a fresh cache directory of its own, shown in the
docs as /tmp/docs-cache, so a later `cache ls` sees the entries an earlier `compile` of that page made. A line `...` in a shown output stands for any number of lines (an excerpt). Values that differ from run
to run (compile times, dates, sizes that include them, cache keys) are compared as placeholders.

Commands are split like a shell would split them but never run by one: leading NAME=VALUE words set the
environment, the next word must be `flashrtc`, and the rest are its arguments.

  doc_examples.py --flashrtc build/host/flashrtc/flashrtc            # check; exit 1 naming each stale example
  doc_examples.py --flashrtc build/host/flashrtc/flashrtc --write    # rewrite the stale outputs in place

--write rewrites whole outputs only; an excerpt that went stale is reported with the full output to edit by
hand. On a machine with a GPU the examples (written on one without) do not apply: exit 77, skipped.
"""
from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOCS = ["README.md", "docs/cli.md", "docs/tuning.md"]
SHOWN_CACHE_DIR = "/tmp/docs-cache"
EXCERPT = "..."
COMMAND_TIMEOUT_S = 900
SKIPPED = 77

# Run-to-run values, replaced by placeholders on both sides before comparing (after spaces are collapsed).
_VOLATILE = [
    (re.compile(r"\b[0-9a-f]{32}\b"), "<key>"),
    (re.compile(r"^[0-9a-f]{16}\b"), "<key>"),  # `cache ls` rows
    (re.compile(r"\b\d{4}-\d{2}-\d{2} \d{2}:\d{2}\b"), "<date>"),
    (re.compile(r"\b\d+(\.\d+)? ms\b"), "<t> ms"),
    (re.compile(r"^compile_ms: \S+"), "compile_ms: <t>"),
    (re.compile(r"\b\d+\.\d (?=(compiled|disk|memory)\b)"), "<t> "),  # `compile --all` rows
    # Entry sizes hold meta.json and the compile log, whose times vary in length.
    (re.compile(r"<t> ms \d+(\.\d+)? (B|KiB|MiB|GiB) <date>"), "<t> ms <size> <date>"),
    (re.compile(r"^size: \d+(\.\d+)? (B|KiB|MiB|GiB)"), "size: <size>"),
    (re.compile(r"\d+(\.\d+)? (B|KiB|MiB|GiB)(?=(, in | kept))"), "<size>"),
]
_KEY = re.compile(r"\b[0-9a-f]{32}\b|^[0-9a-f]{16}\b")  # a key, or the 16-digit prefix `cache ls` shows
_HEX_ARG = re.compile(r"^[0-9a-f]{4,32}$")


def normalized(line: str) -> str:
    text = " ".join(line.split())
    for pattern, placeholder in _VOLATILE:
        text = pattern.sub(placeholder, text)
    return text


@dataclass
class Example:
    doc: Path
    line: int  # 1-based line of the `$ ` line
    indent: str
    command: str
    shown: list[str]  # output lines as shown, indentation removed
    shown_range: tuple[int, int]  # 0-based [start, end) of the output lines in the doc
    actual: list[str] = field(default_factory=list)


def examples_in(doc: Path) -> list[Example]:
    lines = doc.read_text(encoding="utf-8").split("\n")
    found: list[Example] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^(\s*)```", lines[i])
        if not fence:
            i += 1
            continue
        indent = fence.group(1)
        end = i + 1
        while end < len(lines) and not re.match(r"^\s*```\s*$", lines[end]):
            end += 1
        body = [l[len(indent):] if l.startswith(indent) else l.lstrip() for l in lines[i + 1:end]]
        if body and body[0].startswith("$ "):
            starts = [k for k, l in enumerate(body) if l.startswith("$ ")]
            for n, k in enumerate(starts):
                stop = starts[n + 1] if n + 1 < len(starts) else len(body)
                found.append(Example(doc, i + 2 + k, indent, body[k][2:], body[k + 1:stop],
                                     (i + 2 + k, i + 1 + stop)))
        i = end + 1
    return found


def split_command(command: str, flashrtc: str) -> tuple[dict[str, str], list[str]]:
    words = shlex.split(command)
    env: dict[str, str] = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words or words[0] != "flashrtc":
        raise ValueError(f"an example may run flashrtc only: {command!r}")
    return env, [flashrtc] + words[1:]


def matches(shown: list[str], actual: list[str], keys: dict[str, str]) -> bool:
    """Whether actual fits shown (`...` = any lines); on a match, records shown key -> actual key."""
    want = [normalized(l) for l in shown]
    have = [normalized(l) for l in actual]
    while want and want[-1] == "":
        want.pop()
    while have and have[-1] == "":
        have.pop()
    # Glob matching over lines; memo over (i, j) keeps it linear in practice.
    memo: dict[tuple[int, int], list[tuple[int, int]] | None] = {}

    def walk(i: int, j: int) -> list[tuple[int, int]] | None:
        if (i, j) in memo:
            return memo[(i, j)]
        result: list[tuple[int, int]] | None = None
        if i == len(want):
            result = [] if j == len(have) else None
        elif want[i] == EXCERPT:
            for k in range(j, len(have) + 1):
                rest = walk(i + 1, k)
                if rest is not None:
                    result = rest
                    break
        elif j < len(have) and want[i] == have[j]:
            rest = walk(i + 1, j + 1)
            result = None if rest is None else [(i, j)] + rest
        memo[(i, j)] = result
        return result

    sys.setrecursionlimit(max(10000, 4 * (len(want) + len(have))))
    pairs = walk(0, 0)
    if pairs is None:
        return False
    for i, j in pairs:
        for mine, theirs in zip(_KEY.findall(shown[i]), _KEY.findall(actual[j])):
            keys[mine] = theirs
    return True


def translated(argv: list[str], keys: dict[str, str]) -> list[str]:
    """A key prefix the docs show names the key that this run's cache has in its place."""
    out = []
    for word in argv:
        if _HEX_ARG.match(word):
            named = {actual[:len(word)] for shown, actual in keys.items() if shown.startswith(word)}
            if len(named) == 1:
                word = named.pop()
        out.append(word)
    return out


def run(example: Example, flashrtc: str, cache_dir: str, keys: dict[str, str]) -> list[str]:
    env_words, argv = split_command(example.command, flashrtc)
    env = {name: value for name, value in os.environ.items() if not name.startswith("FLASHRTC_")}
    env.update({"FLASHRTC_CACHE_DIR": cache_dir, "LC_ALL": "C.UTF-8", "COLUMNS": "120"})
    env.update(env_words)
    done = subprocess.run(translated(argv, keys), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=COMMAND_TIMEOUT_S, check=False)
    text = done.stdout.decode("utf-8", errors="replace").replace(cache_dir, SHOWN_CACHE_DIR)
    return text.rstrip("\n").split("\n")


def rewrite(doc: Path, stale: list[Example], keys: dict[str, str]) -> None:
    lines = doc.read_text(encoding="utf-8").split("\n")
    for example in sorted(stale, key=lambda e: e.shown_range[0], reverse=True):
        start, end = example.shown_range
        while end > start and lines[end - 1].strip() == "":
            end -= 1
        lines[start:end] = [(example.indent + l).rstrip() for l in example.actual]
        # The command's key prefix follows the key the new output shows.
        env_words, argv = split_command(example.command, "flashrtc")
        command = lines[start - 1]
        for word in argv:
            if _HEX_ARG.match(word) and word in command:
                named = {actual[:len(word)] for shown, actual in keys.items() if shown.startswith(word)}
                if len(named) == 1:
                    command = command.replace(" " + word, " " + named.pop())
        lines[start - 1] = command
    doc.write_text("\n".join(lines), encoding="utf-8")


def has_gpu(flashrtc: str) -> bool:
    return subprocess.run([flashrtc, "info", "--has-gpu"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL, check=False).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--flashrtc", required=True, help="the flashrtc command to run")
    parser.add_argument("--write", action="store_true", help="rewrite stale outputs in place")
    parser.add_argument("docs", nargs="*", help=f"markdown files in order (default: {' '.join(DEFAULT_DOCS)})")
    args = parser.parse_args()
    flashrtc = str(Path(args.flashrtc).resolve())
    docs = [Path(d) if Path(d).is_absolute() else ROOT / d for d in (args.docs or DEFAULT_DOCS)]
    if has_gpu(flashrtc):
        print("*** SKIPPED: the examples show a machine without a GPU; this one has one ***")
        return SKIPPED
    keys: dict[str, str] = {}
    stale_count = 0
    for doc in docs:
        with tempfile.TemporaryDirectory(prefix="flashrtc-doc-examples-") as cache_dir:
            examples = examples_in(doc)
            stale: list[Example] = []
            for example in examples:
                example.actual = run(example, flashrtc, cache_dir, keys)
                if matches(example.shown, example.actual, keys):
                    continue
                stale_count += 1
                stale.append(example)
                where = f"{doc.relative_to(ROOT) if doc.is_relative_to(ROOT) else doc}:{example.line}"
                print(f"STALE {where}: $ {example.command}")
                print("  shown:\n" + "\n".join("    " + l for l in example.shown))
                print("  printed now:\n" + "\n".join("    " + l for l in example.actual))
            print(f"{doc.name}: {len(examples)} examples, {len(stale)} stale")
            if args.write:
                whole = [e for e in stale if EXCERPT not in (l.strip() for l in e.shown)]
                if whole:
                    rewrite(doc, whole, keys)
                for e in stale:
                    if e not in whole:
                        print(f"  {doc.name}:{e.line} is an excerpt: edit it by hand from the output above")
    if stale_count and not args.write:
        print(f"{stale_count} stale examples: run scripts/doc_examples.py --flashrtc PATH --write (excerpts by "
              "hand), or fix the command")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
