"""The apps import one way, computed from the source: vault ← audit ← toolcatalog ← agents ← approvals ← notifications.

vault (secrets encrypted at rest) imports no other app. accounts (logins, their
lockouts, SSO) stands beside toolcatalog: it writes to audit only. oauth (OAuth for MCP
clients: which agent a client acts as, for whom) stands between agents and approvals. Nothing imports
approvals but config and notifications (which reaches reviewers about calls), and
the product imports nothing built on it.
Inside each app, no module imports itself back through others (no import cycle).

Every import statement counts wherever it stands: at module level, inside a function,
under `if TYPE_CHECKING:`. A downstream is reached by a dotted path string (an
executor's reference, an INSTALLED_APPS entry), which is not an import.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Each product app and the apps it may import; what is not listed here it may not import.
LAYERS: dict[str, set[str]] = {
    "vault": set(),
    "audit": {"vault"},
    "accounts": {"vault", "audit"},
    "toolcatalog": {"vault", "audit"},
    "agents": {"vault", "audit", "toolcatalog"},
    "oauth": {"vault", "audit", "toolcatalog", "agents", "accounts"},
    "approvals": {"vault", "audit", "toolcatalog", "agents", "oauth"},
    "notifications": {"vault", "audit", "toolcatalog", "agents", "approvals", "accounts"},
}
PRODUCT = (*LAYERS, "config")
# Built on the product, never the other way round.
DOWNSTREAM = ("bench", "demo", "agentloop")
# The product's code and the code that runs beside it; tests and the bench exercise
# approvals from outside, as a client would, so they are not held to the layering.
SHIPPED = (*PRODUCT, "demo", "agentloop")
FIRST_PARTY = tuple(sorted(path.parent.name for path in ROOT.glob("*/__init__.py")))


def module_name(path: Path) -> str:
    """Return the dotted module name of a source file under ROOT."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_in(source: str, module: str, is_package: bool = False) -> Iterator[tuple[int, str]]:
    """Yield (line, imported module) for every import in `source`, relative ones resolved against `module`."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names = [node.module]
        elif isinstance(node, ast.ImportFrom):
            base = relative_base(module, is_package, node.level)
            # `from .x import y` imports .x; `from . import y` imports .y, which may be a module.
            names = [".".join([*base, node.module])] if node.module else [".".join([*base, a.name]) for a in node.names]
        else:
            continue
        for name in names:
            yield node.lineno, name


def relative_base(module: str, is_package: bool, level: int) -> list[str]:
    """Return the package a relative import of `level` dots starts from, in `module`."""
    package = module.split(".") if is_package else module.split(".")[:-1]
    return package[: len(package) - level + 1]


def cross_imports(package: str) -> Iterator[tuple[str, str]]:
    """Yield ("file:line", first-party package) for each import in `package` of another first-party package."""
    for path in sorted((ROOT / package).rglob("*.py")):
        module = module_name(path)
        for line, imported in imports_in(path.read_text(), module, path.name == "__init__.py"):
            top = imported.split(".")[0]
            if top in FIRST_PARTY and top != package:
                yield f"{path.relative_to(ROOT)}:{line}", top


def importers_of(target: str, packages: tuple[str, ...]) -> list[str]:
    """Return "file:line" of every import of `target` from `packages`."""
    return [where for package in packages for where, top in cross_imports(package) if top == target]


def test_every_package_has_its_place_in_the_layering() -> None:
    assert set(FIRST_PARTY) == {*PRODUCT, *DOWNSTREAM, "tests"}


@pytest.mark.parametrize("app", LAYERS)
def test_each_app_imports_only_the_apps_below_it(app: str) -> None:
    wrong = [f"{where} imports {top}" for where, top in cross_imports(app) if top not in LAYERS[app]]

    assert wrong == []


def test_nothing_shipped_imports_approvals_but_config_and_notifications() -> None:
    others = tuple(package for package in SHIPPED if package not in {"approvals", "config", "notifications"})

    assert importers_of("approvals", others) == []


@pytest.mark.parametrize("downstream", DOWNSTREAM)
def test_the_product_never_imports_what_is_built_on_it(downstream: str) -> None:
    assert importers_of(downstream, PRODUCT) == []


def test_the_product_does_not_name_the_bench_even_as_a_dotted_path() -> None:
    named = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for package in PRODUCT
        for path in sorted((ROOT / package).rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.split(".")[0] == "bench"
    ]

    assert named == []


def test_imports_in_functions_and_under_type_checking_count() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n"
        "    from approvals.models import ToolCall\n"
        "def later():\n"
        "    import bench.run\n"
        "    from .chain import record\n"
        "    from .. import agents\n"
    )

    found = sorted(imports_in(source, "audit.views"))

    assert found == [(1, "typing"), (3, "approvals.models"), (5, "bench.run"), (6, "audit.chain"), (7, "agents")]


def app_modules(app: str) -> dict[str, Path]:
    """Return every module of `app` by dotted name."""
    return {module_name(path): path for path in sorted((ROOT / app).rglob("*.py"))}


def module_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Return, for each of `modules`, the ones among them it imports."""
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        names = {
            name
            for node in ast.walk(ast.parse(path.read_text()))
            for name in imported_modules(node, module, path.name == "__init__.py", modules.keys())
        }
        graph[module] = {name for name in names if name in modules and name != module}
    return graph


