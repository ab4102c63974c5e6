"""Generate ``schemas/`` from the wire models: one JSON Schema per topic union and an
AsyncAPI 3.0 document of the topics. ``tests/unit/contracts`` fails when the files
drift from the models; run ``make schemas`` after changing a model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from imprint.contracts.registry import TOPIC_MESSAGES
from imprint.contracts.topics import Topic

SCHEMA_DIR = Path(__file__).resolve().parents[2] / "schemas"

DESCRIPTIONS = {
    Topic.RUNTIME: "runtime → publication, journal: run lifecycle, heartbeats, evidence grants, numeric handles, answer proposals",
    Topic.SOURCES: "source registry → publication, journal (key = source_id)",
    Topic.PUBLICATION: "publication → delivery, journal: previews, committed blocks (relayed from the log), rejections",
    Topic.RUNS: "journal → delivery, runtime: accepted run transitions and closed execution records; each "
                "conversation's queue facts (X12, key = conversation_id)",
    Topic.DELIVERY: "delivery →: what was sent, interrupted, completed; what clients say they received and rendered",
    Topic.CONTROL: "delivery → runtime, journal, publication: cancel and delete requests, a queued question's "
                   "cancel and send-now (X12); journal → publication, runtime: lapsed run leases, retention "
                   "deletions, interruptions, steered questions, runs ended by a conversation's policy (X12)",
    Topic.DEADLETTER: "anything refused at intake, with the original bytes",
}


def render() -> dict[str, str]:
    """File name → content, deterministic."""
    files: dict[str, str] = {}
    channels: dict[str, Any] = {}
    messages: dict[str, Any] = {}
    operations: dict[str, Any] = {}
    for topic, adapter in TOPIC_MESSAGES.items():
        schema = adapter.json_schema(ref_template="#/$defs/{model}")
        schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
        schema["$id"] = f"{topic.value}.schema.json"
        schema.setdefault("description", DESCRIPTIONS[topic])
        files[f"{topic.value}.schema.json"] = json.dumps(schema, indent=2, sort_keys=True) + "\n"
        name = topic.value.replace(".", "_")
        messages[name] = {
            "name": name,
            "contentType": "application/json",
            "payload": {"$ref": f"./{topic.value}.schema.json"},
            "headers": {"type": "object", "properties": {"type": {"type": "string"}}},
        }
        channels[name] = {
            "address": topic.value,
            "description": DESCRIPTIONS[topic],
            "messages": {name: {"$ref": f"#/components/messages/{name}"}},
        }
        operations[f"send_{name}"] = {"action": "send", "channel": {"$ref": f"#/channels/{name}"}}
    asyncapi = {
        "asyncapi": "3.0.0",
        "info": {"title": "imprint", "version": "1.0.0", "description": "imprint v1 Kafka topics (SPEC §2)"},
        "defaultContentType": "application/json",
        "channels": channels,
        "operations": operations,
        "components": {"messages": messages},
    }
    files["asyncapi.json"] = json.dumps(asyncapi, indent=2, sort_keys=True) + "\n"
    return files


def main() -> None:
    SCHEMA_DIR.mkdir(exist_ok=True)
    for name, content in render().items():
        (SCHEMA_DIR / name).write_text(content)
    print(f"wrote {len(render())} files to {SCHEMA_DIR}")


if __name__ == "__main__":
    main()
