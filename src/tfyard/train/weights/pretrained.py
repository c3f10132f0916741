"""Start from trained weights (`--init_checkpoint`), strictly, with a report; then freeze.

One step of the run's order (`train.build.prepare`): after the model is built in the strategy
scope, before the optimizer sees its trainable weights and before step 1, and only when the
output dir holds no checkpoint. A resume never re-applies it: the run's own checkpoint holds
the weights (Model Garden's rule; tensorflow#18696 is what happens otherwise). Every member
that builds the model reads the source itself, so every replica and worker starts from the
same weights; under parameter servers the chief assigns the ps variables.

Matching is by weight path (`conv1/kernel`; Keras 3 files by their position paths,
translated through the model's own), then by the last two parts of the path where that is
unambiguous on both sides, so the weights of a nested base model (Keras Applications' flat
files) find their layers. Strict: a weight of the model that the source lacks or holds with
another shape is an error, before any step, except the classifier head, started fresh when
the source lacks it or its class count differs. Only model weights are read: the step,
optimizer slots and schedule always start anew.
"""

from __future__ import annotations

import logging
import os
import re
from collections import Counter
from dataclasses import dataclass, field

from tfyard import compat
from tfyard.errors import UserError
from tfyard.runfiles.layout import RunDirectory
from tfyard.train.rundir.directory import checkpoint_paths, read_run
from tfyard.train.task.task import output_width
from tfyard.train.weights import freezing
from tfyard.train.weights.weight_files import FLAG, Source, open_source

log = logging.getLogger("tfyard")
SHOWN = 3   # weights named in an error or report line


@dataclass
class Match:
    """How each weight of the model fares against a source."""

    load: list = field(default_factory=list)         # (weight, source key)
    missing: list = field(default_factory=list)      # weights the source lacks
    other_shape: list = field(default_factory=list)  # (weight, source key)
    fresh_head: list = field(default_factory=list)   # (weight, source key or None)
    excluded: int = 0
    unused: int = 0                                  # source weights no model weight took


def start_from_weights(model, options, input_shape, output_dir: str,
                       coordinator: bool) -> dict | None:
    """Apply --init_checkpoint (new runs only) and --trainable/--freeze/--train_head_only
    to `model`; logs one line on the coordinator and returns what run.json records."""
    if not (options.init_checkpoint or options.trainable or options.freeze
            or options.train_head_only):
        return None
    width = output_width(model, input_shape)
    head = freezing.head_layer(model, width)
    record, words = None, []
    if options.init_checkpoint and checkpoint_paths(
            RunDirectory(output_dir).checkpoints):
        record = _resumed(options.init_checkpoint, output_dir, coordinator)
    elif options.init_checkpoint:
        record, line = initialize(model, options, head)
        words.append(line)
    if options.trainable or options.freeze or options.train_head_only:
        if options.train_head_only and head is None:
            raise UserError(f"--train_head_only: {model.name} has no classifier head (a layer "
                            f"whose kernel ends in the {width} outputs); name the layers to "
                            "train with --trainable")
        names = freezing.freeze(model, options.trainable, options.freeze,
                                head if options.train_head_only else None)
        words.append(freezing.describe_frozen(names))
        record = {**(record or {}), "frozen_layers": names}
    if words and coordinator:
        log.info("tfyard: " + "; ".join(words))
    return record


def _resumed(given: str, output_dir: str, coordinator: bool) -> dict | None:
    """A resume: the checkpoint wins; say so, and warn when another source is named."""
    before = read_run(output_dir) or {}
    earlier = before.get("init_checkpoint")
    if coordinator and earlier and os.path.abspath(earlier) != os.path.abspath(given):
        log.warning(f"tfyard: warning: {FLAG} {given} differs from the {earlier} this run "
                    "started from; it resumes from its own checkpoint and applies neither")
    elif coordinator:
        log.info(f"tfyard: {FLAG} {given} not applied: the run resumes from its own "
                 "checkpoint, which already holds the weights")
    return before.get("init")


def kept_on_resume(record: dict, before: dict | None) -> dict:
    """run.json for a resumed run: the source its first start named (`init_checkpoint`, and
    `init` but for this start's frozen layers), whatever this start names, so a later
    resume's warning names the source the weights came from."""
    if before is None:
        return record
    source = {k: v for k, v in (before.get("init") or {}).items() if k != "frozen_layers"}
    frozen = (record.get("init") or {}).get("frozen_layers")
    init = {**source, **({"frozen_layers": frozen} if frozen is not None else {})}
    return {**record, "init_checkpoint": before.get("init_checkpoint"), "init": init or None}


def initialize(model, options, head) -> tuple[dict, str]:
    """Assign the source's weights to `model`; (run.json's record, the report's words)."""
    excluded = freezing.select_layers(model, options.init_exclude, "--init_exclude") \
        if options.init_exclude else set()
    with open_source(options.init_checkpoint, options.work_dir) as source:
        match = match_weights(model, source, head, excluded, options.init_fresh_head)
        refuse_misfit(model, source, match, options.init_allow_missing)
        for weight, key in match.load:
            weight.assign(source.read(key).astype(weight.dtype))
        record = {"source": source.given, "path": source.path, "format": source.kind,
                  "fingerprint": source.fingerprint(), "loaded": len(match.load),
                  "weights": len(model.weights), "excluded": match.excluded,
                  "missing_started_fresh": len(match.missing),
                  "unused_in_source": match.unused,
                  "head": _head_words(match, source, options.init_fresh_head)
                  if match.fresh_head else "loaded"}
    words = [f"initialized from {source.given}: {len(match.load)} of {len(model.weights)} "
             "weights"]
    if match.fresh_head:
        words.append(f"head started {record['head']}")
    if match.excluded:
        words.append(f"{match.excluded} excluded (--init_exclude)")
    if match.missing:
        words.append(f"{len(match.missing)} not in the source, started fresh "
                     "(--init_allow_missing)")
    return record, "; ".join(words)


