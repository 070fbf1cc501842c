#!/usr/bin/env python3
"""The include rule of the runtime's layers, checked over the tree (tests/layers runs it under ctest).

    python3 scripts/check_layers.py [--root DIR]          # exit 1 naming each include that breaks the rule
    python3 scripts/check_layers.py --graph               # the layer graph as a Mermaid flowchart
    python3 scripts/check_layers.py --write-docs          # puts that graph into docs/architecture.md
    python3 scripts/check_layers.py --check-docs          # exit 1 when docs/architecture.md's graph is stale

The layers are the folders of runtime/src. What each builds on is read from runtime/CMakeLists.txt's
`target_link_libraries(flashrtc_<layer> PUBLIC flashrtc_<lower> ...)` lines, the one place the order is written;
a layer may include its own files and those of the layers it builds on, directly or through others: never one
above, never a sibling (cache and driver). Public headers (runtime/include/flashrtc) belong to the layer that
PUBLIC_HEADER_LAYERS names; a new header must be named there. Kernel sources include only kernel sources;
runtime files reach them from the families layer up (shape headers both compilers read). host/, tools/,
bench/ and reference/ use public headers only. tests/ may reach anything.
"""
from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

PUBLIC_HEADER_LAYERS = {
    "export.hpp": "support",
    "types.hpp": "support",
    "error.hpp": "support",
    "arch.hpp": "support",
    "config.hpp": "support",
    "log_writer.hpp": "support",
    "tile.hpp": "support",
    "attention_params.hpp": "support",
    "attention_variants.hpp": "support",
    "kvcache_params.hpp": "support",
    "varlen_params.hpp": "support",
    "bounded_read.hpp": "support",
    "compiled_kernel.hpp": "compile",
    "cache_entries.hpp": "cache",
    "device.hpp": "driver",
    "device_memory.hpp": "driver",
    "kernel_launch.hpp": "driver",
    "launch_shape.hpp": "driver",
    "kernel_family.hpp": "families",
    "tile_config.hpp": "families",
    "kernel.hpp": "families",
    "tuning_db.hpp": "tuning",
    "tuning_space.hpp": "tuning",
    "config_resolution.hpp": "tuning",
    "attention.hpp": "ops",
    "attention_backward.hpp": "ops",
    "attention_kvcache.hpp": "ops",
    "c_api.h": "ops",
    "flashrtc.hpp": "ops",
}

SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".cuh", ".cu"}
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
LINK = re.compile(r"target_link_libraries\(\s*flashrtc_(\w+)\s+PUBLIC\s+([^)]*)\)")
GRAPH_BEGIN = "<!-- include-graph:begin -->"
GRAPH_END = "<!-- include-graph:end -->"


class Tree:
    def __init__(self, root: Path):
        self.root = root
        self.src = root / "runtime" / "src"
        self.public = root / "runtime" / "include"
        self.kernels = root / "kernel_sources"
        self.layers, self.builds_on = read_layers(root / "runtime" / "CMakeLists.txt")
        self.below = {layer: reachable(layer, self.builds_on) for layer in self.layers}
        self.include_roots = [self.src, self.public, self.kernels, root / "tools" / "include",
                              root / "reference" / "include"]

    def rel(self, path: Path) -> str:
        return path.relative_to(self.root).as_posix()

    def resolve(self, including: Path, name: str) -> Path | None:
        for base in [including.parent] + self.include_roots:
            candidate = base / name
            if candidate.is_file():
                return candidate
        return None

    def unit_of(self, path: Path) -> str | None:
        """The layer or part of the tree a file belongs to: a layer name, "kernel_sources", "outside" (host,
        tools, bench, reference), "tests", or None where no rule applies."""
        parts = path.relative_to(self.root).parts
        if parts[:2] == ("runtime", "src"):
            if len(parts) > 3 and parts[2] in self.layers:
                return parts[2]
            return "runtime/src"  # outside every layer folder: itself a finding
        if parts[:3] == ("runtime", "include", "flashrtc"):
            return PUBLIC_HEADER_LAYERS.get(parts[3], "unclassified public header")
        if parts[0] == "kernel_sources":
            return "kernel_sources"
        if parts[0] in ("host", "tools", "bench", "reference"):
            return "outside"
        if parts[0] == "tests":
            return "tests"
        return None

    def allowed(self, frm: str, to: str) -> bool:
        if frm == "tests":
            return True
        if frm == "kernel_sources":
            return to == "kernel_sources"
        if frm == "outside":
            return to in ("outside",) or self.is_public(to)
        if frm not in self.layers:
            return False
        if to == "kernel_sources":
            return "families" == frm or "families" in self.below[frm]
        return to == frm or to in self.below[frm]

    def is_public(self, unit: str) -> bool:
        return unit in self.layers  # a classified public header; src files are checked by path below


