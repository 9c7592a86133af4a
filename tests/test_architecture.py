"""The package's architecture, checked from its source with ``ast`` (nothing is imported).

The rules are the tables just below; change them there. Every failure lists every offender,
one per line. The detectors themselves are tested on small fake packages written to
``tmp_path`` (the ``test_detector_*`` tests at the end), so a failure of a ``test_package_*``
test is the package's, not the checker's.

Every ``import`` statement counts, wherever it is: at module level (inside ``try``/``if`` too),
in a class body, or in a function. ``from autotune.x import y`` is an import of the module
``autotune.x.y`` where that module exists, else of ``autotune.x``; relative imports are
resolved against the importing module. Importing ``autotune.x.y`` does not count as importing
the package ``autotune.x``'s ``__init__`` (else every module would be in a cycle with
``autotune/__init__.py``), but ``from autotune.x import Name`` does.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections import deque
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "autotune"

# ---------------------------------------------------------------------------------------------
# The rules
# ---------------------------------------------------------------------------------------------

# Which layers each layer may import, besides itself (imports within a layer are always fine;
# cycles are a separate check). A module's layer is its folder: autotune/<layer>/...; the
# leaf modules are the lowest layer.
MAY_IMPORT: dict[str, set[str]] = {
    # autotune/__main__.py, autotune/benchmark.py: thin shims, which start the trials' fork
    # server (runtime) before the app's imports
    "entry": {"app", "runtime"},
    "app": {
        "api",
        "report",
        "online",
        "tuner",
        "diagnose",
        "verify",
        "session",
        "runtime",
        "pipeline",
        "leaf",
    },
    "report": {"tuner", "diagnose", "session", "runtime", "pipeline", "leaf"},
    "online": {"tuner", "session", "runtime", "pipeline", "leaf"},  # the tuner's rules, in a run
    "tuner": {"session", "runtime", "pipeline", "leaf"},  # not report, not diagnose
    "diagnose": {"session", "runtime", "pipeline", "leaf"},  # not report, not tuner
    "verify": {
        "tuner",
        "session",
        "runtime",
        "pipeline",
        "leaf",
    },  # the study record via the store
    "session": {"runtime", "pipeline", "leaf"},
    "runtime": {"pipeline", "leaf"},
    "pipeline": {"leaf"},
    "leaf": set(),
    "api": {"online", "pipeline"},  # autotune/__init__.py: the public API
}
LAYER_FOLDERS = set(MAY_IMPORT) - {"entry", "leaf", "api"}  # the rest are folders
LEAF_MODULES = {"errors", "schema", "machine"}  # autotune/<name>.py
ENTRY_SHIMS = {
    "autotune.__main__",
    "autotune.benchmark",
    "autotune.selfcheck",
    "autotune.shard",
    "autotune.slow_storage",
}
# The one import against the table: the public API names ``autotune.tune``, the tune mode's
# entry point, for type checkers only (``if TYPE_CHECKING:``); each public name is imported
# when first asked for, so that ``import autotune`` in a training script stays light and
# makes no cycle at import time.
LAZY_ENTRY = "autotune:TYPE_CHECKING"

# Imports inside a function are allowed only of these (and their submodules) ...
OPTIONAL_HEAVY_IMPORTS = {"nvidia.dali", "pynvml", "optuna_dashboard"}
# ... or anything in these child-process entry functions ("module:qualified.function").
CHILD_PROCESS_ENTRIES: set[str] = {LAZY_ENTRY}

MAX_MODULE_LINES = 300
# The store is the only door to what a study keeps on its trials and itself: these Optuna
# attributes and methods are named in no other module (a renamed key breaks nothing silently).
STORE = "autotune.tuner.store"
STORE_DOOR = {"user_attrs", "system_attrs", "set_user_attr", "set_system_attr", "enqueue_trial"}
MAX_FUNCTION_LINES = 60
LONG_FUNCTIONS_OK = {"autotune.report.plots"}  # modules exempt from MAX_FUNCTION_LINES


# ---------------------------------------------------------------------------------------------
# Reading a package
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Import:
    importer: str  # the importing module
    target: str  # the imported module, resolved (or, for `from m import name`, m)
    line: int
    function: str | None  # qualified name of the enclosing function; None outside functions
    names: tuple[str, ...] = ()  # for `from m import a, b`: ("m.a", "m.b")

    @property
    def where(self) -> str:
        return f"{self.importer}:{self.function}" if self.function else self.importer


@dataclass(frozen=True)
class Function:
    module: str
    qualname: str
    line: int
    length: int


@dataclass
class Module:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    lines: int


class Package:
    """Every module under ``root`` (a package folder), parsed, and what each imports."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.name = root.name
        self.modules: dict[str, Module] = {}
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root.parent).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            text = path.read_text(encoding="utf-8")
            self.modules[".".join(parts)] = Module(
                ".".join(parts),
                path,
                is_package,
                ast.parse(text, str(path)),
                len(text.splitlines()),
            )
        self.imports: list[Import] = []
        self.functions: list[Function] = []
        for module in self.modules.values():
            _Visitor(self, module).visit(module.tree)

    def relpath(self, module: str) -> str:
        return str(self.modules[module].path.relative_to(self.root.parent))

    def is_internal(self, name: str) -> bool:
        return name == self.name or name.startswith(self.name + ".")

    def known(self, name: str) -> str | None:
        """The longest prefix of ``name`` that is one of the package's modules."""
        parts = name.split(".")
        while parts:
            if ".".join(parts) in self.modules:
                return ".".join(parts)
            parts.pop()
        return None

    def graph(self) -> dict[str, dict[str, Import]]:
        """importer -> {imported module: its first import site (module level first)}."""
        edges: dict[str, dict[str, Import]] = {name: {} for name in self.modules}
        order = sorted(self.imports, key=lambda i: (i.function is not None, i.line))
        for imp in order:
            target = self.known(imp.target) if self.is_internal(imp.target) else None
            if target and target != imp.importer:
                edges[imp.importer].setdefault(target, imp)
        return edges


