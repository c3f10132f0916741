"""The package's layers, read from the source with `ast`: imports point down, never up or
sideways, and no module imports itself back through others.

    __main__
    cli, and the tfyard.spark entry point
    bench, tune                 measure or search over train runs, placed as launch places
                                them, so they sit on both
    train, launch, pack
    tracking                    a run in MLflow; its model serves through predict
    predict                     reads SavedModels; train's export builds its signatures
    data, models, distribute, platform (and quiet, keras_startup)
    runfiles                    a run's files: their names and the operations on them
    replace, progress           how an output is written and how long work shows, which
                                `data` uses too
    storage                     where a path lives: local disk or a bucket
    process                     numbers from the environment, liveness of a pid, a file
                                put in place whole (`replace` and `storage` use it)
    flags, dtypes, compat, the tfyard package itself (__version__): errors alone
    errors                      no tfyard imports

A module may import its own package's siblings. Imports inside functions count too:
laziness keeps start-up fast, it does not make an upward dependency right.

Inside `train`, its rooms stand in the same order, each above the ones it uses:

    train               the loop: job, account, options, build, loop, controller, actions,
                        evaluate, fit
    train.outside       the run's ties outside its process: signals, console, MLflow
    train.weights       where the weights start
    train.task          what is trained
    train.rundir        the run directory

And the house's proportions: no folder's own modules hold more than a fifth of the package's
lines, and no folder has more than a dozen modules; a folder that outgrows either has found
its sub-rooms (`docs/architecture.md`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
LAYERS = [
    {"__main__"},
    {"cli", "spark", "ray"},
    {"bench", "tune"},
    {"train", "launch", "pack"},
    {"tracking"},
    {"predict"},
    {"data", "models", "distribute", "platform", "quiet", "keras_startup"},
    {"runfiles"},
    {"replace", "progress"},
    {"storage"},
    {"process"},
    {"flags", "dtypes", "compat", "__init__"},
    {"errors"},
]
LEVEL = {part: level for level, parts in enumerate(LAYERS) for part in parts}
TRAIN_ROOMS = ["tfyard.train", "tfyard.train.outside", "tfyard.train.weights", "tfyard.train.task",
               "tfyard.train.rundir"]
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


def _room(module: str) -> str:
    """The train room of a train module: its sub-package, or `tfyard.train` itself."""
    for room in reversed(TRAIN_ROOMS):
        if module == room or module.startswith(room + "."):
            return room
    raise ValueError(module)


def wrong_train_imports(module: str, imported: set[str]) -> list[str]:
    if _part(module) != "train":
        return []
    rank = TRAIN_ROOMS.index(_room(module))
    return [f"{module} -> {name}" for name in sorted(imported)
            if _part(name) == "train" and TRAIN_ROOMS.index(_room(name)) < rank]


def test_train_rooms_import_down():
    wrong = [line for module in MODULES
             for line in wrong_train_imports(module, imports(module))]
    assert not wrong, "a train room imports one above it:\n" + "\n".join(sorted(wrong))
    assert wrong_train_imports("tfyard.train.rundir.checkpoint", {"tfyard.train.build"}) == [
        "tfyard.train.rundir.checkpoint -> tfyard.train.build"]


def test_options_travel_down_as_values():
    """`TrainOptions` is read in the loop's own room; the rooms below it get plain values,
    so a parameter's walk from `job.train` to the step never climbs back up for it."""
    readers = {m for m in MODULES if "tfyard.train.options" in imports(m)}
    below = sorted(m for m in readers if _part(m) == "train" and _room(m) != "tfyard.train")
    assert not below, f"rooms below the loop read TrainOptions: {below}"


def _folders() -> dict[Path, list[Path]]:
    folders: dict[Path, list[Path]] = {}
    for path in MODULES.values():
        folders.setdefault(path.parent, []).append(path)
    return folders


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines())


def test_no_folder_holds_more_than_a_fifth_of_the_package():
    total = sum(_lines(p) for p in MODULES.values())
    heavy = {str(folder.relative_to(SRC)): round(sum(map(_lines, files)) / total, 3)
             for folder, files in _folders().items()
             if sum(map(_lines, files)) > total / 5}
    assert not heavy, f"folders over a fifth of the package's {total} lines: {heavy}"


