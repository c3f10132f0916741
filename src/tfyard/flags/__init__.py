"""Command-line parsing shared by the CLI, the seed scripts and the platform helpers: the
one-line usage errors and the flag rewrites classic command lines need; `flags.declared`
makes flags from dataclass fields. No tfyard imports, so every layer may use it."""

from __future__ import annotations

import argparse

# The run directory's flag, named here once: every layer names it in its one-line errors.
OUTPUT_FLAG = "--output_dir"


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit status 2, an unknown option
    with the one it likely meant. No abbreviations: `--lr` is not taken for `--lr_schedule`
    (an abbreviation's meaning changes whenever an option is added)."""

    # Options whose value may itself start with a dash: `--train_params --batch_size=64`.
    dash_values: frozenset[str] = frozenset()

    def __init__(self, *args, allow_abbrev: bool = False, **kwargs):
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def add_subparsers(self, **kwargs):  # noqa: D102 - argparse API
        action = super().add_subparsers(**kwargs)
        self.commands = action.choices   # each (sub)command's parser, by name
        return action

    def innermost(self, argv: list[str]) -> argparse.ArgumentParser:
        """The parser of the deepest (sub)command `argv` names (`bench train`)."""
        parser = self
        for word in argv:
            if word == "--":
                break
            parser = getattr(parser, "commands", {}).get(word, parser)
        return parser

    def error(self, message):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {self.explained(message)} "
                     f"(see `{self.prog} --help`)\n")

    def explained(self, message: str) -> str:
        """`message`, with the option an unrecognized one likely meant."""
        words = message.split()
        if message.startswith("unrecognized arguments: ") and words[2].startswith("--"):
            guess = likely_option(words[2].split("=")[0], self._option_string_actions)
            if guess:
                return f"{message} (did you mean {guess}?)"
        return message

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102 - argparse API
        if args is not None and self.dash_values:
            args = join_dash_values(list(args), self.dash_values)
        return super().parse_known_args(args, namespace)


def likely_option(given: str, options) -> str | None:
    """The option `given` likely meant: one whose words' initials it spells (`--lr`:
    `--learning_rate`), else one it begins, else the closest spelling."""
    import difflib

    known = sorted((o for o in options if o.startswith("--")), key=lambda o: ("-" in o[2:], o))
    typed = given[2:].replace("-", "_")
    initials = [o for o in known if "".join(w[:1] for w in o[2:].split("_")) == typed]
    begun = [o for o in known if o[2:].startswith(typed)]
    close = difflib.get_close_matches(given, known, n=1)
    return next(iter(initials or begun or close), None)


def join_dash_values(args: list[str], options) -> list[str]:
    """`--opt -x` -> `--opt=-x` for `options`, which argparse would otherwise read as
    `--opt` missing its value; nothing after a bare `--` is touched."""
    out = []
    rest = iter(args)
    for arg in rest:
        if arg == "--":
            return [*out, arg, *rest]
        if arg in options:
            value = next(rest, None)
            out.append(arg if value is None else f"{arg}={value}")
        else:
            out.append(arg)
    return out


def rename_flags(argv: list[str], renames: dict[str, str]) -> list[str]:
    """Rewrite flag names (`--train_dir=X` -> `--output_dir=X`, either form of the value)."""
    out = []
    for arg in argv:
        head, sep, tail = arg.partition("=")
        out.append(renames.get(head, head) + sep + tail if head in renames else arg)
    return out


TRUE, FALSE = ("true", "1", "yes"), ("false", "0", "no")


def absl_booleans(argv: list[str], names) -> list[str]:
    """absl's boolean spellings of `names` as argparse switches: `--x=True` -> `--x`,
    `--x=False` and `--nox` -> nothing (absl scripts wrote all three)."""
    out = []
    for arg in argv:
        head, sep, value = arg.partition("=")
        if head in names and sep and value.lower() in TRUE:
            out.append(head)
        elif (head in names and sep and value.lower() in FALSE) or \
                any(arg == "--no" + name[2:] for name in names):
            continue
        else:
            out.append(arg)
    return out
