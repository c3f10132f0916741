"""What to pack, validated up front: each mistake is one line, before any file is written."""

from __future__ import annotations

import importlib.metadata
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from tfyard.errors import UserError
from tfyard.pack.k8s_spec import K8sSpec, make_k8s_spec

# Where things live inside the image: the code at /data, the platform contract's defaults below.
CODE_DIR = "/data"
DATA_DIR = "/data/data"
OUTPUT_DIR = "/data/output"

# The Docker reference grammar (github.com/distribution/reference), digests excepted.
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_PART = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_PART}(?:\.{_DOMAIN_PART})*(?::[0-9]+)?)"
_NAME = rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_IMAGE = re.compile(rf"^(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?$")
_BASE_IMAGE = re.compile(rf"^{_NAME}(?::{_TAG})?(?:@{_DIGEST})?$")


@dataclass(frozen=True)
class PackSpec:
    """A validated pack request; paths are absolute, `main` is relative to `code_path`."""

    code_path: Path
    main: str
    image: str
    base_image: str
    out: Path
    gpu: bool = False
    train_params: tuple[str, ...] = ()
    requirements: Path | None = None
    k8s: K8sSpec | None = None
    test_data_path: str | None = None
    test_output_path: str | None = None
    registry_user: str | None = None

    @property
    def registry_host(self) -> str | None:
        """The registry `docker login` talks to; None for Docker Hub."""
        first, _, rest = self.image.partition("/")
        is_domain = rest and ("." in first or ":" in first or first == "localhost")
        return first if is_domain else None


def make_spec(
    code_path: str,
    main: str,
    image: str,
    base_image: str | None = None,
    gpu: bool = False,
    requirements: str | None = None,
    train_params: str = "",
    registry: str | None = None,
    out: str | None = None,
    k8s: str | None = None,
    test_data_path: str | None = None,
    test_output_path: str | None = None,
    registry_user: str | None = None,
    name: str | None = None,
    namespace: str | None = None,
    cpus: str | None = None,
    memory: str | None = None,
    data_volume: str | None = None,
    output_volume: str | None = None,
    output_dir: str | None = None,
    credentials_secret: str | None = None,
    queue: str | None = None,
    priority_class: str | None = None,
) -> PackSpec:
    """Check every input and return the spec; raise UserError naming the flag and the fix."""
    code = Path(code_path).expanduser().resolve()
    if not code.is_dir():
        raise UserError(f"--code_path {code_path!r} is not a directory; point it at your code")
    target = Path(out).expanduser().resolve() if out else code.parent
    if target == code or target.is_relative_to(code):
        raise UserError(f"--out {out!r} is inside --code_path; write the image files elsewhere")
    reference = _image(image, registry)
    return PackSpec(
        code_path=code,
        main=_main_file(code, main),
        image=reference,
        base_image=_base_image(base_image, gpu),
        out=target,
        gpu=gpu,
        train_params=_train_params(train_params),
        requirements=_existing_file(requirements, "--requirements") if requirements else None,
        k8s=make_k8s_spec(k8s, reference, name=name, namespace=namespace, cpus=cpus,
                          memory=memory, data_volume=data_volume, output_volume=output_volume,
                          output_dir=output_dir, credentials_secret=credentials_secret,
                          queue=queue, priority_class=priority_class),
        test_data_path=_test_data(test_data_path) if test_data_path else None,
        test_output_path=str(Path(test_output_path).expanduser().resolve())
        if test_output_path else None,
        registry_user=registry_user or None,
    )


def _main_file(code: Path, main: str) -> str:
    path = (code / main).resolve()
    if not path.is_relative_to(code):
        raise UserError(f"--main {main!r} is outside --code_path {str(code)!r}; "
                        "give a file inside the code directory")
    if not path.is_file():
        raise UserError(f"--main {main!r} does not exist in --code_path {str(code)!r}; "
                        "give the training script's path relative to the code directory")
    return path.relative_to(code).as_posix()


def _image(image: str, registry: str | None) -> str:
    match = _IMAGE.match(image or "")
    if not match or len(match["name"]) > 255:
        raise UserError(f"--image {image!r} is not a valid image reference; use lowercase "
                        "NAME[:TAG] such as my-team/trainer:1.0")
    reference = f"{match['name']}:{match['tag'] or 'latest'}"
    if registry is None:
        return reference
    full = f"{registry.rstrip('/')}/{reference}"
    if not _IMAGE.match(full) or not registry.strip("/"):
        raise UserError(f"--registry {registry!r} is not a valid registry prefix; use HOST/NS "
                        "such as registry.example.com/team")
    return full


def default_base_image(gpu: bool) -> str:
    """The official TensorFlow image of the installed TF version (found without importing TF)."""
    for dist in ("tensorflow", "tensorflow-cpu"):
        try:
            version = importlib.metadata.version(dist)
            break
        except importlib.metadata.PackageNotFoundError:
            continue
    else:
        raise UserError("TensorFlow is not installed here, so the matching image is unknown; "
                        "pass --base_image IMAGE")
    return f"tensorflow/tensorflow:{version}" + ("-gpu" if gpu else "")


def _base_image(base_image: str | None, gpu: bool) -> str:
    if base_image is None:
        return default_base_image(gpu)
    if not _BASE_IMAGE.match(base_image):
        raise UserError(f"--base_image {base_image!r} is not a valid image reference; use "
                        "NAME[:TAG][@DIGEST] such as tensorflow/tensorflow:2.21.0")
    return base_image


def _train_params(text: str) -> tuple[str, ...]:
    try:
        return tuple(shlex.split(text or ""))
    except ValueError as exc:
        raise UserError(f"--train_params {text!r} are not valid shell words ({exc}); "
                        "balance the quotes") from None


def _existing_file(path: str, flag: str) -> Path:
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_file():
        raise UserError(f"{flag} {path!r} does not exist; give an existing file")
    return resolved


def _test_data(path: str) -> str:
    resolved = Path(path).expanduser().resolve()
    if not resolved.is_dir():
        raise UserError(f"--test_data_path {path!r} is not a directory; point it at local "
                        "test data")
    return str(resolved)