def test_no_folder_has_more_than_a_dozen_modules():
    crowded = {str(folder.relative_to(SRC)): len(files)
               for folder, files in _folders().items() if len(files) > 12}
    assert not crowded, f"folders of more than 12 modules: {crowded}"


# --- the run directory's one seam ----------------------------------------------------------
SEAM = "tfyard.runfiles.files"        # the one module that opens, moves and links run files
NAMES = "tfyard.runfiles.layout"      # the one module that spells their names
# Calls that write, move or open a file by its path: outside the seam they bypass it.
FILE_CALLS = {"open", "os.replace", "os.rename", "os.link", "os.makedirs", "shutil.copyfile",
              "shutil.move", "shutil.rmtree", "tf.io.gfile.GFile", "os.path.exists",
              "os.path.isfile", "os.path.isdir", "os.path.getmtime"}
# (module, call) pairs of the readers that touch files which are not a run's, with the reason.
OTHER_FILES: dict[tuple[str, str], str] = {
    ("tfyard.platform", "os.path.isdir"): "--data_dir: the data's folder",
    **{("tfyard.train.weights.weight_files", call): "a weight file of any form the user names "
       "(--init_checkpoint), read only" for call in ("open", "os.path.isdir", "os.path.exists")},
    ("tfyard.tune.trial", "open"): "the trial's log, in the study's logs/ folder",
    **{("tfyard.train.rundir.checkpoint", call): "the private checkpoint folder, in the "
       "system's temporary directory, of a member that writes no run files"
       for call in ("shutil.rmtree", "os.path.getmtime")},
}


def _homes() -> dict[str, tuple[set[str], str]]:
    """The modules besides the layout that spell a name of it, each its own, with why."""
    from tfyard.flags import OUTPUT_FLAG
    from tfyard.storage.location import DATA_COPIES, RUN_COPIES, STREAMED

    return {
        "tfyard.storage.location": ({DATA_COPIES, STREAMED, RUN_COPIES}, "a work dir's folders "
                                    "of bucket copies: storage lies below the layout"),
        "tfyard.flags": ({OUTPUT_FLAG}, "the run directory's flag: flags import nothing of "
                         "tfyard, so every layer, storage included, imports it"),
    }


def _run_file_names() -> tuple[set[str], set[str]]:
    """The layout's names (and its homes'): those no other string means (`run.json`), and
    the common words (`export`, `checkpoint`) that only name a run file where a path is
    built of them."""
    from tfyard.runfiles import layout

    names = {value for key, value in vars(layout).items()
             if key.isupper() and isinstance(value, str)} | {layout.METRICS + layout.REPORTS}
    names |= {name for spelled, _ in _homes().values() for name in spelled}
    # `work` and `logs` also name folders that are not a run's: the cache's of bucket runs'
    # work dirs (storage.default_work), a study's of its trials' logs (tune.search)
    others = {layout.WORK, layout.LOGS}
    common = {name for name in names if name.replace("_", "").isalpha()} - others
    return names - common - others - {layout.REPORTS}, common


def _docstrings(tree: ast.AST) -> set[int]:
    return {id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef)
            and node.body and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)}


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return ""


def spelled_run_files(module: str, source: str | None = None) -> list[str]:
    """Where `module` spells a run file's name: a string that is one, or a path with one
    as a part (`f"{run}/run.json"`), or a common word joined into a path; a checkpoint's
    name or pattern (`ckpt-`) outside prose; the trial numbering (`:04d`). A home spells
    its own names."""
    from tfyard.runfiles.layout import CHECKPOINT_PREFIX

    names, common = _run_file_names()
    own = _homes().get(module, (set(), ""))[0]
    tree = ast.parse(MODULES[module].read_text() if source is None else source)
    skip, found = _docstrings(tree), []
    joined = {id(arg) for node in ast.walk(tree) if isinstance(node, ast.Call)
              and _dotted(node.func) in ("os.path.join", "posixpath.join") for arg in node.args}
    specs = {id(part) for node in ast.walk(tree) if isinstance(node, ast.FormattedValue)
             and node.format_spec is not None for part in node.format_spec.values}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) \
                or id(node) in skip:
            continue
        parts = set(node.value.split("/")) - own
        prose = " " in node.value
        a_path = id(node) in joined or "/" in node.value and not prose
        if parts & names or a_path and parts & common \
                or re.search(rf"(?<![\w-]){CHECKPOINT_PREFIX}-", node.value) and not prose:
            found.append(f"{module}:{node.lineno} {node.value!r}")
        elif id(node) in specs and node.value == "04d":
            found.append(f"{module}:{node.lineno} ':04d'")
    return found