def read_layers(cmake: Path) -> tuple[list[str], dict[str, set[str]]]:
    text = cmake.read_text()
    order = re.search(r"set\(FLASHRTC_LAYERS\s+([^)]*)\)", text)
    if not order:
        sys.exit(f"{cmake}: no set(FLASHRTC_LAYERS ...) line")
    layers = order.group(1).split()
    builds_on: dict[str, set[str]] = {layer: set() for layer in layers}
    for frm, targets in LINK.findall(text):
        if frm in builds_on:
            builds_on[frm] |= {t[len("flashrtc_"):] for t in targets.split()
                               if t.startswith("flashrtc_") and t[len("flashrtc_"):] in builds_on}
    return layers, builds_on


def reachable(layer: str, builds_on: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    stack = list(builds_on[layer])
    while stack:
        lower = stack.pop()
        if lower not in seen:
            seen.add(lower)
            stack.extend(builds_on[lower])
    return seen


def source_files(tree: Tree):
    for top in ("runtime", "kernel_sources", "host", "tools", "bench", "reference", "tests"):
        base = tree.root / top
        if base.is_dir():
            for path in sorted(base.rglob("*")):
                if path.suffix in SOURCE_SUFFIXES and path.is_file():
                    yield path


def check(tree: Tree) -> tuple[list[str], Counter]:
    problems: list[str] = []
    edges: Counter = Counter()
    for path in source_files(tree):
        frm = tree.unit_of(path)
        if frm is None:
            continue
        where = tree.rel(path)
        if frm == "runtime/src":
            problems.append(f"{where}: outside every layer folder of runtime/src ({', '.join(tree.layers)})")
            continue
        if frm == "unclassified public header":
            problems.append(f"{where}: a public header that scripts/check_layers.py's PUBLIC_HEADER_LAYERS "
                            "does not name: give it a layer there")
            continue
        public_header = where.startswith("runtime/include/")
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            match = INCLUDE.match(line)
            if not match:
                continue
            name = match.group(1)
            target = tree.resolve(path, name)
            if target is None:
                continue  # generated or third-party; the compiler reports what is missing
            to = tree.unit_of(target)
            target_rel = tree.rel(target)
            if to in (None, "tests") and frm != "tests":
                problems.append(f"{where}:{number}: includes \"{name}\" ({target_rel}), which no layer owns")
                continue
            private = target_rel.startswith("runtime/src/")
            if frm == "outside" and private:
                problems.append(f"{where}:{number}: includes the runtime's internal \"{name}\" ({target_rel}): "
                                "host/, tools/, bench/ and reference/ use the public headers only")
                continue
            if public_header and private:
                problems.append(f"{where}:{number}: a public header includes the internal \"{name}\"")
                continue
            if frm in tree.layers and to in tree.layers and frm != to:
                edges[(frm, to)] += 1
            if not tree.allowed(frm, to):
                how = "sideways" if (to in tree.layers and frm in tree.layers and
                                     frm not in tree.below[to]) else "up"
                problems.append(f"{where}:{number}: {frm} includes \"{name}\" of {to}: runs {how} across "
                                f"layers ({frm} builds on {', '.join(sorted(tree.below.get(frm, ()))) or 'nothing'})")
    return problems, edges


def mermaid(tree: Tree, edges: Counter) -> str:
    lines = ["```mermaid", "flowchart BT"]
    for layer in tree.layers:
        files = len([p for p in (tree.src / layer).glob("*") if p.suffix in SOURCE_SUFFIXES])
        lines.append(f'  {layer}["{layer}/ ({files} files)"]')
    for (frm, to), count in sorted(edges.items()):
        lines.append(f"  {frm} -->|{count}| {to}")
    lines.append("```")
    lines.append("")
    lines.append("Arrows point from a layer to one it includes, labelled with the number of include lines "
                 "(`python3 scripts/check_layers.py --write-docs` regenerates this graph; the cpu suite "
                 "fails when it is stale).")
    return "\n".join(lines)


def docs_with_graph(doc: Path, graph: str) -> tuple[str, str]:
    text = doc.read_text()
    if GRAPH_BEGIN not in text or GRAPH_END not in text:
        sys.exit(f"{doc}: no {GRAPH_BEGIN} ... {GRAPH_END} section")
    head, rest = text.split(GRAPH_BEGIN, 1)
    _, tail = rest.split(GRAPH_END, 1)
    return text, f"{head}{GRAPH_BEGIN}\n{graph}\n{GRAPH_END}{tail}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--graph", action="store_true")
    mode.add_argument("--write-docs", action="store_true")
    mode.add_argument("--check-docs", action="store_true")
    args = parser.parse_args()
    tree = Tree(args.root.resolve())
    problems, edges = check(tree)
    if args.graph:
        print(mermaid(tree, edges))
        return 0
    if args.write_docs or args.check_docs:
        doc = tree.root / "docs" / "architecture.md"
        old, new = docs_with_graph(doc, mermaid(tree, edges))
        if args.write_docs:
            doc.write_text(new)
            return 0
        if old != new:
            print(f"{tree.rel(doc)}: the include graph is stale; run python3 scripts/check_layers.py --write-docs")
            return 1
        return 0
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} include(s) break the layer rule")
        return 1
    print(f"layer rule holds: {len(tree.layers)} layers ({' < '.join(tree.layers)}), "
          f"{sum(edges.values())} include lines across layers")
    return 0


if __name__ == "__main__":
    sys.exit(main())
