"""X8 across every store: deleting a conversation leaves none of its private text in
any table of Publication, Journal or Delivery (a plaintext scan of the dump)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable

import httpx
import pytest

from imprint.contracts.runtime import AnswerPart, EvidenceItem
from imprint.contracts.topics import Topic
from services.common.settings import Settings
from services.delivery.auth import mint_token
from tests.support.dump import dump_schema
from tests.support.kafka import produce, read_topic
from tests.support.runs import admitted, completed, granted, opened
from tests.support.sse import read_frames
from tests.support.stack import Stack
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]


@pytest.mark.rule("X8")
def test_deleting_a_conversation_leaves_no_private_text_in_any_store(isolated: Settings) -> None:
    tag = uuid.uuid4().hex[:12]
    secrets = {
        "question": f"QUESTION-{tag} how tall is the secret tower",
        "body": f"BODY-{tag} the tower is 42 m",
        "answer": f"ANSWER-{tag} forty-two metres",
        "excerpt": f"EXCERPT-{tag} survey notes",
    }
    run, conversation, account = f"run-{tag}", f"conv-{tag}", "acct-del"
    token = mint_token(isolated, account)
    with Stack(isolated) as stack:
        asyncio.run(produce(isolated, Topic.RUNTIME,
            *opened(admitted(run, account_id=account, conversation_id=conversation, message_id=f"m-{tag}",
                             question=secrets["question"])),
            granted(run, "src-survey", scope="private", owner_account_id=account),
            AnswerPart(run_id=run, turn_id="t1", tool_call_id="c1", sealed=True,
                       arguments={"markdown": secrets["body"] + " [[cite:src-survey]]"}),
            completed(run, secrets["answer"], EvidenceItem(source_id="src-survey", excerpt=secrets["excerpt"]),
                      snapshot_id="s1", knowledge_version="k1"),
        ))
        stack.wait_for_run(run, token)
        read_frames(stack.base_url, run, token, until=lambda fs: any(f.event == "done" for f in fs))

        at_rest = dump_schema(isolated)
        publication_rows = "\n".join(line for line in at_rest.splitlines() if line.startswith("publication_"))
        assert publication_rows and secrets["body"] not in publication_rows, "bodies are sealed in the log"

        response = httpx.delete(f"{stack.base_url}/v1/conversations/{conversation}",
                                headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 202, response.text

        withdrawn = asyncio.run(read_topic(isolated, Topic.PUBLICATION, until=lambda vs: any(
            v["type"] == "answer.withdrawn" and v["cause"] == "conversation_deleted" for v in vs)))
        assert any(v["type"] == "answer.withdrawn" and v["run_id"] == run for v in withdrawn)
        deadline = time.monotonic() + 30
        while httpx.get(f"{stack.base_url}/v1/runs/{run}",
                        headers={"Authorization": f"Bearer {token}"}).status_code != 404:
            assert time.monotonic() < deadline, "delivery never dropped the deleted conversation's run"
            time.sleep(0.2)
        # the Journal finishes its deletion transaction and relays it after Delivery dropped the run
        dump = settled_dump(isolated, lambda dump: not any(tag in text and text.split(" ")[0] in dump
                                                           for text in secrets.values()))
    leaked = {name: text for name, text in secrets.items() if tag in text and text.split(" ")[0] in dump}
    assert not leaked, f"private text survived deletion: {sorted(leaked)}"


def settled_dump(settings: Settings, settled: Callable[[str], bool], timeout: float = 60) -> str:
    """The stores' dump once ``settled`` holds of it (the parts finish deleting on their own
    schedule), or as it stands when ``timeout`` passed: the caller's asserts say what is left."""
    try:
        return wait_until(lambda: (lambda dump: dump if settled(dump) else None)(dump_schema(settings)),
                          "every part to finish the deletion", timeout=timeout, interval=0.5)
    except AssertionError:
        return dump_schema(settings)


@pytest.mark.rule("X8")
def test_retention_deletes_an_idle_conversation_everywhere(isolated: Settings) -> None:
    tag = uuid.uuid4().hex[:12]
    body, question = f"RETAINED-BODY-{tag}", f"RETAINED-QUESTION-{tag}"
    run, conversation, account = f"run-ret-{tag}", f"conv-ret-{tag}", "acct-ret"
    settings = isolated.model_copy(update={"retention_seconds": 6.0, "retention_sweep_seconds": 1.0})
    token = mint_token(settings, account)
    with Stack(settings) as stack:
        asyncio.run(produce(settings, Topic.RUNTIME,
            admitted(run, account_id=account, conversation_id=conversation, message_id=f"m-{tag}", question=question),
            AnswerPart(run_id=run, turn_id="t1", tool_call_id="c1", sealed=True, arguments={"markdown": body})))
        stack.wait_for_run(run, token)
        # Idle past the retention age: the sweeper deletes it in the journal and asks the others.
        values = asyncio.run(read_topic(settings, Topic.PUBLICATION, timeout=60, until=lambda vs: any(
            v["type"] == "answer.withdrawn" and v["cause"] == "conversation_deleted" for v in vs)))
        requests = asyncio.run(read_topic(settings, Topic.CONTROL, until=lambda vs: any(
            v["conversation_id"] == conversation and v["reason"] == "retention" for v in vs)))
        deadline = time.monotonic() + 30
        while httpx.get(f"{stack.base_url}/v1/runs/{run}",
                        headers={"Authorization": f"Bearer {token}"}).status_code != 404:
            assert time.monotonic() < deadline, "delivery never dropped the expired conversation"
            time.sleep(0.2)
        dump = settled_dump(settings, lambda dump: body not in dump and question not in dump)
    assert any(v["run_id"] == run for v in values if v["type"] == "answer.withdrawn")
    assert [r["account_id"] for r in requests if r["conversation_id"] == conversation] == [account]
    assert body not in dump and question not in dump