def match_weights(model, source: Source, head, excluded: set[int],
                  fresh_head: bool = False) -> Match:
    """Sort every weight of `model` by what the source holds for it."""
    owners = freezing.owner_of_weights(model)
    keys = source_keys(model, source)

    def fits(weight) -> bool:
        key = keys.get(id(weight))
        return key is not None and source.shapes[key] == tuple(weight.shape)

    # the head loads whole or starts fresh whole
    head_fresh = head is not None and (fresh_head or not all(map(fits, head.weights)))
    match = Match()
    for weight in model.weights:
        layer, key = owners[id(weight)], keys.get(id(weight))
        if id(layer) in excluded:
            match.excluded += 1
        elif layer is head and head_fresh:
            match.fresh_head.append((weight, key))
        elif key is None:
            match.missing.append(weight)
        elif not fits(weight):
            match.other_shape.append((weight, key))
        else:
            match.load.append((weight, key))
    match.unused = len(set(source.shapes) - set(keys.values()))
    return match


def source_keys(model, source: Source) -> dict[int, str]:
    """id(weight of `model`) -> the key of the source's weight for it. Named sources match
    by each naming in turn, each looser than the last, where it names one weight on each
    side: the whole path, `layer/weight`, then `layer#rank/weight` (layers named alike,
    Keras's `dense`, `dense_1` ..., paired in order: a model built after others in one
    process numbers its unnamed layers on from theirs)."""
    if source.positional:
        return {id(weight): position for position, weight in compat.weight_positions(model).items()
                if position in source.shapes}
    by_path = {w.path: w for w in model.weights}
    keys: dict[int, str] = {}
    for naming in (_whole, _tail, _ranked):
        theirs, ours = _unique(naming(list(source.shapes))), _unique(naming(list(by_path)))
        taken = set(keys.values())
        for name, path in ours.items():
            weight = by_path[path]
            if id(weight) not in keys and theirs.get(name) not in (None, *taken):
                keys[id(weight)] = theirs[name]
    return keys


def _whole(paths: list[str]) -> list[tuple[str, str]]:
    return [(path, path) for path in paths]


def _tail(paths: list[str]) -> list[tuple[str, str]]:
    return [("/".join(path.split("/")[-2:]), path) for path in paths]


def _ranked(paths: list[str]) -> list[tuple[str, str]]:
    """(`dense#1/kernel`, path): a layer's name without Keras's `_N` suffix, and its rank
    among the layers so named, in the order given."""
    alike: Counter = Counter()
    ranks: dict[str, int] = {}
    named = []
    for path in paths:
        *_, layer, weight = ["", *path.split("/")]
        base = re.sub(r"_\d+$", "", layer)
        if layer not in ranks:
            ranks[layer], alike[base] = alike[base], alike[base] + 1
        rank = ranks[layer]
        named.append((f"{base}#{rank}/{weight}", path))
    return named


def _unique(named: list[tuple[str, str]]) -> dict[str, str]:
    """name -> path, for the names only one path has."""
    counts = Counter(name for name, _ in named)
    return {name: path for name, path in named if counts[name] == 1}


def refuse_misfit(model, source: Source, match: Match, allow_missing: bool) -> None:
    """One line, before any step, for a source that does not fit the model."""
    where = f"{FLAG} {source.given}"
    if not match.load:
        ours = ", ".join(w.path for w in model.weights[:SHOWN])
        theirs = ", ".join(list(source.shapes)[:SHOWN])
        raise UserError(f"{where} shares no weight with {model.name} (the model has {ours}, "
                        f"...; the source {theirs}, ...): it holds another architecture's "
                        "weights; give weights trained with this model")
    problems = []
    if match.missing and not allow_missing:
        named = ", ".join(f"{w.path} {_shape(w.shape)}" for w in match.missing[:SHOWN])
        problems.append(f"{len(match.missing)} weight(s) missing from the source ({named})")
    if match.other_shape:
        named = ", ".join(f"{w.path} {_shape(w.shape)} vs {_shape(source.shapes[key])}"
                          for w, key in match.other_shape[:SHOWN])
        problems.append(f"{len(match.other_shape)} with another shape in the source "
                        f"(model vs source: {named})")
    if problems:
        raise UserError(f"{where} does not fit {model.name}: {'; '.join(problems)}; start "
                        "those layers fresh with --init_exclude PATTERNS"
                        + (" (or --init_allow_missing for missing ones)" if match.missing
                           else ""))


def _head_words(match: Match, source: Source, asked: bool) -> str:
    """Why the head started fresh: `fresh (10 -> 2 classes)`, `fresh (not in the source)`,
    `fresh (--init_fresh_head)` or `fresh (source [8, 10], model [16, 10])`."""
    kernel, key = next(((w, k) for w, k in match.fresh_head if len(w.shape) >= 2),
                       match.fresh_head[0])
    if key is None:
        return "fresh (not in the source)"
    theirs = source.shapes[key]
    if theirs[-1] != kernel.shape[-1]:
        return f"fresh ({theirs[-1]} -> {kernel.shape[-1]} classes)"
    if asked:
        return "fresh (--init_fresh_head)"
    return f"fresh (source {_shape(theirs)}, model {_shape(kernel.shape)})"


def _shape(shape) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
