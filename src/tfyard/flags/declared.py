"""Options declared once, as dataclass fields that carry their flag metadata: `opt` declares
a field, `add_field_arguments` makes the argparse flags from the fields and `command_line`
gives the flags back; the value checks convert and validate a flag's text or a field's
value, and `Checked` runs them when the dataclass is built in Python. Nothing here knows
what an option means (`train.options` declares train's, `tune.settings` tune's), and
nothing of tfyard but its errors is imported, so every layer may use it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Iterable
from dataclasses import field, fields

from tfyard.errors import UserError

# --- value checks: each takes a parsed value and returns it, or raises ValueError ---------


def _finite(value) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"{value} must be a finite number")
    return number


def _ranged(name: str, convert, within, rule: str):
    """A check named `name` (argparse shows it): `convert`, then refuse what is not `within`."""
    def check(value):
        number = convert(value)
        if not within(number):
            raise ValueError(f"{value} must be {rule}")
        return number

    check.__name__ = name
    return check


positive_int = _ranged("positive_int", int, lambda n: n > 0, "a positive integer")
nonnegative_int = _ranged("nonnegative_int", int, lambda n: n >= 0, "an integer >= 0")
positive_float = _ranged("positive_float", _finite, lambda n: n > 0, "> 0")
nonnegative_float = _ranged("nonnegative_float", _finite, lambda n: n >= 0, ">= 0")
fraction = _ranged("fraction", _finite, lambda n: 0 <= n < 1, "in [0, 1)")


def flag_type(check: Callable) -> Callable:
    def convert(text: str):
        try:
            return check(text)
        except ValueError as exc:
            text = str(exc).replace("could not convert string to float: ", "not a number: ")
            raise argparse.ArgumentTypeError(text) from None
    convert.__name__ = check.__name__
    return convert


def opt(default=None, *aliases: str, help: str | None = None, check: Callable | None = None,
        choices: Iterable[str] | None = None, group: str = "optimisation",
        negate: tuple[str, ...] = (), platform_flag: bool = False, factory=None,
        required: bool = False, metavar: str | None = None):
    """A field with its flag metadata.

    aliases: other spellings (classic ones included); check: converts and validates a
    value (argparse and the constructor both use it); negate: spellings that store False
    for a boolean; platform_flag: declared by `tfyard.platform` (the platform contract);
    required: the flag must be given (and the field, in Python).
    """
    meta = {"aliases": aliases, "help": help, "check": check, "group": group,
            "choices": tuple(choices) if choices else None, "negate": negate,
            "platform": platform_flag, "required": required, "metavar": metavar}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


class Checked:
    """A dataclass of `opt` fields built in Python is checked as its flags are: each field's
    `check` converts and validates it, its choices and its being given are enforced (one
    UserError line naming the flag)."""

    def __post_init__(self):
        for f in fields(self):
            value, meta = getattr(self, f.name), f.metadata
            if value is None:
                if meta["required"]:
                    raise UserError(f"--{f.name} is required (in Python, {f.name}=...)")
                continue
            if meta["choices"] and value not in meta["choices"]:
                raise UserError(f"--{f.name} {value}: give one of {', '.join(meta['choices'])}")
            if meta["check"] is None:
                continue
            try:
                checked = meta["check"](value)
            except (ValueError, TypeError) as exc:
                raise UserError(f"--{f.name} {value!r}: {exc}") from None
            if isinstance(value, (int, float)) and (
                    checked != value or isinstance(value, bool) != isinstance(checked, bool)):
                kind = "an integer" if isinstance(checked, int) else "a number"
                raise UserError(f"--{f.name} {value!r}: give {kind}")
            object.__setattr__(self, f.name, checked)


def command_line(options, names: Iterable[str] | None = None) -> list[str]:
    """The command line that parses back to `options` (flags that differ from the
    defaults; `names` limits it to those fields)."""
    default = type(options)()
    argv = []
    for f in fields(options):
        value = getattr(options, f.name)
        if (names is not None and f.name not in names) or value == getattr(default, f.name):
            continue
        if isinstance(value, bool) or f.metadata["negate"] and value is not None:
            argv.append(f"--{f.name}" if value else f.metadata["negate"][0])
        elif isinstance(value, tuple):
            argv += [f"--{f.name}", ",".join(str(x) for x in value)]
        else:
            argv += [f"--{f.name}", str(value)]
    return argv


def add_field_arguments(parser, declared: type, names: Iterable[str] | None = None,
                        defaults: dict | None = None, grouped: bool = True,
                        helps: dict | None = None):
    """Add the flags of the `declared` dataclass's fields `names` (all but the platform's by
    default), in help groups unless `grouped` is False (a mutually exclusive group, say).

    Every flag defaults to None (absent); the dataclass default applies, or `defaults`.
    `helps` replaces a field's help where a command gives the flag another meaning.
    """
    groups: dict[str, object] = {}
    defaults, helps = defaults or {}, helps or {}
    for f in fields(declared):
        meta = f.metadata
        if meta["platform"] or (names is not None and f.name not in names):
            continue
        if meta["group"] not in groups:
            groups[meta["group"]] = parser.add_argument_group(meta["group"]) if grouped \
                else parser
        group = groups[meta["group"]]
        spellings = (f"--{f.name}", *meta["aliases"])
        default = defaults.get(f.name)
        help_text = helps.get(f.name, meta["help"])
        if help_text and "{default}" in help_text:  # the default in use, declared once
            help_text = help_text.replace("{default}", str(f.default if default is None
                                                             else default))
        elif default is not None:
            help_text = f"{help_text or ''} (default: {default})".lstrip()
        if f.type in ("bool", "bool | None"):
            group.add_argument(*spellings, dest=f.name, action="store_true", default=default,
                               help=help_text)
            if meta["negate"]:
                group.add_argument(*meta["negate"], dest=f.name, action="store_false",
                                   help=f"turn --{f.name} off")
            continue
        group.add_argument(*spellings, dest=f.name, default=default, help=help_text,
                           choices=meta["choices"], required=meta["required"],
                           metavar=meta["metavar"],
                           type=flag_type(meta["check"]) if meta["check"] else None)
    return parser