class _Visitor(ast.NodeVisitor):
    def __init__(self, package: Package, module: Module) -> None:
        self.package = package
        self.module = module
        self.scope: list[str] = []  # enclosing class and function names
        self.function_depth = 0

    def _function(self) -> str | None:
        return ".".join(self.scope) if self.function_depth else None

    def _add(self, target: str, line: int, names: tuple[str, ...] = ()) -> None:
        self.package.imports.append(
            Import(self.module.name, target, line, self._function(), names)
        )

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.package.functions.append(
            Function(
                self.module.name,
                ".".join(self.scope),
                node.lineno,
                (node.end_lineno or node.lineno) - node.lineno + 1,
            )
        )
        self.function_depth += 1
        self.generic_visit(node)
        self.function_depth -= 1
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef  # noqa: N815

    def visit_If(self, node: ast.If) -> None:
        """Imports under ``if TYPE_CHECKING:`` never run: seen as inside a function of
        that name (``autotune:TYPE_CHECKING``)."""
        if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
            self.generic_visit(node)
            return
        self.scope.append("TYPE_CHECKING")
        self.function_depth += 1
        for child in node.body:
            self.visit(child)
        self.function_depth -= 1
        self.scope.pop()
        for child in node.orelse:
            self.visit(child)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self._add(alias.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = resolve_from(self.module.name, self.module.is_package, node.level, node.module)
        names = tuple(f"{base}.{a.name}" for a in node.names if a.name != "*")
        targets: list[str] = []
        for full in names or (base,):
            target = full if full in self.package.modules else base
            if target not in targets:
                targets.append(target)
        for target in targets:
            self._add(target, node.lineno, names)


def resolve_from(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute module name of ``from <level dots><name> import ...`` in ``module``."""
    if level == 0:
        return name or ""
    parts = module.split(".")
    if not is_package:
        parts.pop()  # a module's relative imports start from its package
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, name] if name else parts)


# ---------------------------------------------------------------------------------------------
# The checks: each returns its offenders, one line each
# ---------------------------------------------------------------------------------------------


def _site(imp: Import) -> str:
    return f"line {imp.line}, in {imp.function}" if imp.function else f"line {imp.line}"


def find_cycles(package: Package) -> list[str]:
    """Each import cycle, as ``a -> b (line 3) -> a (line 9, in f)`` (each hop's line is where
    the module before it imports it): one shortest cycle through each module of each strongly
    connected component, without repeats, each starting at its smallest module name."""
    edges = package.graph()
    cycles: list[str] = []
    for component in _strongly_connected(edges):
        if len(component) < 2:
            continue
        seen: set[tuple[str, ...]] = set()
        for start in sorted(component):
            path = _shortest_cycle(edges, start, component)
            turn = path.index(min(path))
            key = tuple(path[turn:] + path[:turn])
            if key in seen:
                continue
            seen.add(key)
            hops = [key[0]]
            for a, b in zip(key, key[1:] + key[:1], strict=True):
                hops.append(f"{b} ({_site(edges[a][b])})")
            cycles.append(" -> ".join(hops))
    return cycles


def _strongly_connected(edges: dict[str, dict[str, Import]]) -> list[set[str]]:
    """Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges[node]):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = set()
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.add(top)
                if top == node:
                    break
            components.append(component)

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return components


def _shortest_cycle(
    edges: dict[str, dict[str, Import]], start: str, within: set[str]
) -> list[str]:
    parent: dict[str, str] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for nxt in sorted(edges[node]):
            if nxt == start:
                path = [node]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            if nxt in within and nxt not in parent:
                parent[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is in a strongly connected component but on no cycle")


def find_app_importers(
    package: Package, entry_shims: set[str] = ENTRY_SHIMS | {LAZY_ENTRY}
) -> list[str]:
    app = f"{package.name}.app"
    return [
        f"{imp.where} imports {imp.target} (line {imp.line})"
        for imp in package.imports
        if (imp.target == app or imp.target.startswith(app + "."))
        and not (imp.importer == app or imp.importer.startswith(app + "."))
        and imp.importer not in entry_shims
        and imp.where not in entry_shims
    ]


def layer_of(module: str) -> str | None:
    """The layer of one of autotune's modules, by its folder; None where it has none."""
    parts = module.split(".")
    if parts == ["autotune"]:
        return "api"
    if module in ENTRY_SHIMS:
        return "entry"
    if parts[1] in LAYER_FOLDERS:
        return parts[1]
    if len(parts) == 2 and parts[1] in LEAF_MODULES:
        return "leaf"
    return None


def find_layer_violations(
    package: Package, may_import: dict[str, set[str]] = MAY_IMPORT, lazy: str = LAZY_ENTRY
) -> list[str]:
    offenders = [
        f"{package.relpath(name)} is in no layer (put it in a layer folder or name it a leaf)"
        for name in package.modules
        if layer_of(name) is None
    ]
    for imp in package.imports:
        if not package.is_internal(imp.target):
            continue
        src, dst = layer_of(imp.importer), layer_of(imp.target)
        if src is None or dst is None or src == dst or dst in may_import[src]:
            continue
        if imp.where == lazy and dst == "app":
            continue
        offenders.append(f"{imp.where} ({src}) imports {imp.target} ({dst}) (line {imp.line})")
    return offenders


def _matches(name: str, allowed: set[str]) -> bool:
    return any(name == a or name.startswith(a + ".") for a in allowed)


def find_function_imports(
    package: Package,
    optional: set[str] = OPTIONAL_HEAVY_IMPORTS,
    child_entries: set[str] = CHILD_PROCESS_ENTRIES,
) -> list[str]:
    offenders: list[str] = []
    for imp in package.imports:
        if imp.function is None or imp.where in child_entries:
            continue
        if _matches(imp.target, optional) or any(_matches(n, optional) for n in imp.names):
            continue
        line = f"{imp.where} imports {imp.target}"
        if line not in offenders:
            offenders.append(line)
    return offenders


def find_long_modules(package: Package, max_lines: int = MAX_MODULE_LINES) -> list[str]:
    return [
        f"{package.relpath(m.name)}: {m.lines} lines"
        for m in package.modules.values()
        if m.lines > max_lines
    ]


def find_long_functions(
    package: Package, max_lines: int = MAX_FUNCTION_LINES, exempt: set[str] = LONG_FUNCTIONS_OK
) -> list[str]:
    return [
        f"{f.module}:{f.qualname}: {f.length} lines ({package.relpath(f.module)}:{f.line})"
        for f in package.functions
        if f.length > max_lines and f.module not in exempt
    ]


def find_attribute_access_past_the_store(package: Package, store: str = STORE) -> list[str]:
    """Each ``.user_attrs`` (and the rest of the door) read or called, and each
    ``user_attrs=`` passed (a trial made with its attributes) outside the store."""
    return sorted(
        f"{package.relpath(m.name)}:{node.lineno}: {name}"
        for m in package.modules.values()
        if m.name != store
        for node in ast.walk(m.tree)
        for name in _door_names(node)
    )


def _door_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Attribute) and node.attr in STORE_DOOR:
        return [f".{node.attr}"]
    if isinstance(node, ast.keyword) and node.arg in STORE_DOOR:
        return [f"{node.arg}="]
    return []


def _check(what: str, offenders: list[str]) -> None:
    if offenders:
        pytest.fail(f"{len(offenders)} {what}:\n" + "\n".join(offenders), pytrace=False)


# ---------------------------------------------------------------------------------------------
# The package
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def package() -> Package:
    return Package(PACKAGE_DIR)


def test_package_has_no_import_cycles(package: Package) -> None:
    _check("import cycle(s), function-level imports included", find_cycles(package))


def test_package_only_entry_points_import_app(package: Package) -> None:
    _check(
        "import(s) of autotune.app outside autotune/app/ and the entry shims",
        find_app_importers(package),
    )


def test_package_layers_import_only_layers_below(package: Package) -> None:
    _check("layer violation(s) (see MAY_IMPORT)", find_layer_violations(package))


def test_package_imports_only_optional_dependencies_inside_functions(package: Package) -> None:
    _check(
        "import(s) inside functions: move to module level, or add the function to "
        "CHILD_PROCESS_ENTRIES / the dependency to OPTIONAL_HEAVY_IMPORTS",
        find_function_imports(package),
    )


def test_package_modules_are_short(package: Package) -> None:
    _check(f"module(s) over {MAX_MODULE_LINES} lines", find_long_modules(package))


def test_package_functions_are_short(package: Package) -> None:
    _check(f"function(s) over {MAX_FUNCTION_LINES} lines", find_long_functions(package))


def test_package_reads_and_writes_study_attributes_only_through_the_store(
    package: Package,
) -> None:
    _check(
        f"trial or study attribute access(es) outside {STORE}: use its functions",
        find_attribute_access_past_the_store(package),
    )


# ---------------------------------------------------------------------------------------------
# The detectors, on fake packages
# ---------------------------------------------------------------------------------------------

# A fake `autotune` that keeps every rule, with each kind of import the checks must resolve.
CLEAN = {
    "__init__.py": "from autotune.pipeline.config import Config\n",
    "__main__.py": "from autotune.app.cli import main\n",
    "benchmark.py": "from autotune.app import benchmark\n",
    "errors.py": "class BadInput(Exception): ...\n",
    "schema.py": "from autotune.errors import BadInput\n",
    "machine.py": """
        from . import errors

        def gpu_name():
            import pynvml
            from pynvml import nvmlInit
    """,
    "pipeline/__init__.py": "",
    "pipeline/config.py": """
        try:
            import cv2
        except ImportError:
            cv2 = None
        from ..schema import BadInput

        class Config:
            import os
    """,
    "pipeline/dali.py": """
        async def build():
            import nvidia.dali.fn as fn
            from nvidia.dali.plugin.pytorch import DALIGenericIterator
            from nvidia import dali
    """,
    "pipeline/recipes/__init__.py": "from .imagenet import Recipe\n",
    "pipeline/recipes/imagenet.py": "from autotune import errors\nfrom ... import machine\n",
    "runtime/__init__.py": "",
    "runtime/trial.py": """
        from autotune.pipeline import config, recipes

        def _measure_window():
            import torch
            from autotune.pipeline import dali
    """,
    "session/__init__.py": "from .session import Session\n",
    "session/session.py": "from autotune.runtime import trial\nfrom autotune import machine\n",
    "tuner/__init__.py": "",
    "tuner/tune.py": "from autotune.session import Session\n",
    "diagnose/__init__.py": "",
    "diagnose/measure.py": "from ..session.session import Session\n",
    "report/__init__.py": "",
    "report/markdown.py": """
        from autotune.tuner import tune
        from autotune.diagnose.measure import Session
    """,
    "report/dashboard.py": """
        class Dashboard:
            def serve(self):
                from optuna_dashboard import run_server
    """,
    "report/plots.py": "def plot():\n" + "    x = 1\n" * 70,
    "app/__init__.py": "",
    "app/cli.py": "from autotune import __version__\nfrom autotune.report import markdown\n",
    "app/benchmark.py": "from .cli import main\n",
}
TRIAL_ENTRY = {"autotune.runtime.trial:_measure_window"}


def fake_package(tmp_path: Path, changes: dict[str, str | None] | None = None) -> Package:
    """CLEAN with ``changes`` (path -> new source, or None to delete), written and read."""
    files = {**CLEAN, **(changes or {})}
    for rel, source in files.items():
        if source is None:
            continue
        path = tmp_path / "autotune" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source).lstrip("\n"))
    return Package(tmp_path / "autotune")


