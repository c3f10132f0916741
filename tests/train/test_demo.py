"""`tfyard demo`, the command behind `make demo`, reaches its promised accuracy."""

import pytest

from tests.conftest import run_tfyard
from tests.train.conftest import read_json

pytestmark = pytest.mark.slow


def test_demo_reaches_95_percent(tmp_path):
    result = run_tfyard("demo", "--output_dir", tmp_path / "demo", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    summary = read_json(tmp_path / "demo" / "summary.json")
    assert summary["eval"]["top1"] >= 0.95
    assert "demo: validation accuracy" in result.stdout
    assert (tmp_path / "demo" / "export" / "model.keras").exists()
