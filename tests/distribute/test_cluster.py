"""TF_CONFIG parsing: the legacy and TF 2 forms, every rejection, and hostile input."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tfyard.distribute.cluster import (
    SINGLE,
    export_tf_config,
    load_cluster_config,
    mask_secrets,
    parse_tf_config,
    tf_config_from_legacy_flags,
)
from tfyard.errors import UserError

LEGACY = {
    "cluster": {"master": ["h:2222"], "ps": ["h:2223"], "worker": ["h:2224", "h:2225"]},
    "task": {"type": "master", "index": 0},
    "environment": "cloud",
}


def test_legacy_master_becomes_chief_in_cluster_and_task():
    config = parse_tf_config(json.dumps(LEGACY))
    assert dict(config.jobs) == {"chief": ("h:2222",), "ps": ("h:2223",),
                                 "worker": ("h:2224", "h:2225")}
    assert config.role == "chief" and config.is_coordinator
    assert config.to_tf_config() == {
        "cluster": {"chief": ["h:2222"], "ps": ["h:2223"], "worker": ["h:2224", "h:2225"]},
        "task": {"type": "chief", "index": 0},
        "environment": "cloud",
    }


def test_tf2_worker_form_roles():
    text = {"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}}
    config = parse_tf_config(text)
    assert config.role == "worker" and config.task_index == 1
    assert not config.is_coordinator and config.num_workers == 2
    assert config.address == "b:2"
    first = parse_tf_config({**text, "task": {"type": "worker", "index": 0}})
    assert first.is_coordinator


def test_ps_roles_and_worker_count():
    worker = parse_tf_config({**LEGACY, "task": {"type": "worker", "index": 1}})
    assert worker.role == "worker" and not worker.is_coordinator
    assert worker.num_workers == 2 and worker.has_ps
    ps = parse_tf_config({**LEGACY, "task": {"type": "ps", "index": 0}})
    assert ps.role == "ps"


def test_evaluator_outside_cluster_and_training_jobs_exclude_it():
    config = parse_tf_config({"cluster": {"chief": ["a:1"], "worker": ["a:2"]},
                              "task": {"type": "evaluator", "index": 0}})
    assert config.role == "evaluator" and not config.is_coordinator
    listed = parse_tf_config({"cluster": {"chief": ["a:1"], "evaluator": ["a:3"]},
                              "task": {"type": "chief", "index": 0}})
    assert "evaluator" not in listed.training_jobs


def test_empty_means_single():
    assert parse_tf_config(None) is SINGLE
    assert parse_tf_config("  ") is SINGLE
    assert parse_tf_config("{}").role == "single"


@pytest.mark.parametrize("text, fragment", [
    ("{not json", "not valid JSON"),
    ("[1, 2]", "must be a JSON object"),
    ('{"cluster": {"boss": ["a:1"]}, "task": {"type": "boss", "index": 0}}', "unknown job type"),
    ('{"cluster": {"chief": ["a:1", "a:2"]}, "task": {"type": "chief", "index": 0}}',
     "at most one chief"),
    ('{"cluster": {"chief": ["a:1"], "evaluator": ["a:2", "a:3"]}, '
     '"task": {"type": "chief", "index": 0}}', "at most one evaluator"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": 3}}', "out of range"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "ps", "index": 0}}',
     "not a job in TF_CONFIG.cluster"),
    ('{"cluster": {"worker": ["a1"]}, "task": {"type": "worker", "index": 0}}', "host:port"),
    ('{"cluster": {"worker": ["a:99999"]}, "task": {"type": "worker", "index": 0}}', "host:port"),
    ('{"cluster": {"worker": ["a:1", "a:1"]}, "task": {"type": "worker", "index": 0}}',
     "own address"),
    ('{"cluster": {"ps": ["a:1"], "worker": ["a:2"]}, "task": {"type": "ps", "index": 0}}',
     "no chief"),
    ('{"cluster": {"master": ["a:1"], "chief": ["a:2"]}, "task": {"type": "chief", "index": 0}}',
     "same job"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker", "index": -1}}',
     "non-negative"),
    ('{"cluster": {"worker": ["a:1"]}}', "no task"),
    ('{"cluster": {"worker": ["a:1"]}, "task": {"type": "worker"}, "colour": 1}', "unknown key"),
])
def test_rejections_name_the_field_and_fix(text, fragment):
    with pytest.raises(UserError) as err:
        parse_tf_config(text)
    message = str(err.value)
    assert fragment in message
    assert "\n" not in message


def test_tf_config_file(tmp_path):
    path = tmp_path / "tf_config.json"
    path.write_text(json.dumps(LEGACY))
    assert load_cluster_config({"TF_CONFIG_FILE": str(path)}).role == "chief"
    with pytest.raises(UserError, match="cannot be read"):
        load_cluster_config({"TF_CONFIG_FILE": str(tmp_path / "missing.json")})


def test_tf_config_file_errors_name_the_file_and_two_sources_must_agree(tmp_path):
    path = tmp_path / "tf_config.json"
    path.write_text('{"cluster": {"worker": ["h:1"]},\n "task": oops}')
    with pytest.raises(UserError) as err:
        load_cluster_config({"TF_CONFIG_FILE": str(path)})
    assert str(err.value).startswith(f"TF_CONFIG_FILE {str(path)!r} is not valid JSON "
                                     "(Expecting value at line 2 column 10)")
    path.write_text(json.dumps(LEGACY))
    both = {"TF_CONFIG_FILE": str(path), "TF_CONFIG": json.dumps(
        {"cluster": {"worker": ["h:9"]}, "task": {"type": "worker", "index": 0}})}
    with pytest.raises(UserError, match=r"^TF_CONFIG and TF_CONFIG_FILE \(.*\) are both set "
                       "and describe different tasks; unset one of them$"):
        load_cluster_config(both)
    # the file's translated form, as tfyard exports it, agrees with the file
    translated = json.dumps(parse_tf_config(LEGACY).to_tf_config())
    assert load_cluster_config({**both, "TF_CONFIG": translated}).role == "chief"


def test_export_writes_the_translated_form():
    env = {}
    export_tf_config(parse_tf_config(LEGACY), env)
    assert json.loads(env["TF_CONFIG"])["task"]["type"] == "chief"
    export_tf_config(SINGLE, env)
    assert "TF_CONFIG" not in env


def test_mask_secrets():
    masked = mask_secrets({"TFYARD_REGISTRY_PASSWORD": "hunter2", "AWS_SECRET_ACCESS_KEY": "x",
                           "TF_CONFIG": "{}", "PATH": "/bin"})
    assert masked == {"TFYARD_REGISTRY_PASSWORD": "***", "AWS_SECRET_ACCESS_KEY": "***",
                      "TF_CONFIG": "{}", "PATH": "/bin"}


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 70000) | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                               max_size=4),
    max_leaves=12,
)
_job = st.sampled_from(["chief", "master", "worker", "ps", "evaluator", "boss", ""])
_address = st.one_of(st.from_regex(r"\A[a-z]{1,3}:[0-9]{1,6}\Z"), st.text(max_size=8))
_shaped = st.fixed_dictionaries(
    {"cluster": st.dictionaries(_job, st.lists(_address, max_size=3), max_size=4),
     "task": st.fixed_dictionaries({"type": _job,
                                    "index": st.integers(-1, 3) | st.text(max_size=2)})}
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json, _shaped))
def test_any_json_gives_a_config_or_a_clean_error(raw):
    """Hostile TF_CONFIG never escapes as anything but a one-line UserError."""
    try:
        config = parse_tf_config(json.dumps(raw))
    except UserError as exc:
        assert "\n" not in str(exc)
        return
    if config.task_type is not None:
        again = parse_tf_config(json.dumps(config.to_tf_config()))
        assert again == config


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_text_gives_a_config_or_a_clean_error(text):
    try:
        parse_tf_config(text)
    except UserError as exc:
        assert "\n" not in str(exc)


def test_tf1_flags_make_worker_0_the_chief_when_there_are_ps():
    config = tf_config_from_legacy_flags("p:1", "w:1,w:2,w:3", "worker", 0)
    assert config == {"cluster": {"chief": ["w:1"], "worker": ["w:2", "w:3"], "ps": ["p:1"]},
                      "task": {"type": "chief", "index": 0}}
    assert tf_config_from_legacy_flags("p:1", "w:1,w:2", "worker", 1)["task"] == {
        "type": "worker", "index": 0}
    assert tf_config_from_legacy_flags(None, "w:1,w:2", "worker", 1) == {
        "cluster": {"worker": ["w:1", "w:2"]}, "task": {"type": "worker", "index": 1}}
    with pytest.raises(UserError, match="--job_name"):
        tf_config_from_legacy_flags(None, "w:1", "boss", 0)