def test_detector_clean_package_has_no_offenders(tmp_path: Path) -> None:
    package = fake_package(tmp_path)
    assert find_cycles(package) == []
    assert find_app_importers(package) == []
    assert find_layer_violations(package) == []
    assert find_function_imports(package, child_entries=TRIAL_ENTRY) == []
    assert find_long_modules(package) == []
    assert find_long_functions(package) == []
    assert find_attribute_access_past_the_store(package) == []


def test_detector_finds_attribute_access_past_the_store(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "tuner/store.py": "def kind(t):\n    return t.user_attrs.get('kind')\n",
            "report/plots.py": "def wait(t, s):\n    s.set_user_attr('x', t.system_attrs)\n",
            "online/record.py": "def made(c, a):\n    return c(user_attrs=a)\n",
        },
    )
    assert find_attribute_access_past_the_store(package) == [
        "autotune/online/record.py:2: user_attrs=",
        "autotune/report/plots.py:2: .set_user_attr",
        "autotune/report/plots.py:2: .system_attrs",
    ]


@pytest.mark.parametrize(
    ("file", "source", "expected"),
    [
        ("runtime/trial.py", "from . import window", {"autotune.runtime.window"}),
        ("runtime/trial.py", "from .window import run", {"autotune.runtime.window"}),
        ("runtime/trial.py", "from .. import machine", {"autotune.machine"}),
        ("runtime/trial.py", "from ..pipeline import loader", {"autotune.pipeline.loader"}),
        ("runtime/trial.py", "from ..pipeline import Thing", {"autotune.pipeline"}),
        ("runtime/__init__.py", "from . import window", {"autotune.runtime.window"}),
        ("runtime/__init__.py", "from .window import run", {"autotune.runtime.window"}),
        ("__init__.py", "from .pipeline import loader", {"autotune.pipeline.loader"}),
        ("pipeline/recipes/imagenet.py", "from ... import errors", {"autotune.errors"}),
        ("x.py", "from autotune import machine", {"autotune.machine"}),
        ("x.py", "from autotune import build_loader", {"autotune"}),
        ("x.py", "from autotune import machine, build_loader", {"autotune.machine", "autotune"}),
        ("x.py", "import autotune.runtime.window as w", {"autotune.runtime.window"}),
        ("x.py", "from autotune.runtime import *", {"autotune.runtime"}),
        ("x.py", "import numpy.linalg", {"numpy.linalg"}),
        ("x.py", "from torch.utils.data import RandomSampler", {"torch.utils.data"}),
    ],
)
def test_detector_resolves_imports(tmp_path: Path, file: str, source: str, expected: set[str]):
    package = fake_package(
        tmp_path,
        {"runtime/window.py": "", "pipeline/loader.py": "", "x.py": "", file: source + "\n"},
    )
    module = ".".join(["autotune", *Path(file).with_suffix("").parts]).removesuffix(".__init__")
    assert module in package.modules
    assert {i.target for i in package.imports if i.importer == module} == expected


