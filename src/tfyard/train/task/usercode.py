"""The user's own code, named `MODULE:FUNCTION`: a dotted module importable from the working
directory or PYTHONPATH (`nets.mine:build`), or a `.py` file (`nets/mine.py:build`).

Every cluster member imports it itself, so nothing is pickled; a member that cannot import
it says so in one line naming the module and the path searched. No TensorFlow here: a
wrong reference is refused before TensorFlow loads.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable

from tfyard.errors import UserError


def is_reference(name) -> bool:
    """Whether `name` names user code (`MODULE:FUNCTION`) rather than a registry entry."""
    return isinstance(name, str) and ":" in name


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0][:200]}" if text else type(exc).__name__


def _import_file(path: str, what: str, reference: str):
    if not os.path.isfile(path):
        raise UserError(f"{what} {reference}: no file {path} (working directory "
                        f"{os.getcwd()}); give a path to a .py file or a dotted module")
    directory = os.path.dirname(path)
    if directory not in sys.path:   # its sibling modules import as they would in a script
        sys.path.insert(0, directory)
    name = os.path.splitext(os.path.basename(path))[0]
    if getattr(sys.modules.get(name), "__file__", None) == path:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[name]
        raise UserError(f"{what} {reference}: {path} failed to import ({_first_line(exc)}); "
                        "fix the module") from None
    return module


def _import_module(name: str, what: str, reference: str):
    if os.getcwd() not in sys.path and "" not in sys.path:   # the `tfyard` script's path
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):   # the module itself is not there
            searched = os.pathsep.join(p or os.getcwd() for p in sys.path[:4])
            raise UserError(f"{what} {reference}: cannot import {name} ({_first_line(exc)}); "
                            f"searched {searched}...: run from the directory that holds it, "
                            "add it to PYTHONPATH, or give the .py path") from None
        raise UserError(f"{what} {reference}: {name} failed to import "
                        f"({_first_line(exc)}); install what it needs") from None
    except Exception as exc:
        raise UserError(f"{what} {reference}: {name} failed to import ({_first_line(exc)}); "
                        "fix the module") from None


def load(reference: str, what: str = "--model") -> Callable:
    """The function `reference` names, imported; one-line UserErrors for every failure."""
    module_name, _, function = reference.rpartition(":")
    if not module_name or not function.isidentifier():
        raise UserError(f"{what} {reference!r}: expected MODULE:FUNCTION, e.g. nets.mine:build "
                        "or nets/mine.py:build")
    if module_name.endswith(".py") or os.sep in module_name:
        module = _import_file(os.path.abspath(module_name), what, reference)
    else:
        module = _import_module(module_name, what, reference)
    found = getattr(module, function, None)
    if not callable(found):
        defined = sorted(n for n, v in vars(module).items()
                         if inspect.isfunction(v) and not n.startswith("_"))
        raise UserError(f"{what} {reference}: {module_name} has no function {function}"
                        + (f"; it defines {', '.join(defined[:8])}" if defined else ""))
    return found


def reference_of(function: Callable) -> str | None:
    """`MODULE:FUNCTION` that imports `function` again (a script's functions by file path),
    or None for a lambda or a nested function, which no other process can import."""
    name = getattr(function, "__qualname__", "")
    module = getattr(function, "__module__", None)
    if not name.isidentifier() or module is None:
        return None
    if module == "__main__" or getattr(sys.modules.get(module), "__spec__", None) is None:
        path = getattr(sys.modules.get(module), "__file__", None)
        return f"{os.path.relpath(path)}:{name}" if path else None
    return f"{module}:{name}"


def call_with_accepted(function: Callable, **available):
    """`function(**the parts of available it accepts)`: a model function may take
    `num_classes`, `input_shape`, both or neither."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return function(**available)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()):
        return function(**available)
    return function(**{k: v for k, v in available.items() if k in parameters})


def takes_an_argument(function: Callable) -> bool:
    """Whether `function` takes a positional argument: an input function is called with its
    InputContext if it does, bare (`input_fn()`, as Estimator allowed) if not."""
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):
        return True
    return any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
               for p in parameters)