def test_run_file_names_are_spelled_in_one_module():
    spelled = [line for module in MODULES if module != NAMES
               for line in spelled_run_files(module)]
    assert not spelled, f"run file names spelled outside {NAMES}:\n" + "\n".join(spelled)
    assert set(_homes()) <= set(MODULES)


def test_the_name_check_sees_the_old_spellings():
    """It must be able to fail: the names this layout took in are caught where they were
    (a message's prose aside), and in their homes only the home's own name passes."""
    old = ('FLAG = "--output_dir"\n'
           'def saves(run, number, work, step):\n'
           '    found = glob(os.path.join(run, "ckpt-*.index")) + [run + ".index"]\n'
           '    log.info(f"saved checkpoint ckpt-{step}")\n'
           '    return found, f"{number:04d}", os.path.join(work, "bucket-data"), f"ckpt-{step}"\n')
    spelled = sorted(line.split(" ", 1)[1] for line in spelled_run_files("tfyard.tune.trial", old))
    assert not spelled_run_files("tfyard.tune.trial", 'PRIVATE = "tfyard-ckpt-"\n')
    assert spelled == ["'--output_dir'", "'.index'", "':04d'", "'bucket-data'", "'ckpt-'",
                       "'ckpt-*.index'"]
    assert "'bucket-data'" not in str(spelled_run_files("tfyard.storage.location", old))
    assert "'--output_dir'" not in str(spelled_run_files("tfyard.flags", old))
    assert len(spelled_run_files("tfyard.flags", old)) == len(spelled) - 1


def _readers_of_run_files() -> list[str]:
    """The modules that reach a run's files: those of `train.rundir` and every module that
    imports the layout or a `train.rundir` module."""
    return sorted(m for m in MODULES if m != SEAM and (
        m.startswith("tfyard.train.rundir") or any(
            name == NAMES or name.startswith("tfyard.train.rundir") for name in imports(m))))


def file_calls(module: str, source: str | None = None) -> list[str]:
    """The calls of `module` that open, test or move a file by its path themselves (the
    kernel's own files under /proc are not a run's)."""
    tree = ast.parse(MODULES[module].read_text() if source is None else source)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _dotted(node.func) in FILE_CALLS:
            first = node.args[0] if node.args else None
            if isinstance(first, ast.JoinedStr) and isinstance(first.values[0], ast.Constant) \
                    and str(first.values[0].value).startswith("/proc/"):
                continue
            if (module, _dotted(node.func)) not in OTHER_FILES:
                found.append(f"{module}:{node.lineno} {_dotted(node.func)}")
    return found


def test_run_files_are_opened_only_through_the_seam():
    calls = [line for module in _readers_of_run_files() for line in file_calls(module)]
    assert not calls, f"run files handled outside {SEAM}:\n" + "\n".join(calls)


def test_the_seam_checks_see_the_old_bypasses():
    """The rules must be able to fail: the bypasses the seam replaced are caught."""
    old = ('"""Docstrings may name run.json."""\n'
           'import os\nimport shutil\n'
           'def locate(run):\n'
           '    if os.path.exists(os.path.join(run, "export", "saved_model")):\n'
           '        return f"{run}/metrics.jsonl"\n'
           '    shutil.copyfile(os.path.join(run, "checkpoints", "checkpoint"), run)\n'
           '    with open(os.path.join(run, "run.json")) as handle:\n'
           '        return handle.read()\n'
           'def alive(pid):\n'
           '    return open(f"/proc/{pid}/stat")\n')
    module = "tfyard.predict.local"
    assert sorted(line.split(" ", 1)[1] for line in spelled_run_files(module, old)) == [
        "'/metrics.jsonl'", "'checkpoint'", "'checkpoints'", "'export'", "'run.json'",
        "'saved_model'"]
    assert sorted(line.split(" ", 1)[1] for line in file_calls(module, old)) == [
        "open", "os.path.exists", "shutil.copyfile"]
    assert module in _readers_of_run_files()


# One definition of each twin: the checks read the source, so a second copy fails them.
ONE_HOME = {"scheme": "tfyard.storage.location", "liveness": "tfyard.process.liveness",
            "environment number": "tfyard.process.envvars", "sender": "tfyard.process.sender",
            "affinity": "tfyard.process.cpus"}