def test_detector_finds_module_level_cycle(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "runtime/window.py": "from . import trial\n",
            "runtime/trial.py": "from . import window\n",
        },
    )
    assert find_cycles(package) == [
        "autotune.runtime.trial -> autotune.runtime.window (line 1) -> autotune.runtime.trial "
        "(line 1)"
    ]


def test_detector_finds_cycle_through_function_level_import(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {"session/session.py": "def later():\n    from autotune.tuner.tune import run\n"},
    )
    # tuner.tune -> session (its __init__) -> session.session -> tuner.tune, inside later()
    (cycle,) = find_cycles(package)
    assert cycle == (
        "autotune.session -> autotune.session.session (line 1) -> autotune.tuner.tune "
        "(line 2, in later) -> autotune.session (line 1)"
    )


def test_detector_finds_cycle_through_package_init_and_from_autotune_import(
    tmp_path: Path,
) -> None:
    package = fake_package(
        tmp_path,
        {
            # `from autotune import machine` is an import of autotune.machine, not of autotune
            "machine.py": "from autotune.pipeline import config\n",
            "pipeline/config.py": "from autotune import machine\n",
        },
    )
    assert find_cycles(package) == [
        "autotune.machine -> autotune.pipeline.config (line 1) -> autotune.machine (line 1)"
    ]


