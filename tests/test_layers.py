"""The package's layers, read from the source with `ast`: imports point down, never up or
sideways, and no module imports itself back through others.

    __main__
    cli, and the tfyard.spark entry point
    bench                       measures train and launch, so it sits on them
    train, launch, pack
    predict                     reads SavedModels; train's export builds its signatures
    data, models, distribute, platform (and quiet, keras_startup, replace)
    errors, flags, dtypes, compat, the tfyard package itself (__version__): no tfyard imports

A module may import its own package's siblings. Imports inside functions count too:
laziness keeps start-up fast, it does not make an upward dependency right.
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = [
    {"__main__"},
    {"cli", "spark", "ray"},
    {"bench"},
    {"train", "launch", "pack"},
    {"predict"},
    {"data", "models", "distribute", "platform", "quiet", "keras_startup", "replace"},
    {"errors", "flags", "dtypes", "compat", "__init__"},
]
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}
# (importing module, imported module) pairs allowed against the rule, with the reason.
ALLOWED: dict[tuple[str, str], str] = {
    ("tfyard", "tfyard.train.fit"): "`tfyard.fit`, the public door, loaded on first use",
    ("tfyard", "tfyard.predict"): "`tfyard.predict`, the other public door, likewise",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


MODULES = {_module_name(p): p for p in (SRC / "tfyard").rglob("*.py")}


def _target(module: str, name: str | None) -> str:
    """`from module import name` imports the module `module.name` if there is one."""
    if name and f"{module}.{name}" in MODULES:
        return f"{module}.{name}"
    return module


def imports(module: str, source: str | None = None) -> set[str]:
    """Every tfyard module `module` imports, at module level or inside functions."""
    found = set()
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    source = MODULES[module].read_text() if source is None else source
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            found.update(_target(base, alias.name) for alias in node.names)
    return {name for name in found if name.split(".")[0] == "tfyard" and name in MODULES}


def _part(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_part_has_a_layer():
    assert {_part(m) for m in MODULES} <= set(LEVEL)


def wrong_imports(module: str, imported: set[str]) -> list[str]:
    return [f"{module} -> {name}" for name in sorted(imported)
            if _part(name) != _part(module) and (module, name) not in ALLOWED
            and LEVEL[_part(name)] <= LEVEL[_part(module)]]


def test_imports_point_down():
    wrong = [line for module in MODULES for line in wrong_imports(module, imports(module))]
    assert not wrong, "upward or sideways imports:\n" + "\n".join(sorted(wrong))


def _cycles() -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    graph = {m: imports(m) - {m} for m in MODULES}
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycles():
    cycles = _cycles()
    assert not cycles, f"import cycles: {cycles}"


def test_the_checker_sees_the_old_upward_and_sideways_imports():
    """The rules must be able to fail: the imports this layout removed are caught."""
    old = ("def parse():\n    from tfyard.cli import Parser\n"
           "from . import job\nfrom tfyard.bench import train\n")
    found = imports("tfyard.train.options", old)
    assert found == {"tfyard.cli", "tfyard.train.job", "tfyard.bench.train"}
    assert wrong_imports("tfyard.train.options", found) == [
        "tfyard.train.options -> tfyard.bench.train", "tfyard.train.options -> tfyard.cli"]
