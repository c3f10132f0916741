"""The `--dtype` list is declared once, in tfyard.dtypes, and every dtype has a policy."""

from __future__ import annotations

import ast
from pathlib import Path

import tfyard
from tfyard.dtypes import DTYPES
from tfyard.models.factory import policy_name

PACKAGE = Path(tfyard.__file__).parent


def _lists_of_all_dtypes(path: Path) -> list[int]:
    """Lines of `path` that spell out the whole dtype list again."""
    return [node.lineno for node in ast.walk(ast.parse(path.read_text()))
            if isinstance(node, ast.Tuple | ast.List | ast.Set)
            and {getattr(e, "value", None) for e in node.elts} >= set(DTYPES)]


def test_only_tfyard_dtypes_spells_out_the_dtype_list():
    found = {str(path.relative_to(PACKAGE)): lines for path in sorted(PACKAGE.rglob("*.py"))
             if (lines := _lists_of_all_dtypes(path))}
    assert set(found) == {"dtypes.py"}, f"import DTYPES from tfyard.dtypes instead: {found}"


def test_every_dtype_has_a_keras_policy():
    assert [policy_name(dtype) for dtype in DTYPES] == \
        ["float32", "mixed_bfloat16", "mixed_float16"]
