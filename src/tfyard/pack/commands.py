"""The command lines of a packed image, shared by tfyard-cmd.txt and --build/--push.

One source for each command, so what the file tells a person is exactly what tfyard runs.
"""

from __future__ import annotations

import shlex

from tfyard.flags import OUTPUT_FLAG
from tfyard.pack.owned import HEADER
from tfyard.pack.spec import CODE_DIR, DATA_DIR, OUTPUT_DIR, PackSpec

PASSWORD_ENV = "TFYARD_REGISTRY_PASSWORD"
CMD_FILE = "tfyard-cmd.txt"


def platform_command(spec: PackSpec) -> list[str]:
    """What the platform runs in the container; data/output come from the image's ENV."""
    return ["python", f"{CODE_DIR}/{spec.main}", *spec.train_params]


def mounted_command(spec: PackSpec, output_dir: str = OUTPUT_DIR) -> list[str]:
    """The platform command naming the mount points as flags, for a container whose volumes
    the same file declares (the local test, a Kubernetes pod): paths and mounts read together.
    A run in a bucket names its URL as `output_dir` instead of the output mount."""
    return [*platform_command(spec)[:2], "--data_dir", DATA_DIR, OUTPUT_FLAG, output_dir,
            *spec.train_params]


def local_test_command(spec: PackSpec) -> list[str]:
    """`docker run` with host DATA and OUTPUT mounted and the platform flags filled in."""
    gpus = ["--gpus", "all"] if spec.gpu else []
    data = spec.test_data_path or "DATA"
    output = spec.test_output_path or "OUTPUT"
    return [
        "docker", "run", "--rm", *gpus,
        "-v", f"{data}:{DATA_DIR}", "-v", f"{output}:{OUTPUT_DIR}", spec.image,
        *mounted_command(spec),
    ]


def build_command(spec: PackSpec) -> list[str]:
    return ["docker", "build", "-t", spec.image, "-f", str(spec.out / "Dockerfile"),
            str(spec.out)]


def login_command(spec: PackSpec) -> list[str] | None:
    """`docker login` reading the password from stdin; None when no --registry_user is given."""
    if not spec.registry_user:
        return None
    host = [spec.registry_host] if spec.registry_host else []
    return ["docker", "login", "--username", spec.registry_user, "--password-stdin", *host]


def push_command(spec: PackSpec) -> list[str]:
    return ["docker", "push", spec.image]


def render_cmd_file(spec: PackSpec) -> str:
    """tfyard-cmd.txt: one shell command per line, each after a comment saying what it is for."""
    login = login_command(spec)
    lines = [
        f"{HEADER}: commands for {spec.image}",
        f"# The platform runs (working directory {CODE_DIR}; data and output directories",
        "# from the image's TFYARD_DATA_DIR and TFYARD_OUTPUT_DIR):",
        shlex.join(platform_command(spec)),
        "# Local test: DATA holds the input, OUTPUT receives the results:",
        shlex.join(local_test_command(spec)),
        "# Build:",
        shlex.join(build_command(spec)),
        "# Push:" if not login else
        f"# Push (the password comes from ${PASSWORD_ENV} on stdin, never from a command line):",
    ]
    if login:
        lines.append(f'printf "%s" "${PASSWORD_ENV}" | {shlex.join(login)}')
    lines.append(shlex.join(push_command(spec)))
    return "\n".join(lines) + "\n"
