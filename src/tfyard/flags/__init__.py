"""Command-line parsing shared by the CLI, the seed scripts and the platform helpers: the
one-line usage errors and the flag rewrites classic command lines need; `flags.declared`
makes flags from dataclass fields. No tfyard imports, so every layer may use it."""

from __future__ import annotations

import argparse


class Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line and exit status 2."""

    # Options whose value may itself start with a dash: `--train_params --batch_size=64`.
    dash_values: frozenset[str] = frozenset()

    def error(self, message):  # noqa: D102 - argparse API
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102 - argparse API
        if args is not None and self.dash_values:
            args = join_dash_values(list(args), self.dash_values)
        return super().parse_known_args(args, namespace)


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
