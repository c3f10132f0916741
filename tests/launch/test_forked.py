"""Processes forked from a warm server (`launch.forked`): a forked process behaves as a
spawned one (its own session, its output on our pipe, its exit status and signal, wait's
timeout, the guard); the server kills what it forked when we close it or die; a server that dies
ends what it left with SIGKILL's status and is replaced by plain processes, as is one that
never starts; commands it does not serve are spawned.

The protocol is tested with a stand-in server whose children exec Python with the flags they
are handed; the real server (`cli.forkserver`, TensorFlow loaded) forks `tfyard train`, whose
run is the same as a cold process's, figure for figure."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tfyard.launch.forked import Forked, ForkServer
from tfyard.launch.local import signal_group, spawn, stop_group
from tfyard.process.liveness import state
from tfyard.tune.trial import SERVER, TRAIN

# The stand-in serves Python commands: its child execs Python with the flags it is handed.
RUN = (sys.executable,)
STAND_IN = (sys.executable, "-c", "import os, sys\nfrom tfyard.launch.forked import serve\n"
            "serve(lambda argv: os.execv(sys.executable, [sys.executable, *argv]))\n"
            "os._exit(0)")


def python(code: str) -> list[str]:
    return [*RUN, "-c", code]


def finish(proc) -> str:
    """What `proc` printed, once it has ended; its guard released."""
    output = proc.stdout.read().decode()
    proc.stdout.close()
    proc.guard.stdin.close()
    proc.guard.wait()
    return output


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether `pid` ends within `within` s: a zombie (its parent gone, not yet reaped by
    the init process) has ended."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if state(pid) in (None, "Z"):
            return True
        time.sleep(0.05)
    return False


@pytest.fixture
def server():
    forks = ForkServer(STAND_IN, RUN, dict(os.environ))
    yield forks
    forks.close()


def test_a_forked_process_answers_as_a_spawned_one(server):
    proc = server.process(python("import os, sys; print('out'); print('err', file=sys.stderr); "
                                 "print(os.getpgid(0) == os.getpid(), os.getsid(0) == "
                                 "os.getpid()); sys.exit(3)"))
    assert isinstance(proc, Forked) and proc.guard is not None
    assert proc.wait(30) == 3 and proc.poll() == 3 and proc.returncode == 3
    assert sorted(finish(proc).split("\n")) == ["", "True True", "err", "out"]

    sleeper = server.process(python("import time; time.sleep(60)"))
    with pytest.raises(subprocess.TimeoutExpired):
        sleeper.wait(0.3)
    assert sleeper.poll() is None
    signal_group(sleeper, signal.SIGTERM)
    assert sleeper.wait(30) == -signal.SIGTERM
    finish(sleeper)

    stopped = server.process(python("import signal, time\n"
                                    "signal.signal(signal.SIGTERM, lambda *_: exit(143))\n"
                                    "print('ready', flush=True); time.sleep(60)"))
    assert stopped.stdout.readline() == b"ready\n"
    stop_group(stopped, grace=30)   # as a trial is stopped: SIGTERM, its own exit status
    assert stopped.returncode == 143
    stopped.stdout.close()


def test_closing_the_server_kills_what_it_forked(server):
    proc = server.process(python("import time; time.sleep(60)"))
    server.close()
    assert proc.wait(30) == -signal.SIGKILL and gone(proc.pid)
    finish(proc)


def test_a_caller_killed_outright_takes_the_server_and_its_children_with_it():
    caller = subprocess.Popen(
        [sys.executable, "-c", "import os, sys, time\n"
         "from tfyard.launch.forked import ForkServer\n"
         f"forks = ForkServer({STAND_IN!r}, {RUN!r}, dict(os.environ))\n"
         f"proc = forks.process({python('import time; time.sleep(60)')!r})\n"
         "print(proc.pid, forks._server.pid, flush=True)\n"
         "time.sleep(60)"],
        stdout=subprocess.PIPE, start_new_session=True)
    child, server = map(int, caller.stdout.readline().split())
    caller.stdout.close()
    os.killpg(caller.pid, signal.SIGKILL)   # as a tune's process group is killed
    caller.wait()
    assert gone(child) and gone(server)


def test_a_dead_server_ends_its_children_and_plain_processes_follow(server):
    proc = server.process(python("import time; time.sleep(60)"))
    signal_group(server._server, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL and gone(proc.pid)
    finish(proc)
    after = server.process(python("print('spawned')"))
    assert not isinstance(after, Forked) and after.wait(30) == 0
    assert finish(after) == "spawned\n"


@pytest.mark.parametrize("command", [(sys.executable, "-c", "raise SystemExit(1)"),
                                     ("/nonexistent/python",)], ids=["exits", "missing"])
def test_a_server_that_never_starts_is_replaced_by_plain_processes(command):
    forks = ForkServer(command, RUN, dict(os.environ))
    try:
        proc = forks.process(python("print('spawned')"))
        assert not isinstance(proc, Forked) and proc.wait(30) == 0
        assert finish(proc) == "spawned\n"
    finally:
        forks.close()


def test_a_command_it_does_not_serve_is_spawned_without_a_server():
    forks = ForkServer(STAND_IN, RUN, dict(os.environ))
    proc = forks.process(["sh", "-c", "echo stand-in"])
    assert isinstance(proc, subprocess.Popen) and proc.wait(30) == 0
    assert finish(proc) == "stand-in\n" and forks._server is None
    forks.close()


def test_tfyard_train_forked_from_the_real_server_runs_as_a_cold_process(tmp_path):
    train = ["--model", "cifar_resnet8", "--dataset", "digits", "--image_size", "8",
             "--epochs", "0.2", "--steps_per_loop", "2", "--eval_every_epochs", "0.1",
             "--num_gpus", "0", "--no_jit_compile", "--no_export", "--seed", "3", "--quiet"]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    forks = ForkServer(SERVER, TRAIN, env)
    try:
        wrong = forks.process([*TRAIN, "--model", "resnet_999", "--output_dir",
                               str(tmp_path / "wrong")])
        assert isinstance(wrong, Forked) and wrong.wait(180) == 2
        output = finish(wrong)
        assert "unknown model" in output and "Traceback" not in output

        forked = forks.process([*TRAIN, *train, "--output_dir", str(tmp_path / "forked")])
        cold = spawn([*TRAIN, *train, "--output_dir", str(tmp_path / "cold")], env)
        assert forked.wait(180) == 0 and cold.wait(180) == 0
        assert finish(forked) == finish(cold)
    finally:
        forks.close()
    assert figures(tmp_path / "forked") == figures(tmp_path / "cold")


def figures(run_dir) -> list[tuple]:
    """Each report's step and figures, without its timings."""
    with open(run_dir / "metrics.jsonl") as stream:
        return [(r["kind"], r["step"], r.get("loss"), r.get("top1"))
                for r in map(json.loads, stream)]


