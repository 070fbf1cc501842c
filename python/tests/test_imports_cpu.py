"""The flashrtc package's modules form a one-way chain, read from their sources with ast (nothing of
flashrtc is imported; no torch, no library needed):

- no import cycle, counting the imports inside functions too; only the package's own modules are nodes
  (torch and transformers are third-party: `import torch` is no edge);
- no module takes a private name (a leading underscore) from a sibling, by `from .x import _name` or as
  `x._name` after `from . import x`: what modules share is public within the package;
- an import of a package module inside a function is only of a module that imports torch at its top
  (the torch operators, loaded as torch is, since torch is optional); everything else is imported at the top;
- `import flashrtc` does not reach a module that imports torch or transformers at its top.

Usage: python3 python/tests/test_imports_cpu.py [-v]. Exits 0 when all hold, 1 naming each cycle or name.
"""
import ast
import re
import tempfile
import unittest
from pathlib import Path
from typing import Dict, List, NamedTuple, Optional

PACKAGE = "flashrtc"
PACKAGE_DIR = Path(__file__).resolve().parents[1] / PACKAGE
OPTIONAL_DEPENDENCIES = ("torch", "transformers")


class Import(NamedTuple):
    importer: str      # dotted module name, e.g. "flashrtc._forward"
    target: str        # the package module it imports
    line: int
    lazy: bool         # inside a function
    names: tuple       # names taken from target (not submodules); () for a module import


class Module(NamedTuple):
    name: str
    imports: List[Import]
    private_uses: List[str]    # "line N: ..." for each private name taken from a sibling
    optional_at_top: List[str]  # torch / transformers imported at the module's top


