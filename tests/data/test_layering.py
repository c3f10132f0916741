"""The data package imports one way: no module of it imports, even lazily, one that imports
it back, and every reader implements the `Format` protocol."""

from __future__ import annotations

import ast
import pathlib

import pytest

import tfyard.data
from tfyard.data.formats import DATASETS, REGISTRY, Format, reader

ROOT = pathlib.Path(tfyard.data.__file__).parent


def module_name(path: pathlib.Path) -> str:
    parts = ["tfyard", *path.relative_to(ROOT.parent).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: pathlib.Path) -> set[str]:
    """tfyard.data modules `path` names in any import statement, at any depth."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            # `from tfyard.data.formats import tfrecord` imports a module too
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return {name for name in found if name.startswith("tfyard.data")}


def test_no_import_cycles_in_data():
    graph = {module_name(p): imports(p) for p in ROOT.rglob("*.py")}
    # `reader` imports the registered modules by name
    graph["tfyard.data.formats"] |= {f"tfyard.data.formats.{m}" for m in REGISTRY.values()}
    graph = {m: {n for n in names if n in graph and n != m} for m, names in graph.items()}

    def cycle_from(module, path):
        if module in path:
            return path[path.index(module):] + [module]
        for target in sorted(graph[module]):
            if found := cycle_from(target, path + [module]):
                return found
        return None

    cycles = [c for m in sorted(graph) if (c := cycle_from(m, []))]
    assert not cycles, f"import cycle: {' -> '.join(cycles[0])}"
    assert "tfyard.data.formats.tfrecord" in graph and "tfyard.data.inspect" in graph


@pytest.mark.parametrize("name", DATASETS)
def test_every_reader_implements_format(name):
    assert isinstance(reader(name), Format)