def test_a_forked_process_gets_its_own_environment_on_top_of_the_servers(server):
    """Tune gives each trial its GPUs this way; the server's own environment is untouched,
    so the next process does not inherit the last one's."""
    code = python("import os; print(os.environ.get('TRIAL_GPUS'), os.environ.get('HOME'))")
    given = server.process(code, {"TRIAL_GPUS": "1"})
    assert isinstance(given, Forked) and given.wait(30) == 0
    assert finish(given).split() == ["1", str(os.environ.get("HOME"))]
    plain = server.process(code)
    assert plain.wait(30) == 0 and finish(plain).split()[0] == "None"


# A server that answers a request with something no server says.
GARBLED = (sys.executable, "-c", "import socket, sys, time\n"
           "channel = socket.socket(fileno=sys.stdin.fileno())\n"
           "socket.recv_fds(channel, 1 << 20, 1)\n"
           "channel.send(b'not json')\n"
           "time.sleep(60)")


def test_a_garbled_answer_kills_the_server_and_the_request_runs_as_a_plain_process():
    """A failed read never leaves a caller waiting: the server is ended, and the request
    and those after it are spawned."""
    forks = ForkServer(GARBLED, RUN, dict(os.environ))
    started = time.monotonic()
    proc = forks.process(python("print('spawned')"))
    assert not isinstance(proc, Forked) and proc.wait(30) == 0
    assert finish(proc) == "spawned\n" and time.monotonic() - started < 10
    assert forks._server.wait(10) == -signal.SIGKILL
    forks.close()


def test_a_forked_pid_already_leads_its_own_group(server):
    """A prune (SIGTERM to the trial's group) right after the start finds the group."""
    proc = server.process(python("import time; time.sleep(60)"))
    assert os.getpgid(proc.pid) == proc.pid
    signal_group(proc, signal.SIGKILL)
    assert proc.wait(30) == -signal.SIGKILL
    finish(proc)


def test_sigterm_to_the_server_lets_each_child_save_before_it_ends(server, tmp_path):
    saved = tmp_path / "saved"
    proc = server.process(python(
        "import signal, sys, time\n"
        "def save(*_):\n"
        f"    time.sleep(1); open({str(saved)!r}, 'w').write('whole'); sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, save)\n"
        "print('ready', flush=True); time.sleep(60)"))
    assert proc.stdout.readline() == b"ready\n"
    server._server.send_signal(signal.SIGTERM)
    assert proc.wait(30) == 143 and saved.read_text() == "whole"
    assert server._server.wait(30) == 0
    finish(proc)
