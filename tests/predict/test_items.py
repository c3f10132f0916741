"""Every item becomes a row, on this machine: null, empty, non-bytes, missing and vanished
items and the edge tree's images, in order, none ending the stream early; the tree listed
as training lists it; every table format with the same rows; options named as spelled."""

from __future__ import annotations

import os

import pytest

import tfyard
from tests.predict.conftest import EDGE_FILES, edge_items, listed, read_rows, summary
from tfyard.cli import main
from tfyard.errors import UserError
from tfyard.predict import inputs


def test_every_item_is_a_row_in_order(run, edges, edge_rows):
    items = edge_items(edges)
    rows = tfyard.predict(run, [*items, b"", 3, items[0]], batch_size=2)
    assert [row["path"] for row in rows] == [*items, None, None, items[0]]
    errors = {os.path.basename(row["path"] or "") + str(i): row["error"]
              for i, row in enumerate(rows) if row["error"]}
    assert errors == {
        "empty.jpg5": "cannot decode: it is empty (0 bytes)",
        "text.png7": errors["text.png7"], "gone.jpg8": "cannot read: No such file or directory",
        "9": "no image (the cell is null)", "10": "cannot decode: it is empty (0 bytes)",
        "11": "not an image: a int (give encoded bytes or a path)"}
    assert errors["text.png7"].startswith("cannot decode")
    assert rows[-1]["class_name"] == rows[0]["class_name"]   # nothing ended the stream
    assert summary(rows[:10]) == edge_rows


def test_a_null_item_under_fail_is_one_line_naming_it(run, edges):
    with pytest.raises(UserError, match=r"^an item without a path: no image \(the cell is "
                                        r"null\); nothing was written \(on_error='skip'"):
        tfyard.predict(run, [str(edges / "b" / "cmyk.jpeg"), None], on_error="fail")


def test_the_edge_tree_is_listed_as_training_lists_it(edges):
    from tfyard.data.images import walk_images

    listed = [os.path.relpath(p, edges) for p in inputs.image_files(inputs.check([edges]))]
    assert sorted(listed) == sorted(EDGE_FILES)
    assert listed == [os.path.relpath(p, edges) for p in walk_images(str(edges))]


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_each_format_holds_the_same_rows(fmt, run, edges, edge_rows, tmp_path, capsys):
    out = tmp_path / f"rows.{fmt}"
    assert main(["predict", "--output_dir", str(run), str(edges), "--output", str(out)]) == 0
    assert summary(read_rows(out, fmt)) == listed(edge_rows)
    assert "predicted 6 file(s)" in capsys.readouterr().err


def test_on_error_fail_to_stdout_says_what_was_written(run, edges, capsys):
    assert main(["predict", "--output_dir", str(run), str(edges / "a"), str(edges / "b"),
                 "--on_error", "fail"]) == 2
    out, err = capsys.readouterr()
    assert len(out.splitlines()) == 1 + 4   # the header and the rows before the empty file
    assert err.strip().splitlines()[-1].endswith(
        "empty.jpg: cannot decode: it is empty (0 bytes); the 4 row(s) before it went to "
        "standard output (--on_error skip gives it a row with the error and goes on)")


@pytest.mark.parametrize("cli, python, words", [
    (["--top_k", "0"], {"top_k": 0}, "top_k must be a whole number of at least 1, got 0"),
    (["--batch_size", "-1"], {"batch_size": -1}, "batch_size must be a whole number"),
    (["--on_error", "stop"], {"on_error": "stop"}, "on_error 'stop'; use skip or fail"),
])
def test_options_are_named_as_the_caller_spelled_them(cli, python, words, run, edges,
                                                       capsys):
    assert main(["predict", "--output_dir", str(run), str(edges), *cli]) == 2
    assert f"--{words}" in capsys.readouterr().err
    with pytest.raises(UserError) as raised:
        tfyard.predict(run, edges, **python)
    assert words in str(raised.value) and "--" not in str(raised.value)


def test_an_error_of_the_items_is_raised_not_taken_for_their_end(run):
    from tfyard.predict.local import locate
    from tfyard.predict.predictor import Predictor

    def items():
        yield "a", b""
        raise KeyError("the source broke")

    with pytest.raises(KeyError, match="the source broke"):
        list(Predictor(locate(str(run))).rows(items()))
