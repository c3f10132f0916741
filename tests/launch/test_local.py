"""`tfyard launch local`: the roster and TF_CONFIGs, failure, signals, on members that cost
little (tests/launch/programs/member.py). Real TensorFlow clusters under it, a chief, workers,
a ps and an evaluator, and a job restarted by --max_restarts after a SIGKILLed worker, train
`tfyard train` in tests/reliability/test_faults.py (the launcher treats every program alike)."""

from __future__ import annotations

import json
import signal
import sys
import time

import pytest

from tfyard.errors import UserError
from tfyard.launch.local import member_env
from tfyard.launch.roster import Member, roster, tf_configs

from .helpers import alive, launch, program, recorded_pids


def test_roster_orders_members_like_tensorflowonspark():
    members = roster(workers=2, chief=True, ps=1, evaluator=True)
    assert [m.name for m in members] == ["ps:0", "chief:0", "worker:0", "worker:1",
                                        "evaluator:0"]


def test_tf_configs_give_every_member_the_same_cluster_and_its_own_task():
    members = roster(workers=2, chief=True, ps=1)
    addresses = [f"127.0.0.1:{2000 + i}" for i in range(len(members))]
    configs = tf_configs(members, addresses)
    cluster = configs[0].to_tf_config()["cluster"]
    assert cluster == {"chief": ["127.0.0.1:2001"], "ps": ["127.0.0.1:2000"],
                       "worker": ["127.0.0.1:2002", "127.0.0.1:2003"]}
    assert [c.to_tf_config()["cluster"] for c in configs] == [cluster] * 4
    assert [(c.task_type, c.task_index, c.address) for c in configs] == [
        (m.job, m.index, a) for m, a in zip(members, addresses, strict=True)]
    assert Member("worker", 1).name == "worker:1"


@pytest.mark.parametrize("kwargs, fix", [
    ({"workers": 2, "ps": 1}, "--chief"),
    ({"workers": 0}, "--workers 1"),
    ({"workers": -1}, "0 or more"),
])
def test_impossible_clusters_are_refused_with_the_fix(kwargs, fix):
    with pytest.raises(UserError, match=fix):
        roster(**kwargs)


def test_cli_without_command_is_a_one_line_error():
    proc = launch("local", "--workers", 1)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert out.strip() == "tfyard: error: no command to run; put it after `--`, " \
        "e.g. -- python train.py"


def _all_gone(pids: dict[str, list[int]], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(p) for ps in pids.values() for p in ps):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_failing_member_stops_the_others_and_is_named(tmp_path):
    started = time.monotonic()
    proc = launch("local", "--workers", 2, "--chief", "--evaluator", "--grace", 2, "--",
                  *program("member.py", "--pid_dir", tmp_path, "--exit", "worker:1:3"))
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 3, out  # a program's own code: a failure, not a pause
    assert "worker:1 failed with exit code 3" in out
    assert "[worker:1] worker:1 fails on purpose" in out
    assert "[chief:0] hello from chief:0" in out
    pids = recorded_pids(tmp_path)
    assert sorted(pids) == ["chief:0", "evaluator:0", "worker:0", "worker:1"]
    assert all(len(p) == 2 for p in pids.values())  # member and its grandchild
    assert _all_gone(pids), pids
    assert time.monotonic() - started < 100  # members sleep 120 s unless stopped


def test_when_the_chief_is_done_the_servers_are_stopped_and_the_job_succeeds(tmp_path):
    proc = launch("local", "--workers", 1, "--chief", "--ps", 1, "--grace", 1, "--",
                  *program("member.py", "--pid_dir", tmp_path, "--exit", "chief:0:0"))
    out, _ = proc.communicate(timeout=100)  # the servers would sleep 120 s
    assert proc.returncode == 0, out
    assert "tfyard: chief:0 finished; stopping ps:0, worker:0" in out
    pids = recorded_pids(tmp_path)
    assert len(pids) == 3 and _all_gone(pids), pids


def test_member_env_carries_its_tf_config_and_gpus():
    config = tf_configs([Member("worker", 0)], ["127.0.0.1:2000"])[0]
    env = member_env(config, {"TF_CONFIG_FILE": "/stale.json", "KEEP": "1"}, gpus=["2", "3"])
    assert json.loads(env["TF_CONFIG"]) == {"cluster": {"worker": ["127.0.0.1:2000"]},
                                            "task": {"type": "worker", "index": 0}}
    assert (env["KEEP"], env["CUDA_VISIBLE_DEVICES"], env["PYTHONUNBUFFERED"]) == ("1", "2,3", "1")
    assert "TF_CONFIG_FILE" not in env
    assert "CUDA_VISIBLE_DEVICES" not in member_env(config, {})


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_to_the_launcher_stops_every_member(tmp_path, sig):
    proc = launch("local", "--workers", 2, "--grace", 2, "--",
                  *program("member.py", "--pid_dir", tmp_path))
    deadline = time.monotonic() + 60
    while len(recorded_pids(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 128 + sig, out
    assert f"{sig.name} received; stopped all members" in out
    pids = recorded_pids(tmp_path)
    assert len(pids) == 2 and _all_gone(pids), pids


def _summary(out_dir):
    return json.loads((out_dir / "summary.json").read_text())


def test_a_bad_flag_in_the_command_is_printed_once():
    """Every member fails alike on a bad flag: its one line is said once, not once per
    member and again in the final report."""
    proc = launch("local", "--workers", 3, "--", sys.executable, "-m", "tfyard", "train",
                  "--bogus", 1)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 2, out
    assert out.count("tfyard train: error: unrecognized arguments: --bogus 1") == 1, out
    assert "tfyard: launch failed: worker:" in out


def test_more_members_than_the_cores_hold_warn_then_are_refused():
    from tfyard.launch.local import check_cores

    assert check_cores(4, cores=2) is None
    assert check_cores(5, cores=2) == ("tfyard: warning: 5 members share 2 CPU core(s); each "
                                       "trains slower than with fewer members")
    with pytest.raises(UserError, match=r"^100 members on 2 CPU core\(s\) is more than 8 a "
                       r"core; start at most 16 here, or spread them over machines with "
                       r"`tfyard launch ray` or `launch spark`$"):
        check_cores(100, cores=2)
    proc = launch("local", "--workers", 1000, "--", "true")
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 2 and out.count("\n") == 1 and "1000 members on" in out, out
