"""Print pip constraints pinning every dependency pyproject.toml declares (extras and the
build backend too) to its lower bound, so one venv runs tfyard on the oldest versions it
claims.

A requirement without a `>=` bound is refused: a claim nobody installs is not tested.
Usage: python ci/lowest.py [pyproject.toml] > constraints.txt   (Python 3.11+: tomllib)
"""

from __future__ import annotations

import re
import sys

import tomllib

REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9._-]+)\s*(?:\[[^\]]*\])?\s*(.*)$")


def lower_bounds(pyproject: dict) -> dict[str, str]:
    """Each distribution's name -> the version its `>=` bound names (one claim a name: an
    extra repeating a dependency must repeat its bound)."""
    project = pyproject["project"]
    requirements = [*pyproject["build-system"]["requires"], *project["dependencies"],
                    *(r for extra in project["optional-dependencies"].values() for r in extra)]
    bounds: dict[str, str] = {}
    for requirement in requirements:
        name, specifiers = REQUIREMENT.match(requirement).groups()
        found = re.search(r">=\s*([0-9][^,;\s]*)", specifiers)
        if found is None:
            sys.exit(f"ci/lowest.py: {requirement!r} has no lower bound (>=); give it one")
        name = re.sub(r"[-_.]+", "-", name).lower()
        if bounds.setdefault(name, found[1]) != found[1]:
            sys.exit(f"ci/lowest.py: {name} has two lower bounds, {bounds[name]} and {found[1]}")
    return bounds


def main() -> None:
    path = sys.argv[1] if len(sys.argv) > 1 else "pyproject.toml"
    with open(path, "rb") as handle:
        pyproject = tomllib.load(handle)
    for name, version in sorted(lower_bounds(pyproject).items()):
        print(f"{name}=={version}")


if __name__ == "__main__":
    main()
