"""Write a Docker build context: the files `docker build` and the platform need."""

from __future__ import annotations

import shutil
from pathlib import Path

from tfyard.pack.commands import CMD_FILE, render_cmd_file
from tfyard.pack.dockerfile import render_dockerfile, render_dockerignore
from tfyard.pack.k8s import MANIFEST_FILE, render_manifest
from tfyard.pack.owned import HEADER, claim
from tfyard.pack.spec import PackSpec
from tfyard.pack.wheel import build_wheel
from tfyard.replace import replacing_directory, replacing_file

REQUIREMENTS_FILE = "tfyard-requirements.txt"
# Where the code goes when --out is not one of its ancestors (owned by tfyard, replaced).
CODE_COPY = "tfyard-code"


def write_context(spec: PackSpec, force: bool = False) -> tuple[list[Path], list[Path]]:
    """Write Dockerfile, .dockerignore, the tfyard wheel, tfyard-cmd.txt (and the manifest);
    returns (written, backups). A file of those names that pack did not write is refused
    before anything is written, or with `force` kept as NAME.bak (see `owned`)."""
    names = ["Dockerfile", ".dockerignore", CMD_FILE, REQUIREMENTS_FILE, MANIFEST_FILE]
    backups = claim(spec.out, names, force)
    spec.out.mkdir(parents=True, exist_ok=True)
    for stale in (REQUIREMENTS_FILE, MANIFEST_FILE):  # left by an earlier pack with more flags
        (spec.out / stale).unlink(missing_ok=True)
    code_rel = _place_code(spec)
    wheel = build_wheel(spec.out)
    written = [wheel]
    requirements = None
    texts = {}
    if spec.requirements:
        requirements = REQUIREMENTS_FILE
        texts[requirements] = (f"{HEADER}: a copy of {spec.requirements}\n"
                               + Path(spec.requirements).read_text(encoding="utf-8"))
    keep = [wheel.name, *([requirements] if requirements else [])]
    texts.update({
        "Dockerfile": render_dockerfile(spec, code_rel, wheel.name, requirements),
        ".dockerignore": render_dockerignore(code_rel, keep),
        CMD_FILE: render_cmd_file(spec),
    })
    if spec.k8s:
        texts[MANIFEST_FILE] = render_manifest(spec)
    for name, text in texts.items():
        with replacing_file(str(spec.out / name)) as stream:
            stream.write(text)
        written.append(spec.out / name)
    return written, backups


def _place_code(spec: PackSpec) -> str:
    """The code's path inside the context, copying it in when it lives elsewhere."""
    if spec.code_path.is_relative_to(spec.out):
        return spec.code_path.relative_to(spec.out).as_posix()
    with replacing_directory(str(spec.out / CODE_COPY)) as copy:
        shutil.copytree(spec.code_path, copy,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc", ".git"))
    return CODE_COPY