def module_names(package_dir: Path) -> Dict[str, Path]:
    """Dotted name -> file, for the package and its modules (subpackages too)."""
    names = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def _owning(dotted: str, known) -> Optional[str]:
    """The package module a dotted name lives in: the longest known prefix."""
    parts = dotted.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class _Reader(ast.NodeVisitor):
    def __init__(self, name: str, is_package: bool, known):
        self.name, self.known = name, known
        self.package = name if is_package else name.rpartition(".")[0]
        self.depth = 0  # functions entered
        self.imports: List[Import] = []
        self.private_uses: List[str] = []
        self.optional_at_top: List[str] = []
        self.module_aliases: Dict[str, str] = {}  # local name -> the sibling module it is bound to

    def _function(self, node):
        self.depth += 1
        self.generic_visit(node)
        self.depth -= 1

    visit_FunctionDef = visit_AsyncFunctionDef = visit_Lambda = _function

    def _add(self, target, line, names=()):
        if target != self.name:
            self.imports.append(Import(self.name, target, line, self.depth > 0, tuple(names)))

    def visit_Import(self, node):
        for alias in node.names:
            top = alias.name.split(".")[0]
            if top in OPTIONAL_DEPENDENCIES and self.depth == 0:
                self.optional_at_top.append(f"line {node.lineno}: import {alias.name}")
            target = _owning(alias.name, self.known) if top == PACKAGE else None
            if target is not None:
                self._add(target, node.lineno)
                if alias.asname:
                    self.module_aliases[alias.asname] = target

    def visit_ImportFrom(self, node):
        if node.level:
            base = self.package.split(".")
            if node.level > 1:
                base = base[:-(node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
            if source.split(".")[0] in OPTIONAL_DEPENDENCIES and self.depth == 0:
                self.optional_at_top.append(f"line {node.lineno}: from {source} import ...")
        target = _owning(source, self.known)
        if target is None:
            return
        names = []
        for alias in node.names:
            submodule = f"{source}.{alias.name}"
            if submodule in self.known:  # from . import _library: a module, not a name
                self._add(submodule, node.lineno)
                self.module_aliases[alias.asname or alias.name] = submodule
            else:
                names.append(alias.name)
                if _is_private(alias.name) and target != self.name:
                    self.private_uses.append(f"line {node.lineno}: from {source} import {alias.name}")
        if names:
            self._add(target, node.lineno, names)

    def visit_Attribute(self, node):
        if isinstance(node.value, ast.Name) and _is_private(node.attr):
            owner = self.module_aliases.get(node.value.id)
            if owner is not None and owner != self.name:
                self.private_uses.append(f"line {node.lineno}: {node.value.id}.{node.attr} ({owner})")
        self.generic_visit(node)


def read_package(package_dir: Path) -> Dict[str, Module]:
    known = module_names(package_dir)
    modules = {}
    for name, path in known.items():
        reader = _Reader(name, path.name == "__init__.py", known)
        reader.visit(ast.parse(path.read_text(), str(path)))
        modules[name] = Module(name, reader.imports, reader.private_uses, reader.optional_at_top)
    return modules


def _edges(modules, lazy_too=True) -> Dict[str, Dict[str, List[Import]]]:
    graph = {name: {} for name in modules}
    for module in modules.values():
        for imp in module.imports:
            if lazy_too or not imp.lazy:
                graph[imp.importer].setdefault(imp.target, []).append(imp)
    return graph


def _describe(imp: Import) -> str:
    return f"line {imp.line}{', in a function' if imp.lazy else ''}"


def cycles(modules) -> List[str]:
    """The import cycles, as 'a -> b (line N) -> a (line M)': the shortest through each module that is on
    one."""
    graph = _edges(modules)
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def connect(node):  # Tarjan's algorithm
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for successor in graph[node]:
            if successor not in index:
                connect(successor)
                low[node] = min(low[node], low[successor])
            elif successor in on_stack:
                low[node] = min(low[node], index[successor])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(set(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    found = []
    for component in components:
        seen = set()
        for member in sorted(component):  # the shortest cycle through each member, each cycle once
            path = _path_back(graph, component, member)
            turn = path.index(min(path[:-1]))
            path = path[turn:-1] + path[:turn] + [path[turn]]
            if tuple(path) in seen:
                continue
            seen.add(tuple(path))
            steps = [path[0]] + [f"-> {b} ({_describe(graph[a][b][0])})" for a, b in zip(path, path[1:])]
            found.append(" ".join(steps))
    return found


def _path_back(graph, component, start) -> List[str]:
    """A shortest path start -> ... -> start inside the component (breadth first)."""
    parents, frontier = {}, [start]
    while frontier:
        following = []
        for node in frontier:
            for successor in sorted(graph[node]):
                if successor not in component:
                    continue
                if successor == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return list(reversed(path)) + [start]
                if successor not in parents:
                    parents[successor] = node
                    following.append(successor)
        frontier = following
    raise AssertionError(f"no cycle through {start}")


class ImportChain(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.modules = read_package(PACKAGE_DIR)

    def assert_none(self, found, heading):
        if found:
            self.fail(heading + ":\n  " + "\n  ".join(found))

    def test_the_package_is_found(self):
        self.assertIn(PACKAGE, self.modules, f"no {PACKAGE}/__init__.py under {PACKAGE_DIR.parent}")
        self.assertGreater(len(self.modules), 1)

    def test_no_import_cycle(self):
        self.assert_none(cycles(self.modules), "import cycles (imports inside functions count)")

    def test_no_private_name_from_a_sibling(self):
        found = [f"{name} {use}" for name, module in sorted(self.modules.items()) for use in module.private_uses]
        self.assert_none(found, "private names taken from sibling modules (make them public within the "
                                "package, or keep them in their module)")

    def test_lazy_imports_are_only_of_modules_that_import_torch(self):
        found = [f"{imp.importer} imports {imp.target} in a function (line {imp.line})"
                 for name, module in sorted(self.modules.items()) for imp in module.imports
                 if imp.lazy and not self.modules[imp.target].optional_at_top]
        self.assert_none(found, "imports inside functions of modules that need no torch (import them at the top)")

    def test_importing_the_package_imports_no_optional_dependency(self):
        graph = _edges(self.modules, lazy_too=False)
        reached, frontier = {PACKAGE}, [PACKAGE]
        while frontier:
            frontier = [t for node in frontier for t in graph[node] if t not in reached]
            reached.update(frontier)
        found = [f"{name}: {line}" for name in sorted(reached) for line in self.modules[name].optional_at_top]
        self.assert_none(found, f"`import {PACKAGE}` reaches top-level imports of "
                                f"{' or '.join(OPTIONAL_DEPENDENCIES)}")


class TheChecksOnATangle(unittest.TestCase):
    """The checks above find what they are for, on a made-up package that has each fault."""

    def test_each_fault_is_named(self):
        sources = {
            "__init__.py": "from .a import f\nfrom . import heavy\n",
            "a.py": "from .b import _helper\n\ndef f():\n    from . import b\n    return b._state\n",
            "b.py": "import torch\nfrom .a import f\n",
            "heavy.py": "import torch\n",
            "c.py": "def g():\n    from .a import f\n    import flashrtc.b as bee\n    return bee._x\n",
        }
        with tempfile.TemporaryDirectory() as folder:
            package = Path(folder) / PACKAGE
            package.mkdir()
            for name, text in sources.items():
                (package / name).write_text(text)
            modules = read_package(package)
        self.assertEqual(cycles(modules), ["flashrtc.a -> flashrtc.b (line 1) -> flashrtc.a (line 2)"])
        self.assertEqual(modules["flashrtc.a"].private_uses,
                         ["line 1: from flashrtc.b import _helper", "line 5: b._state (flashrtc.b)"])
        self.assertEqual(modules["flashrtc.c"].private_uses, ["line 4: bee._x (flashrtc.b)"])
        lazy = [(imp.importer, imp.target) for module in modules.values() for imp in module.imports if imp.lazy]
        self.assertEqual(sorted(lazy), [("flashrtc.a", "flashrtc.b"), ("flashrtc.c", "flashrtc.a"),
                                        ("flashrtc.c", "flashrtc.b")])
        self.assertEqual(modules["flashrtc.heavy"].optional_at_top, ["line 1: import torch"])

        class Check(ImportChain):
            pass
        Check.modules = modules
        for test, fragment in (("test_no_import_cycle", "flashrtc.a -> flashrtc.b"),
                               ("test_no_private_name_from_a_sibling", "from flashrtc.b import _helper"),
                               ("test_lazy_imports_are_only_of_modules_that_import_torch",
                                "flashrtc.c imports flashrtc.a in a function (line 2)"),
                               ("test_importing_the_package_imports_no_optional_dependency",
                                "flashrtc.heavy: line 1: import torch")):
            with self.subTest(test=test), self.assertRaisesRegex(AssertionError, re.escape(fragment)):
                getattr(Check(test), test)()


if __name__ == "__main__":
    unittest.main()
