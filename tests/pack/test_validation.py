"""Every validation error: exit 2, one line naming the flag, and nothing written."""

from __future__ import annotations

import pytest

from tests.conftest import run_tfyard
from tfyard.cli import main

CASES = {
    "main_missing": (["--main", "nope.py"], "--main 'nope.py' does not exist"),
    "main_outside": (["--main", "../outside.py"], "is outside --code_path"),
    "code_path_missing": (["--code_path", "{tmp}/missing"], "--code_path"),
    "image_uppercase": (["--image", "Team/Trainer"], "not a valid image reference"),
    "image_empty_tag": (["--image", "trainer:"], "--image 'trainer:'"),
    "image_space": (["--image", "my trainer"], "--image"),
    "image_leading_dash": (["--image", "-trainer"], "--image"),
    "registry": (["--registry", "bad host/ns"], "--registry 'bad host/ns'"),
    "base_image": (["--base_image", "Tensorflow:2"], "--base_image"),
    "train_params": (["--train_params", "--lr '0.1"], "not valid shell words"),
    "k8s_zero_workers": (["--k8s", "0"], "--k8s '0'"),
    "k8s_words": (["--k8s", "two"], "WORKERS[,PS]"),
    "k8s_three_parts": (["--k8s", "1,2,3"], "--k8s"),
    "k8s_negative": (["--k8s", "2,-1"], "--k8s"),
    "requirements": (["--requirements", "{tmp}/reqs.txt"], "--requirements"),
    "test_data_path": (["--test_data_path", "{tmp}/nodata"], "--test_data_path"),
    "out_inside_code": (["--out", "{code}/build"], "--out"),
    "name_without_k8s": (["--name", "rn50"], "--name is for the Kubernetes manifest; add --k8s"),
    "name_uppercase": (["--k8s", "2", "--name", "RN_50"], "--name 'RN_50' is not a valid"),
    "name_digit_first": (["--k8s", "2", "--name", "50-rn"], "starting with a letter"),
    "name_too_long": (["--k8s", "11", "--name", "a" * 61], "at most 60 lowercase"),
    "namespace": (["--k8s", "2", "--namespace", "ML"], "--namespace 'ML' is not a valid"),
    "cpus_word": (["--k8s", "2", "--cpus", "four"], "--cpus 'four' is not a positive"),
    "cpus_zero": (["--k8s", "2", "--cpus", "0"], "--cpus '0'"),
    "memory_unit": (["--k8s", "2", "--memory", "16GB"], "--memory '16GB'"),
    "volume_kind": (["--k8s", "2", "--data_volume", "nfs:/x"], "must be pvc:CLAIM"),
    "volume_bare": (["--k8s", "2", "--output_volume", "runs"], "--output_volume 'runs' must be"),
    "volume_claim": (["--k8s", "2", "--data_volume", "pvc:Image_Net"], "not a claim name"),
    "volume_no_claim": (["--k8s", "2", "--output_volume", "pvc:"], "'' is not a claim name"),
    "volume_relative": (["--k8s", "2", "--output_volume", "host:runs"], "not an absolute path"),
    "volume_dotdot": (["--k8s", "2", "--data_volume", "host:/mnt/../etc"], "without '..'"),
    "queue_without_k8s": (["--queue", "team-a"], "--queue is for the Kubernetes manifest"),
    "queue_uppercase": (["--k8s", "2", "--queue", "Team_A"],
                        "--queue 'Team_A' is not a LocalQueue's name as Kueue takes it"),
    "queue_dot_end": (["--k8s", "2", "--queue", "team."], "--queue 'team.'"),
    "queue_too_long": (["--k8s", "2", "--queue", "q" * 64], "at most 63"),
    "priority_without_queue": (["--k8s", "2", "--priority_class", "high"],
                               "add --queue NAME"),
    "priority_bad": (["--k8s", "2", "--queue", "team-a", "--priority_class", "-high"],
                     "--priority_class '-high' is not a WorkloadPriorityClass's name"),
}


@pytest.mark.parametrize("case", CASES)
def test_validation_error_is_one_line_and_writes_nothing(case, code_dir, tmp_path, capsys):
    (code_dir.parent / "outside.py").write_text("")
    override, expected = CASES[case]
    override = [a.format(tmp=tmp_path, code=code_dir) for a in override]
    args = {"--code_path": str(code_dir), "--main": "train.py", "--image": "trainer"}
    args.update(zip(override[::2], override[1::2], strict=True))
    argv = ["pack", *(f"{flag}={value}" for flag, value in args.items())]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("tfyard: error: ") and err.count("\n") == 1, err
    assert expected in err
    assert sorted(p.name for p in code_dir.parent.iterdir()) == ["code", "outside.py"]
    assert not (code_dir / "build").exists()


@pytest.mark.parametrize("argv, expected", [
    (["--train_params", "--batch_size=64"], "--batch_size=64"),
    (["--train_params", "--batch_size 64 --quiet"], "--batch_size 64 --quiet"),
    (["--train-params", "-x"], "-x"),
    (["--train_params=--epochs=2"], "--epochs=2"),
])
def test_train_params_may_start_with_a_dash_in_every_spelling(argv, expected, code_dir, capsys):
    assert main(["pack", "--code_path", str(code_dir), "--main", "train.py",
                 "--image", "trainer", *argv]) == 0
    assert f"python /data/train.py {expected}\n" in capsys.readouterr().out


def test_train_params_without_a_value_is_one_line(code_dir, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["pack", "--code_path", str(code_dir), "--main", "train.py", "--image", "trainer",
              "--train_params"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.count("\n") == 1 and "--train_params" in err


def test_bad_kubernetes_flags_exit_2_in_one_line_from_the_command(code_dir):
    result = run_tfyard("pack", "--code_path", code_dir, "--main", "train.py", "--image",
                        "trainer", "--k8s", "2", "--data_volume", "s3://bucket/data")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == ("tfyard: error: --data_volume 's3://bucket/data' must be "
                             "pvc:CLAIM (a PersistentVolumeClaim) or host:/PATH (a directory "
                             "on the node)\n")