def _in_fstrings(tree: ast.AST) -> set[int]:
    return {id(part) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
            for part in node.values}


def _reads_environ(node: ast.AST) -> bool:
    return any((isinstance(sub, ast.Attribute) and sub.attr in ("environ", "getenv"))
               or (isinstance(sub, ast.Name) and sub.id in ("environ", "getenv"))
               for sub in ast.walk(node))


def _name(node: ast.AST) -> str | None:
    """The name an assignment binds: `x` or `self.x`."""
    if isinstance(node, (ast.Name, ast.Attribute)) and isinstance(node.ctx, ast.Store):
        return node.id if isinstance(node, ast.Name) else node.attr
    return None


def twins(source: str) -> set[str]:
    """Which of the one-home tests `source` does itself: a scheme by "://", a process's
    liveness by signal 0 or /proc/PID, a number by int() or float() of the environment, a
    retrying sender by a backoff of its own, the usable CPUs by the affinity call."""
    tree = ast.parse(source)
    pieces, found = _in_fstrings(tree), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and node.value == "://" and id(node) not in pieces:
            found.add("scheme")
        elif isinstance(node, ast.JoinedStr) and len(node.values) > 1 and \
                isinstance(node.values[0], ast.Constant) and node.values[0].value == "/proc/" \
                and isinstance(node.values[1], ast.FormattedValue):
            found.add("liveness")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr == "kill" and len(node.args) == 2 and \
                isinstance(node.args[1], ast.Constant) and node.args[1].value == 0:
            found.add("liveness")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("int", "float") and any(map(_reads_environ, node.args)):
            found.add("environment number")
        elif (_name(node) or "").lstrip("_") == "backoff":
            found.add("sender")
        elif isinstance(node, ast.Attribute) and node.attr == "sched_getaffinity":
            found.add("affinity")
    return found


def test_each_twin_has_one_definition():
    assert set(ONE_HOME.values()) <= set(MODULES)
    outside = sorted(f"{module}: {kind}" for module, path in MODULES.items()
                     for kind in twins(path.read_text()) if ONE_HOME[kind] != module)
    assert not outside, ("tests done outside their one home (" + ", ".join(
        f"{kind}: {module}" for kind, module in ONE_HOME.items()) + "):\n" + "\n".join(outside))


def test_the_twin_checker_sees_the_old_copies():
    """The copies this layout removed are each caught; an f-string URL and /proc of this
    process are not scheme or liveness tests."""
    old = {
        "scheme": 'def _remote(path):\n    return "://" in path\n',
        "liveness": "def state(pid):\n    return open(f'/proc/{pid}/stat').read()\n",
        "environment number": "import os\nT = float(os.environ.get('TFYARD_END_TIMEOUT', 3))\n",
        "sender": "def _run(self):\n    backoff = 1.0\n    while True:\n        try:\n"
                  "            self._send()\n        except OSError:\n"
                  "            time.sleep(backoff)\n            backoff = min(backoff * 2, 10)\n",
        "affinity": "cores = len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity') "
                    "else os.cpu_count() or 1\n",
    }
    for kind, source in old.items():
        assert twins(source) == {kind}, kind
    assert twins("import os\ndef alive(pid):\n    os.kill(pid, 0)\n") == {"liveness"}
    assert twins("def f(s, b):\n    return f'{s}://{b}', f'/proc/self/fd/{b}'\n") == set()
    assert twins("self._backoff = 2\n") == {"sender"}
    assert twins("T = Timing(period=2, backoff=4, most_backoff=30)\n") == set()


# Calls that put a file in place or write one whole, which only `tfyard.replace` and its scheme
# `tfyard.process.staged` may make: os.replace, os.rename, shutil.move and any `.rename`,
# `.write_text`, `.write_bytes`.
PLACING = {"replace", "rename", "move", "write_text", "write_bytes"}
# (module, the call as written) allowed outside replace.py, with the reason.
PLACES_ALLOWED: dict[tuple[str, str], str] = {
    ("tfyard.pack.owned", "path.rename"): "moves the user's own Dockerfile aside to NAME.bak "
    "(--force): a user file kept, not an output written",
    ("tfyard.runfiles.files", "os.rename"): "the run directory's `move`, by which the lease "
    "sets a stale lease aside and a bucket run's copy of another lineage is set aside whole "
    "(`reconcile`): a rename of what exists, no output written",
    ("tfyard.storage", "os.rename"): "a run's local copy that an older tfyard left inside the "
    "default work dir, moved whole to its place (`run_copy`): a copy moved, not an output written",
}


