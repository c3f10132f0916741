"""--build and --push through the docker CLI; the registry password travels only on stdin.

The password is read from TFYARD_REGISTRY_PASSWORD or stdin, handed to
`docker login --password-stdin`, and removed from the environment docker inherits.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys

from tfyard.errors import UserError
from tfyard.pack.commands import (
    PASSWORD_ENV,
    build_command,
    login_command,
    push_command,
)
from tfyard.pack.spec import PackSpec


def require_engine(spec: PackSpec) -> None:
    """Fail in one line when there is no docker CLI or no engine behind it."""
    where = f"the image files are written in {spec.out}"
    if shutil.which("docker") is None:
        raise UserError(f"the `docker` command is not installed; {where}: build them on a "
                        "machine with Docker (see tfyard-cmd.txt)")
    try:
        probe = subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"],
                               capture_output=True, text=True, env=_child_env(), timeout=60)
        failed, stderr = probe.returncode != 0, probe.stderr
    except subprocess.TimeoutExpired:
        failed, stderr = True, "`docker info` did not answer in 60 s"
    if failed:
        reason = (stderr.strip().splitlines() or ["no answer"])[-1]
        raise UserError(f"no Docker engine is running ({reason}); {where}: start Docker and "
                        "rerun, or build elsewhere with the command in tfyard-cmd.txt")


def build(spec: PackSpec) -> None:
    _run(build_command(spec))


def push(spec: PackSpec) -> None:
    """Log in first when --registry_user is given, then push."""
    login = login_command(spec)
    if login:
        _run(login, read_password())
    _run(push_command(spec))


def read_password() -> str:
    """The registry password from TFYARD_REGISTRY_PASSWORD, else stdin (prompting on a tty)."""
    password = os.environ.get(PASSWORD_ENV)
    if password is None:
        if sys.stdin.isatty():
            password = getpass.getpass("registry password: ")
        else:
            password = sys.stdin.readline().rstrip("\r\n")
    if not password:
        raise UserError(f"no registry password: set {PASSWORD_ENV} or pipe it on stdin")
    return password


def _child_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != PASSWORD_ENV}


def _run(argv: list[str], stdin_text: str | None = None) -> None:
    result = subprocess.run(argv, input=stdin_text, text=True, env=_child_env())
    if result.returncode != 0:
        raise UserError(f"`docker {argv[1]}` failed with exit status {result.returncode}; "
                        "see docker's output above")