def test_detector_lists_every_cycle_once(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "runtime/a.py": "from . import b\n",
            "runtime/b.py": "from . import c\n",
            "runtime/c.py": "from . import a\n",
            "tuner/x.py": "import autotune.tuner.y\n",
            "tuner/y.py": "def f():\n    import autotune.tuner.x\n",
        },
    )
    assert sorted(find_cycles(package)) == [
        "autotune.runtime.a -> autotune.runtime.b (line 1) -> autotune.runtime.c (line 1) "
        "-> autotune.runtime.a (line 1)",
        "autotune.tuner.x -> autotune.tuner.y (line 1) -> autotune.tuner.x (line 2, in f)",
    ]


def test_detector_finds_app_importers(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "report/export.py": "from autotune.app import cli\n",
            "tuner/tune.py": "def f():\n    import autotune.app.cli\n",
            "runtime/trial.py": "from ..app.cli import main\n",
        },
    )
    assert sorted(find_app_importers(package)) == [
        "autotune.report.export imports autotune.app.cli (line 1)",
        "autotune.runtime.trial imports autotune.app.cli (line 1)",
        "autotune.tuner.tune:f imports autotune.app.cli (line 2)",
    ]


def test_detector_finds_upward_and_sideways_imports(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "runtime/window.py": "from autotune.tuner import tune\n",  # up
            "tuner/grid.py": "from ..report import markdown\n",  # tuner must not import report
            "diagnose/verdict.py": "def f():\n    from autotune.tuner.tune import x\n",  # sideways
            "__init__.py": "from autotune.session import Session\n",  # api: pipeline only
            "errors.py": "from autotune.pipeline import config\n",  # leaves import nothing
            "helpers.py": "",  # in no layer
            "pipeline/recipes/crop.py": "from autotune import errors\n",  # fine
        },
    )
    assert sorted(find_layer_violations(package)) == [
        "autotune (api) imports autotune.session (session) (line 1)",
        "autotune.diagnose.verdict:f (diagnose) imports autotune.tuner.tune (tuner) (line 2)",
        "autotune.errors (leaf) imports autotune.pipeline.config (pipeline) (line 1)",
        "autotune.runtime.window (runtime) imports autotune.tuner.tune (tuner) (line 1)",
        "autotune.tuner.grid (tuner) imports autotune.report.markdown (report) (line 1)",
        "autotune/helpers.py is in no layer (put it in a layer folder or name it a leaf)",
    ]


