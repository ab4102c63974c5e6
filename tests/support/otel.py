"""A real OTLP receiver for trace tests: the OpenTelemetry Collector that
``deploy/local/otelcol.sh`` builds from its Go modules, one per test, on a free port of
127.0.0.1 with its config, output and pid under the test's tmp folder.

Its file exporter writes each export request it received as one OTLP JSON line; a test reads
the spans back from there (:meth:`Collector.spans`), as the collector decoded them: what
left the process, not what the SDK meant to send."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.net import free_port

SCRIPT = Path(__file__).resolve().parents[2] / "deploy" / "local" / "otelcol.sh"


@dataclass(frozen=True)
class ReceivedSpan:
    """One span as the collector received it: ids in hex, ``parent_span_id`` empty for a root."""

    service: str
    scope: str
    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict[str, Any]
    status: dict[str, Any]
    raw: dict[str, Any] = field(repr=False)
    """The span's OTLP JSON as written (events, links and all)."""


def _value(any_value: dict[str, Any]) -> Any:
    """An OTLP JSON ``AnyValue`` as a Python value."""
    for kind in ("stringValue", "boolValue", "doubleValue"):
        if kind in any_value:
            return any_value[kind]
    if "intValue" in any_value:
        return int(any_value["intValue"])  # int64 travels as a JSON string
    if "arrayValue" in any_value:
        return [_value(v) for v in any_value["arrayValue"].get("values", [])]
    if "kvlistValue" in any_value:
        return _attributes(any_value["kvlistValue"].get("values", []))
    if "bytesValue" in any_value:
        return any_value["bytesValue"]
    return None


def _attributes(pairs: list[dict[str, Any]]) -> dict[str, Any]:
    return {pair["key"]: _value(pair.get("value", {})) for pair in pairs}


@dataclass(frozen=True)
class Collector:
    endpoint: str
    """``http://127.0.0.1:<port>``: what ``OTEL_EXPORTER_OTLP_ENDPOINT`` names."""
    output: Path
    """The file exporter's JSON lines."""
    log: Path

    def lines(self) -> list[str]:
        """The output's complete lines (the exporter may be mid-write on the last one)."""
        if not self.output.exists():
            return []
        text = self.output.read_text(encoding="utf-8")
        return text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]

    def spans(self) -> list[ReceivedSpan]:
        found = []
        for line in self.lines():
            for resource_spans in json.loads(line).get("resourceSpans", []):
                resource = _attributes(resource_spans.get("resource", {}).get("attributes", []))
                for scope_spans in resource_spans.get("scopeSpans", []):
                    scope = scope_spans.get("scope", {}).get("name", "")
                    for span in scope_spans.get("spans", []):
                        found.append(ReceivedSpan(
                            service=str(resource.get("service.name", "")), scope=scope, name=span["name"],
                            kind=int(span.get("kind", 0)), trace_id=span["traceId"], span_id=span["spanId"],
                            parent_span_id=span.get("parentSpanId", ""),
                            attributes=_attributes(span.get("attributes", [])), status=span.get("status", {}),
                            raw=span,
                        ))
        return found

    def wait_for(self, done: Callable[[list[ReceivedSpan]], bool], timeout: float = 30.0) -> list[ReceivedSpan]:
        """The received spans once ``done(spans)`` holds; fails after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            spans = self.spans()
            if done(spans):
                return spans
            if time.monotonic() > deadline:
                raise AssertionError(f"the collector did not receive the expected spans within {timeout}s: "
                                     f"{[(s.service, s.name) for s in spans]} (log: {self.log})")
            time.sleep(0.1)


def _run(command: str, env: dict[str, str], timeout: float) -> str:
    done = subprocess.run(["bash", str(SCRIPT), command], env=env, capture_output=True, text=True,
                          timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"otelcol.sh {command} failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return done.stdout


def run_collector(tmp_path: Path) -> Iterator[Collector]:
    """Build (once per checkout; see the script) and start a collector; stop it by its pid
    when the test is over. No Go means a clear failure, never a skip."""
    state = tmp_path / "otelcol-state"
    port = free_port()
    env = {**os.environ, "IMPRINT_STATE_DIR": str(state), "OTELCOL_HTTP_PORT": str(port)}
    _run("build", env, timeout=900)  # `make test` built it already; a lone pytest may compile here
    _run("up", env, timeout=120)
    try:
        yield Collector(endpoint=f"http://127.0.0.1:{port}", output=state / "otelcol" / "spans.jsonl",
                        log=state / "logs" / "otelcol.log")
    finally:
        _run("down", env, timeout=60)
