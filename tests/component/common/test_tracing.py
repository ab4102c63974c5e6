"""Tracing is configured by OpenTelemetry's standard environment alone, and is off by default."""

from __future__ import annotations

import pytest

from services.common import tracing


@pytest.mark.parametrize(("environ", "expected"), [
    ({}, []),
    ({"OTEL_SERVICE_NAME": "x"}, []),
    ({"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, ["otlp"]),
    ({"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://127.0.0.1:4318/v1/traces"}, ["otlp"]),
    ({"OTEL_TRACES_EXPORTER": "console"}, ["console"]),
    ({"OTEL_TRACES_EXPORTER": "otlp, console"}, ["otlp", "console"]),
    ({"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, []),
    ({"OTEL_SDK_DISABLED": "true", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}, []),
])
def test_the_exporters_the_environment_asks_for(environ: dict[str, str], expected: list[str]) -> None:
    assert tracing.exporter_names(environ) == expected


def test_off_by_default_and_the_part_names_the_service(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER",
                 "OTEL_SDK_DISABLED", "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES"):
        monkeypatch.delenv(name, raising=False)
    assert tracing.configure_tracing("imprint-publication", install=False) is None

    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    provider = tracing.configure_tracing("imprint-publication", install=False)
    assert provider is not None and provider.resource.attributes["service.name"] == "imprint-publication"
    provider.shutdown()

    monkeypatch.setenv("OTEL_SERVICE_NAME", "operator-chosen")
    provider = tracing.configure_tracing("imprint-publication", install=False)
    assert provider is not None and provider.resource.attributes["service.name"] == "operator-chosen"
    provider.shutdown()


def test_an_otlp_protocol_that_is_not_installed_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
    with pytest.raises(ValueError, match="only http/protobuf"):
        tracing.configure_tracing("imprint-journal", install=False)