def test_detector_follows_the_layer_table(tmp_path: Path) -> None:
    """One module per layer importing a module of every other layer: exactly the pairs the
    table leaves out are reported, whatever the table says."""
    where = {
        "entry": ("benchmark.py", "autotune.benchmark"),
        "api": ("__init__.py", "autotune"),
        "leaf": ("errors.py", "autotune.errors"),
        **{layer: (f"{layer}/probe.py", f"autotune.{layer}.probe") for layer in LAYER_FOLDERS},
    }
    assert set(where) == set(MAY_IMPORT)
    changes = {
        path: "".join(f"import {where[other][1]}\n" for other in sorted(where) if other != layer)
        for layer, (path, _) in where.items()
    }
    offenders = find_layer_violations(fake_package(tmp_path, changes))
    reported = {re.search(r"\((\w+)\) imports \S+ \((\w+)\)", o).groups() for o in offenders}
    assert len(reported) == len(offenders)
    expected = {
        (a, b) for a in MAY_IMPORT for b in MAY_IMPORT if a != b and b not in MAY_IMPORT[a]
    }
    assert reported == expected


def test_layer_table_is_a_hierarchy() -> None:
    """No two layers may import each other, directly or through others."""
    for layer in MAY_IMPORT:
        below, frontier = set(), set(MAY_IMPORT[layer])
        while frontier:
            below |= frontier
            frontier = set().union(*(MAY_IMPORT[b] for b in frontier)) - below
        assert layer not in below, f"{layer} can reach itself through MAY_IMPORT"
    assert "report" not in MAY_IMPORT["tuner"] | MAY_IMPORT["diagnose"]
    assert "tuner" not in MAY_IMPORT["diagnose"] and "diagnose" not in MAY_IMPORT["tuner"]


