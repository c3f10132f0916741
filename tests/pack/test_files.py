"""The generated build context for CPU and GPU images, read back in their real formats."""

from __future__ import annotations

import importlib.metadata
import json
import shlex
import subprocess
import sys
import zipfile

import pytest

from tests.pack.conftest import commands, dockerfile_instructions
from tfyard.cli import main
from tfyard.pack.wheel import build_wheel, wheel_name

TF_VERSION = importlib.metadata.version("tensorflow")


def _pack(code_dir, *extra) -> int:
    return main(["pack", "--code_path", str(code_dir), "--main", "train.py",
                 "--image", "team/trainer:0.3", "--train_params", "--steps 3 --note 'a b'",
                 *extra])


@pytest.mark.parametrize("gpu", [False, True], ids=["cpu", "gpu"])
def test_dockerfile_copies_code_to_data_and_sets_platform_env(code_dir, gpu, capsys):
    assert _pack(code_dir, *(["--gpu"] if gpu else [])) == 0
    context = code_dir.parent
    steps = dockerfile_instructions((context / "Dockerfile").read_text())
    ops = [op for op, _ in steps]
    assert ops[0] == "FROM" and ops[-1] == "CMD"
    assert steps[0][1] == f"tensorflow/tensorflow:{TF_VERSION}" + ("-gpu" if gpu else "")
    copies = [json.loads(args) for op, args in steps if op == "COPY"]
    assert ["code/", "/data/"] in copies
    ignore = (context / ".dockerignore").read_text().splitlines()
    assert ignore[1] == "*"
    for source, _ in copies:  # every COPY source exists and is let through .dockerignore
        assert (context / source).exists()
        assert "!" + source.rstrip("/") in ignore
    wheel_copy = next(dest for source, dest in copies if source.endswith(".whl"))
    assert any(op == "RUN" and f"pip install --no-cache-dir {wheel_copy}" in args
               for op, args in steps)
    assert ("WORKDIR", "/data") in steps
    env = dict(args.split("=", 1) for op, args in steps if op == "ENV")
    assert env == {"TFYARD_DATA_DIR": "/data/data", "TFYARD_OUTPUT_DIR": "/data/output"}
    cmd = json.loads(steps[-1][1])
    assert cmd == ["python", "/data/train.py", "--steps", "3", "--note", "a b"]
    platform_line, local_line, build_line, push_line = commands(context / "tfyard-cmd.txt")
    assert shlex.split(platform_line) == cmd
    gpus = ["--gpus", "all"] if gpu else []
    assert shlex.split(local_line) == [
        "docker", "run", "--rm", *gpus, "-v", "DATA:/data/data", "-v", "OUTPUT:/data/output",
        "team/trainer:0.3", "python", "/data/train.py", "--data_dir", "/data/data",
        "--output_dir", "/data/output", "--steps", "3", "--note", "a b"]
    assert shlex.split(build_line) == ["docker", "build", "-t", "team/trainer:0.3", "-f",
                                       str(context / "Dockerfile"), str(context)]
    assert shlex.split(push_line) == ["docker", "push", "team/trainer:0.3"]
    assert "tfyard-cmd.txt" in capsys.readouterr().out


def test_out_dir_gets_a_copy_of_the_code_and_requirements(code_dir, tmp_path):
    (code_dir / "__pycache__").mkdir()
    (code_dir / "__pycache__" / "x.pyc").write_bytes(b"\0")
    requirements = tmp_path / "reqs.txt"
    requirements.write_text("six\n")
    data, out = tmp_path / "data", tmp_path / "ctx"
    data.mkdir()
    assert _pack(code_dir, "--out", str(out), "--requirements", str(requirements),
                 "--registry", "registry.example.com:5000/team", "--test-data-path", str(data),
                 "--test_output_path", str(tmp_path / "o")) == 0
    assert not (code_dir.parent / "Dockerfile").exists()
    assert (out / "tfyard-code" / "train.py").read_text() == (code_dir / "train.py").read_text()
    assert not (out / "tfyard-code" / "__pycache__").exists()
    assert (out / "tfyard-requirements.txt").read_text().splitlines()[1:] == ["six"]
    steps = dockerfile_instructions((out / "Dockerfile").read_text())
    copies = [json.loads(args)[0] for op, args in steps if op == "COPY"]
    assert copies == [wheel_name(), "tfyard-requirements.txt", "tfyard-code/"]
    assert any(op == "RUN" and "-r /tmp/tfyard-requirements.txt" in args for op, args in steps)
    local = shlex.split(commands(out / "tfyard-cmd.txt")[1])
    image = "registry.example.com:5000/team/team/trainer:0.3"
    assert local[3:8] == ["-v", f"{data}:/data/data", "-v", f"{tmp_path / 'o'}:/data/output",
                          image]
    assert _pack(code_dir, "--out", str(out)) == 0  # a plainer repack leaves nothing stale
    assert not (out / "tfyard-requirements.txt").exists()
    assert "requirements" not in (out / "Dockerfile").read_text()


def test_a_hand_written_dockerfile_is_refused_or_kept_as_bak_never_lost(code_dir, capsys):
    context = code_dir.parent
    mine = b"FROM python:3.11\n# my own, hand-written\n"
    (context / "Dockerfile").write_bytes(mine)
    (context / ".dockerignore").write_bytes(b"data/\n")
    assert _pack(code_dir) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"tfyard: error: {context} already holds Dockerfile, .dockerignore, not "
                   "written by tfyard pack; move them away, write elsewhere with --out DIR, "
                   "or pass --force to replace (the old file is kept as NAME.bak)")
    assert (context / "Dockerfile").read_bytes() == mine       # byte for byte
    assert sorted(p.name for p in context.iterdir()) == [".dockerignore", "Dockerfile", "code"]
    assert _pack(code_dir, "--force") == 0
    assert (context / "Dockerfile.bak").read_bytes() == mine
    assert (context / ".dockerignore.bak").read_bytes() == b"data/\n"
    assert f"kept your Dockerfile as {context / 'Dockerfile.bak'}" in capsys.readouterr().out
    assert _pack(code_dir) == 0          # its own files are replaced without a word
    (context / "Dockerfile").write_bytes(mine)
    assert _pack(code_dir, "--force") == 0   # a second backup never replaces the first
    assert (context / "Dockerfile.bak.2").read_bytes() == mine
    assert (context / "Dockerfile").read_text().startswith("# Generated by `tfyard pack`")


def test_wheel_is_reproducible_and_installs_offline(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    first.mkdir(), second.mkdir()
    wheel = build_wheel(first)
    assert wheel.read_bytes() == build_wheel(second).read_bytes()
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert "tfyard/pack/spec.py" in names and not any(".pyc" in n for n in names)
        assert b"console_scripts" in archive.read("tfyard-0.1.0.dist-info/entry_points.txt")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--quiet", "--target", str(target), str(wheel)], check=True)
    assert (target / "bin" / "tfyard").exists()
    found = subprocess.run(
        [sys.executable, "-S", "-c", "import tfyard.pack.spec as s; print(s.__file__)"],
        env={"PYTHONPATH": str(target)}, capture_output=True, text=True, check=True)
    assert found.stdout.strip() == str(target / "tfyard" / "pack" / "spec.py")
