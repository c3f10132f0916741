"""A predict's options, declared once: the CLI's flags are made from these fields, and
`tfyard.predict`, `tfyard.spark.predict`, `tfyard.ray.predict` and the engines' jobs take the
same `PredictOptions`, checked once where the caller gave them. An error names the option as
that caller spelled it: `--top_k` on the command line, `top_k` in Python."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from tfyard.errors import UserError

ON_ERROR = ("skip", "fail")


def _option(default, help: str, **more):
    return field(default=default, metadata={"help": help, **more})


@dataclass(frozen=True)
class PredictOptions:
    """How to predict; see each field's help (the CLI's)."""

    top_k: int = _option(5, "how many classes each row lists (default 5)")
    batch_size: int = _option(32, "images per model call (default 32)")
    on_error: str = _option("skip", "an unreadable image: a row with its error (skip, "
                            "default), or stop at it with one line naming it (fail)",
                            choices=ON_ERROR)
    workers: int | None = _option(None, "--on spark|ray: workers scoring at once (default: "
                                  "the engine's parallelism, one per core)", scale=True)

    def checked(self, cli: bool = False) -> PredictOptions:
        """These options, if each is valid; else one UserError naming it as spelled."""
        for option in fields(self):
            value, name = getattr(self, option.name), flag(option.name) if cli else option.name
            if "choices" in option.metadata:
                if value not in option.metadata["choices"]:
                    raise UserError(f"unknown {name} {value!r}; use "
                                    f"{' or '.join(option.metadata['choices'])}")
            elif value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                        or value < 1):
                raise UserError(f"{name} must be a whole number of at least 1, got {value!r}")
        return self


def flag(name: str) -> str:
    return f"--{name}"


def add_flags(parser, scale_group) -> None:
    """The options as flags (`--top_k` and `--top-k`), the engines' own in `scale_group`;
    argparse leaves the checks to `PredictOptions.checked`, so both doors say the same."""
    for option in fields(PredictOptions):
        spellings = [flag(option.name)] + ([flag(option.name.replace("_", "-"))]
                                           if "_" in option.name else [])
        group = scale_group if option.metadata.get("scale") else parser
        choices = option.metadata.get("choices")
        group.add_argument(*spellings, dest=option.name, type=str if choices else int,
                           default=option.default, help=option.metadata["help"],
                           metavar="|".join(choices) if choices else None)


def from_args(args) -> PredictOptions:
    """The options the CLI parsed, checked, named as flags."""
    return PredictOptions(**{option.name: getattr(args, option.name)
                             for option in fields(PredictOptions)}).checked(cli=True)
