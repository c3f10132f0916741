"""The Dockerfile and .dockerignore of a build context."""

from __future__ import annotations

import json

from tfyard.pack.commands import platform_command
from tfyard.pack.owned import HEADER
from tfyard.pack.spec import CODE_DIR, DATA_DIR, OUTPUT_DIR, PackSpec


def render_dockerfile(spec: PackSpec, code_rel: str, wheel: str,
                      requirements: str | None) -> str:
    """Base image, tfyard, the user's requirements, the code at /data, the platform defaults."""
    lines = [
        f"{HEADER} for {spec.image}; rebuild with the command in "
        "tfyard-cmd.txt.",
        f"FROM {spec.base_image}",
        "# tfyard is not on PyPI: `tfyard pack` zipped the installed tfyard package into this",
        "# wheel (offline, no build tools); pip adds only what the base image lacks.",
        _copy(wheel, f"/tmp/{wheel}"),
        f"RUN python -m pip install --no-cache-dir /tmp/{wheel} && rm /tmp/{wheel}",
    ]
    if requirements:
        lines += [
            "# The training code's own dependencies, installed before the code is copied so",
            "# that editing the code does not reinstall them.",
            _copy(requirements, f"/tmp/{requirements}"),
            f"RUN python -m pip install --no-cache-dir -r /tmp/{requirements} "
            f"&& rm /tmp/{requirements}",
        ]
    lines += [
        f"# The training code; the platform mounts data at {DATA_DIR} and output at "
        f"{OUTPUT_DIR}.",
        _copy(f"{code_rel}/", f"{CODE_DIR}/"),
        f"WORKDIR {CODE_DIR}",
        "# The platform contract's defaults: tfyard.platform reads TFYARD_<FLAG>.",
        f"ENV TFYARD_DATA_DIR={DATA_DIR}",
        f"ENV TFYARD_OUTPUT_DIR={OUTPUT_DIR}",
        f"CMD {json.dumps(platform_command(spec))}",
    ]
    return "\n".join(lines) + "\n"


def _copy(source: str, dest: str) -> str:
    """COPY in JSON form, so paths with spaces survive."""
    return f"COPY {json.dumps([source, dest])}"


def render_dockerignore(code_rel: str, keep: list[str]) -> str:
    """Send the engine only what the Dockerfile copies: the context may hold much more."""
    lines = [f"{HEADER}: everything but the image's inputs stays out.", "*",
             f"!{code_rel}", *(f"!{name}" for name in keep),
             "**/__pycache__", "**/*.pyc", "**/.git"]
    return "\n".join(lines) + "\n"