def imported_modules(node: ast.AST, module: str, is_package: bool, known: Iterable[str]) -> list[str]:
    """Return the modules an import statement imports: `from x import y` imports x.y where that is a module, else x.

    (Importing x.y from inside package x needs x only as far as it has run: no cycle of its own.)
    """
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = ".".join(relative_base(module, is_package, node.level)) if node.level else ""
    package = ".".join(part for part in (base, node.module or "") if part)
    return [f"{package}.{a.name}" if f"{package}.{a.name}" in known else package for a in node.names]


def cycle_in(graph: dict[str, set[str]]) -> list[str]:
    """Return one import cycle of `graph` as the modules along it (first repeated last), or [] if there is none."""
    done: set[str] = set()

    def walk(module: str, path: list[str]) -> list[str]:
        if module in path:
            return [*path[path.index(module) :], module]
        if module in done:
            return []
        for imported in sorted(graph[module]):
            found = walk(imported, [*path, module])
            if found:
                return found
        done.add(module)
        return []

    for module in sorted(graph):
        found = walk(module, [])
        if found:
            return found
    return []


@pytest.mark.parametrize("app", PRODUCT)
def test_no_app_has_an_import_cycle_among_its_own_modules(app: str) -> None:
    cycle = cycle_in(module_graph(app_modules(app)))

    assert cycle == [], " → ".join(cycle)


def test_a_cycle_through_a_function_level_import_is_found() -> None:
    graph = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": set()}

    assert cycle_in(graph) == ["a.x", "a.y", "a.z", "a.x"]
    assert cycle_in({"a.x": {"a.y"}, "a.y": set()}) == []


# A function longer than this does more than one thing; split it.
MAX_FUNCTION_LINES = 40


def long_functions(source: str) -> list[tuple[str, int]]:
    """Return (name, lines) for each function in `source` longer than MAX_FUNCTION_LINES, decorators excluded."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]


def test_no_product_function_exceeds_forty_lines() -> None:
    too_long = [
        f"{path.relative_to(ROOT)}: {name} ({lines} lines)"
        for app in PRODUCT
        for path in (ROOT / app).rglob("*.py")
        if "migrations" not in path.parts
        for name, lines in long_functions(path.read_text())
    ]

    assert too_long == []


def test_a_long_function_is_found() -> None:
    body = "\n".join(f"    x{n} = {n}" for n in range(MAX_FUNCTION_LINES))

    assert long_functions(f"def short():\n    pass\n\ndef long():\n{body}\n") == [("long", MAX_FUNCTION_LINES + 1)]