PLACERS = ("tfyard.replace", "tfyard.process.staged")


def placing_calls(module: str, source: str | None = None) -> list[str]:
    """The calls of `module` that rename a file into place or write one whole."""
    found = []
    source = MODULES[module].read_text() if source is None else source
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name, owner = node.func.attr, ast.unparse(node.func.value)
        if name in PLACING and (owner in ("os", "shutil") or name not in ("replace", "move")):
            found.append(f"{owner}.{name}")
    return found


def test_outputs_are_put_in_place_by_replace_only():
    wrong = [f"{module}: {call}" for module in MODULES if module not in PLACERS
             for call in placing_calls(module) if (module, call) not in PLACES_ALLOWED]
    assert not wrong, "outputs put in place outside tfyard.replace:\n" + "\n".join(wrong)
    used = {(module, call) for module in MODULES for call in placing_calls(module)}
    assert set(PLACES_ALLOWED) <= used, "allowed calls no longer made: drop them from the list"


def test_the_placing_check_sees_each_way_around_replace():
    """It must be able to fail: the writes this rule removed are caught; a string's
    `.replace` is not."""
    old = ("os.replace(tmp, path)\nos.rename(staging, root)\nshutil.move(a, b)\n"
           "(out / name).write_text(text)\nPath(p).write_bytes(b)\ntf.io.gfile.rename(a, b)\n"
           "name.replace('_', '-')\n")
    assert placing_calls("tfyard.data.convert", old) == [
        "os.replace", "os.rename", "shutil.move", "out / name.write_text",
        "Path(p).write_bytes", "tf.io.gfile.rename"]


# TensorFlow's and Keras's internal modules, named in code (an import, or a module name as a
# string), which only `tfyard.compat` may use: an upgrade is checked there.
INTERNAL = ("tensorflow.python", "keras.src", "tensorflow_core")


