"""`tfyard models`: real builds behind the listing, and one-line errors."""

from __future__ import annotations

import json

from tests.conftest import run_tfyard
from tfyard.cli import main


def test_json_rows_report_parameters_and_resnet50_flops(capsys):
    assert main(["models", "resnet50", "cifar_resnet56", "--flops", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["name"] for r in rows] == ["resnet50", "cifar_resnet56"]
    resnet50, cifar = rows
    assert resnet50["params"] == 25_557_032 and resnet50["num_classes"] == 1000
    assert resnet50["input_shape"] == [224, 224, 3]
    assert 4.0e9 < resnet50["multiply_adds"] < 4.2e9
    assert cifar["params"] == 853_018 and cifar["num_classes"] == 10


def test_table_filters_by_family_and_takes_num_classes(capsys):
    assert main(["models", "--family", "mnist", "--num_classes", "5"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["name", "family", "input", "params"]
    assert [line.split()[:4] for line in lines[1:]] == [  # 5 logits fewer than the 10-class sizes
        # 10 -> 5 classes drops 5 logits of (inputs + bias): 1600 + 1 and 512 + 1
        ["mnist_cnn", "mnist", "28x28x1", f"{34_826 - 5 * 1601:,}"],
        ["mnist_mlp", "mnist", "28x28x1", f"{669_706 - 5 * 513:,}"],
    ]


def test_unknown_model_is_one_line_without_tensorflow():
    result = run_tfyard("models", "resnet51")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "tfyard: error: unknown model 'resnet51': did you mean resnet50, resnet18, resnet152, "
        "resnet101, resnet34? (`tfyard models` lists them all)"]
