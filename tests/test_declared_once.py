"""Facts the source declares once, read with `ast`: the preempted stop reason and how much
of a failed member's output the launchers repeat."""

from __future__ import annotations

import ast
from pathlib import Path

import tfyard

PACKAGE = Path(tfyard.__file__).parent


def _where(matches) -> set[str]:
    """The modules of tfyard with a node for which `matches(node)` holds."""
    return {str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
            if any(matches(node) for node in ast.walk(ast.parse(path.read_text())))}


def test_only_errors_spells_the_preempted_stop_reason():
    found = _where(lambda node: isinstance(node, ast.Constant) and node.value == "preempted")
    # errors declares the stop reason; preemption's console line says the word ("preempted at
    # step N") on its own
    assert found == {"errors.py", "train/outside/preemption.py"}, \
        f"use errors.PREEMPTED instead: {found}"


def test_only_the_launch_output_sets_the_failed_output_tail_length():
    def assigns_tail_lines(node) -> bool:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, ast.AnnAssign) else []
        return any(isinstance(t, ast.Name) and t.id == "TAIL_LINES" for t in targets)

    found = _where(assigns_tail_lines)
    assert found == {"launch/output.py"}, f"import output.TAIL_LINES instead: {found}"