def test_detector_finds_function_level_imports(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path,
        {
            "runtime/trial.py": """
                def _measure():
                    import torch
                    from torch.utils.data import RandomSampler
                    import nvidia.dali.fn
                    import pynvml

                def _measure_window():
                    import torch
                    from autotune.pipeline import config

                class Runner:
                    def run(self):
                        def inner():
                            import cv2
                        from .. import machine
                        import optuna_dashboard.app
                        import pynvmlx
            """,
        },
    )
    assert find_function_imports(package, child_entries=TRIAL_ENTRY) == [
        "autotune.runtime.trial:_measure imports torch",
        "autotune.runtime.trial:_measure imports torch.utils.data",
        "autotune.runtime.trial:Runner.run.inner imports cv2",
        "autotune.runtime.trial:Runner.run imports autotune.machine",
        "autotune.runtime.trial:Runner.run imports pynvmlx",
    ]
    assert find_function_imports(package, child_entries=set()) == [
        "autotune.runtime.trial:_measure imports torch",
        "autotune.runtime.trial:_measure imports torch.utils.data",
        "autotune.runtime.trial:_measure_window imports torch",
        "autotune.runtime.trial:_measure_window imports autotune.pipeline.config",
        "autotune.runtime.trial:Runner.run.inner imports cv2",
        "autotune.runtime.trial:Runner.run imports autotune.machine",
        "autotune.runtime.trial:Runner.run imports pynvmlx",
    ]


def test_detector_finds_long_modules(tmp_path: Path) -> None:
    package = fake_package(
        tmp_path, {"runtime/long.py": "x = 1\n" * 301, "runtime/ok.py": "x = 1\n" * 300}
    )
    assert find_long_modules(package) == ["autotune/runtime/long.py: 301 lines"]


def test_detector_finds_long_functions(tmp_path: Path) -> None:
    body61, body60 = "    x = 1\n" * 60, "    x = 1\n" * 59  # plus the def line: 61 and 60
    package = fake_package(
        tmp_path,
        {
            "runtime/long.py": f"def long():\n{body61}\ndef ok():\n{body60}",
            "tuner/cls.py": "class A:\n    async def m(self):\n" + textwrap.indent(body61, "    "),
            "report/plots.py": f"def plot():\n{body61 * 3}",  # exempt
        },
    )
    assert sorted(find_long_functions(package)) == [
        "autotune.runtime.long:long: 61 lines (autotune/runtime/long.py:1)",
        "autotune.tuner.cls:A.m: 61 lines (autotune/tuner/cls.py:2)",
    ]