def internal_names(module: str, source: str | None = None) -> list[str]:
    """The internal TensorFlow and Keras modules `module` imports or names in a string."""
    tree = ast.parse(MODULES[module].read_text() if source is None else source)
    named = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names]
    named += [node.module for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) and node.module]
    named += [node.value for node in ast.walk(tree)
              if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    return [name for name in named if name.startswith(INTERNAL)]


def test_tensorflows_internals_live_in_compat_alone():
    wrong = {module: names for module in MODULES if module != "tfyard.compat"
             for names in [internal_names(module)] if names}
    assert not wrong, f"TensorFlow or Keras internals outside tfyard.compat: {wrong}"


def test_the_internals_check_sees_an_import_and_a_name():
    planted = ("from tensorflow.python.eager import context\nimport keras.src.backend\n"
               "SKIP = {'tensorflow.python.keras.engine.training_v1': 'scipy'}\n")
    assert internal_names("tfyard.keras_startup", planted) == [
        "keras.src.backend", "tensorflow.python.eager",
        "tensorflow.python.keras.engine.training_v1"]


# Where a path lives is `storage`'s question (and `runfiles`', which asks it): elsewhere no
# module tests a path for a scheme itself. (module, the test as written) allowed, with why.
SCHEME_TESTS_ALLOWED: dict[tuple[str, str], str] = {
    ("tfyard.tune.study", "url.startswith('postgresql://')"): "a database URL given to "
    "SQLAlchemy, which names its driver in the scheme: not a place of files",
    ("tfyard.predict.worker", "path.startswith('file://')"): "the file URI Spark's and "
    "Ray's readers hand over for a local file, made a path again: not a bucket",
}


def scheme_tests(module: str, source: str | None = None) -> list[str]:
    """`module`'s tests of a string for a URL scheme: `"://" in x`, `x.startswith("s3://")`
    and the like (prose, such as help and errors, is not a test)."""
    found = []
    for node in ast.walk(ast.parse(MODULES[module].read_text() if source is None else source)):
        if isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            tested = node.left
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                node.func.attr in ("startswith", "removeprefix", "split", "partition") \
                and node.args:
            tested = node.args[0]
        else:
            continue
        if any(isinstance(n, ast.Constant) and isinstance(n.value, str) and "://" in n.value
               for n in ast.walk(tested)):
            found.append(ast.unparse(node))
    return found


def outside_the_store(found, allowed: dict) -> list[str]:
    """`found(module)`'s finds in every module outside storage and runfiles, less `allowed`."""
    return [f"{module}: {what}" for module in MODULES
            if not module.startswith(("tfyard.storage", "tfyard.runfiles"))
            for what in found(module) if (module, what) not in allowed]


def test_only_storage_and_the_run_store_test_for_a_scheme():
    wrong = outside_the_store(scheme_tests, SCHEME_TESTS_ALLOWED)
    assert not wrong, "a scheme tested outside storage and runfiles (ask storage.in_bucket " \
        "or runfiles.files_for):\n" + "\n".join(wrong)


def test_the_scheme_check_sees_each_way_of_testing():
    planted = ('if "://" in path:\n    pass\nremote = url.startswith(("s3://", "gs://"))\n'
               'bucket, _, key = url.removeprefix("s3://").partition("/")\n'
               'raise UserError(f"give s3://BUCKET/PREFIX, not {path}")\n')
    assert scheme_tests("tfyard.cli.train", planted) == [
        "'://' in path", "url.startswith(('s3://', 'gs://'))", "url.removeprefix('s3://')"]


# A bucket's objects are reached through the run store (`runfiles.objects.BucketFiles`) or
# storage's own calls: elsewhere no module takes a URL apart into a bucket and key (`location`),
# builds a key (`Location`), or calls a store (`stores.of`) or its copies (`mirror`) itself.
# (module, the call as written) allowed, with why.
STORE_CALLS_ALLOWED: dict[tuple[str, str], str] = {
    ("tfyard.platform", "storage.location(data, source)"): "a --data_dir URL checked before "
    "any work: the key is not used",
    ("tfyard.pack.k8s_spec", "location(output_dir, OUTPUT_FLAG)"): "the pod's --output_dir "
    "checked and written as the URL it is",
    ("tfyard.cli.data", "location(args.dst, 'destination')"): "`data convert` into a bucket: "
    "a data set's prefix, not a run's, checked before it is written",
    ("tfyard.cli.data", "mirror.top_names(location(args.dst, 'destination'), 'destination')"):
    "the same data set's prefix: what it holds already (--overwrite)",
}


def store_calls(module: str, source: str | None = None) -> list[str]:
    """`module`'s calls that take a URL apart, build a key or reach a store itself."""
    tree = ast.parse(MODULES[module].read_text() if source is None else source)
    return [ast.unparse(node) for node in ast.walk(tree)
            if isinstance(node, ast.Call) and (
                _dotted(node.func).split(".")[-1] in ("location", "Location")
                or _dotted(node.func) == "stores.of"
                or _dotted(node.func).startswith("mirror."))]


def test_only_storage_and_the_run_store_reach_a_bucket():
    wrong = outside_the_store(store_calls, STORE_CALLS_ALLOWED)
    assert not wrong, "a bucket reached outside storage and runfiles (go through " \
        "runfiles.files_for(url)):\n" + "\n".join(wrong)


def test_the_store_check_sees_each_way_around_the_run_store():
    planted = ('place = location(url, FLAG)\ntext = stores.of(place.scheme).read(place, FLAG)\n'
               'mirror.fetched(place, [], root, FLAG)\nkey = Location("s3", "b", "k")\n')
    assert sorted(store_calls("tfyard.tune.handover", planted)) == [
        "Location('s3', 'b', 'k')", "location(url, FLAG)", "mirror.fetched(place, [], root, FLAG)",
        "stores.of(place.scheme)"]


LONGEST_FUNCTION = 60   # lines: a function longer than this holds two jobs


def long_functions(module: str, source: str | None = None) -> list[str]:
    tree = ast.parse(MODULES[module].read_text() if source is None else source)
    return [f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
            for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > LONGEST_FUNCTION]


def test_no_function_runs_past_sixty_lines():
    long = [found for module in MODULES for found in long_functions(module)]
    assert not long, "split these into functions of one job each:\n" + "\n".join(long)


def test_the_length_check_sees_a_long_function():
    planted = "def loop():\n" + "    step()\n" * LONGEST_FUNCTION
    assert long_functions("tfyard.cli", planted) == ["tfyard.cli.loop: 61 lines"]
