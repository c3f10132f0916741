"""--build and --push through a fake `docker` that records every call it gets."""

from __future__ import annotations

import io
import json
import sys

import pytest

from tests.conftest import run_tfyard
from tests.pack.conftest import docker_calls
from tfyard.cli import main

SECRET = "pa55-Zq8!x secret"


def _args(code_dir, *extra):
    return ["pack", "--code_path", str(code_dir), "--main", "train.py", "--image",
            "trainer:2", "--registry", "registry.example.com/team", "--k8s", "2,1", *extra]


@pytest.mark.parametrize("source", ["env", "stdin"])
def test_password_reaches_docker_only_on_stdin(code_dir, fake_docker, monkeypatch, source):
    if source == "env":
        monkeypatch.setenv("TFYARD_REGISTRY_PASSWORD", SECRET)
    else:
        monkeypatch.delenv("TFYARD_REGISTRY_PASSWORD", raising=False)
        monkeypatch.setattr(sys, "stdin", io.StringIO(SECRET + "\n"))
    assert main(_args(code_dir, "--registry_user", "bob", "--build", "--push")) == 0
    image = "registry.example.com/team/trainer:2"
    calls = docker_calls(fake_docker)
    assert [c["argv"] for c in calls] == [
        ["info", "--format", "{{.ServerVersion}}"],
        ["build", "-t", image, "-f", str(code_dir.parent / "Dockerfile"), str(code_dir.parent)],
        ["login", "--username", "bob", "--password-stdin", "registry.example.com"],
        ["push", image],
    ]
    assert calls[2]["stdin"] == SECRET
    for call in calls:  # neither on a command line nor in docker's environment
        assert SECRET not in json.dumps(call["argv"]) + json.dumps(call["env"])
    written = [p for p in code_dir.parent.rglob("*") if p.is_file()]
    assert len(written) >= 6
    for path in written:
        assert SECRET.encode() not in path.read_bytes(), path
    assert "$TFYARD_REGISTRY_PASSWORD" in (code_dir.parent / "tfyard-cmd.txt").read_text()


def test_push_without_user_skips_login(code_dir, fake_docker):
    assert main(_args(code_dir, "--push")) == 0
    assert [c["argv"][0] for c in docker_calls(fake_docker)] == ["info", "push"]


def test_missing_password_is_one_line(code_dir, fake_docker, monkeypatch, capsys):
    monkeypatch.delenv("TFYARD_REGISTRY_PASSWORD", raising=False)
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert main(_args(code_dir, "--registry_user", "bob", "--push")) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "TFYARD_REGISTRY_PASSWORD" in err
    assert "login" not in [c["argv"][0] for c in docker_calls(fake_docker)]


def test_failing_docker_command_is_reported(code_dir, fake_docker, tmp_path, capsys):
    failing = tmp_path / "fakebin" / "docker"
    failing.write_text(failing.read_text() + "if sys.argv[1] == 'build':\n    sys.exit(3)\n")
    assert main(_args(code_dir, "--build", "--push")) == 2
    assert "`docker build` failed with exit status 3" in capsys.readouterr().err
    assert "push" not in [c["argv"][0] for c in docker_calls(fake_docker)]


def test_build_without_engine_exits_2_with_files_written(code_dir, fake_docker):
    result = run_tfyard(*_args(code_dir, "--build"), env={"FAKE_DOCKER_ENGINE_DOWN": "1"})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("tfyard: error: no Docker engine is running")
    assert [c["argv"][0] for c in docker_calls(fake_docker)] == ["info"]
    for name in ("Dockerfile", ".dockerignore", "tfyard-cmd.txt", "tfyard-k8s.yaml"):
        assert (code_dir.parent / name).is_file()


def test_build_without_docker_cli_exits_2(code_dir, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    result = run_tfyard(*_args(code_dir, "--build"), env={"PATH": str(empty)})
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "`docker` command is not installed" in result.stderr
    assert (code_dir.parent / "Dockerfile").is_file()
