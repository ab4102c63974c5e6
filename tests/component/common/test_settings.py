"""Configuration is refused where it is read, with the setting named, rather than at the
first write of a part that started on it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from services.common.settings import Settings


@pytest.mark.parametrize("schema", ["imprint", "jt_0f3a", "_bench_log_1000000", "a" * 63])
def test_a_lower_case_schema_is_taken_as_written(schema: str) -> None:
    assert Settings(database_schema=schema).database_schema == schema


@pytest.mark.parametrize("schema", ["MySchema", "bench-log", "9lives", "with space", "a" * 64, ""])
def test_a_schema_postgresql_would_fold_or_refuse_is_refused_by_name(schema: str,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMPRINT_DATABASE_SCHEMA", schema)
    with pytest.raises(ValidationError, match="database_schema"):
        Settings()


@pytest.mark.parametrize("prefix", ["", "bench1a2b.", "Team-A_tests."])
def test_a_topic_prefix_kafka_allows_is_taken(prefix: str) -> None:
    assert Settings(topic_prefix=prefix).topic("imprint.runtime.v1") == f"{prefix}imprint.runtime.v1"


@pytest.mark.parametrize("prefix", ["team/a.", "with space.", "ünïcode."])
def test_a_topic_prefix_kafka_would_refuse_is_refused_by_name(prefix: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("IMPRINT_TOPIC_PREFIX", prefix)
    with pytest.raises(ValidationError, match="topic_prefix"):
        Settings()


def test_a_log_level_is_read_in_any_case_and_refused_by_name_when_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings(log_level="warning").log_level == "WARNING"
    monkeypatch.setenv("IMPRINT_LOG_LEVEL", "verbose")
    with pytest.raises(ValidationError, match="log_level"):
        Settings()


def test_the_cli_names_each_refused_variable_and_never_its_value(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.cli import describe_failure

    monkeypatch.setenv("IMPRINT_TOPIC_PREFIX", "team/secret-value.")
    monkeypatch.setenv("IMPRINT_HTTP_PORT", "eighty")
    with pytest.raises(ValidationError) as refused:
        Settings()
    line = describe_failure(refused.value)
    assert line.startswith("bad configuration: ") and "\n" not in line
    assert "IMPRINT_TOPIC_PREFIX: " in line and "IMPRINT_HTTP_PORT: " in line
    assert "secret-value" not in line and "eighty" not in line
