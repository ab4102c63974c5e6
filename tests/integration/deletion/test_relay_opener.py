"""The Publication relay opens a batch's sealed bodies with one key read per batch
(``BatchOpener``): what it announces is exactly what the log's own mapper announces,
event for event, and a shredded conversation's bodies never go out in clear."""

from __future__ import annotations

import pytest

from imprint.contracts.control import ConversationDeleteRequested
from imprint.contracts.registry import encode
from imprint.contracts.topics import Topic
from services.common.backends import backend_for
from services.common.settings import Settings
from services.publication.relay import announce_publication
from services.publication.sealing import REMOVED, BatchOpener
from services.publication.application import open_log
from tests.integration.deletion.test_publication_shredding import Feed, admitted, part

pytestmark = pytest.mark.integration


@pytest.mark.rule("X8")
@pytest.mark.rule("P14")
def test_the_relay_opens_bodies_once_per_batch_and_announces_what_the_log_holds(isolated: Settings) -> None:
    log, feed = open_log(isolated), Feed()
    keyring = backend_for(isolated).keyring()
    odd = 'c-"quoted"-é\\slash'  # a conversation id the byte scan must unescape
    try:
        log.process(feed(Topic.RUNTIME, admitted("r1", "c1"), admitted("r2", odd), admitted("r3", "c-gone"),
                         part("r1", "k1", "first body"), part("r2", "k2", "second body"),
                         part("r3", "k3", "doomed body"), part("r1", "k4", "third body")), feed.emit)
        log.process(feed(Topic.CONTROL, ConversationDeleteRequested(conversation_id="c-gone", account_id="acct")),
                    feed.emit)
        notifications = log.recorder.select_notifications(start=1, limit=10_000)
        opener = BatchOpener(log.mapper, keyring)
        calls: list[list[str]] = []
        keys_for = keyring.keys_for
        keyring.keys_for = lambda names: calls.append(sorted(names)) or keys_for(names)  # type: ignore[method-assign]

        relayed = [m for e in opener(notifications) for _, m in announce_publication(e)]
        expected = [m for n in notifications for _, m in announce_publication(log.mapper.to_domain_event(n))]

        assert [encode(m) for m in relayed] == [encode(m) for m in expected], "the same messages, byte for byte"
        assert calls == [sorted(["c1", odd, "c-gone"])], "one key read for the whole batch, every name found"
        bodies = {m.block.block_id: m.block.content.markdown for m in relayed if m.type == "answer.published"}
        assert sorted(bodies.values()) == sorted(["first body", "second body", "third body", REMOVED])
        assert "doomed body" not in b"".join(encode(m) for m in relayed).decode()
        # The service's opener reads through the log's own keyring (RecentKeys), never its cache.
        served = [m for e in BatchOpener(log.mapper, log.keyring)(notifications) for _, m in announce_publication(e)]
        assert [encode(m) for m in served] == [encode(m) for m in expected]
    finally:
        keyring.close()
        log.close()


@pytest.mark.rule("X8")
def test_a_key_the_scan_did_not_find_is_still_read_and_its_body_opened(isolated: Settings) -> None:
    """The scan reads one sealed record per stream (a run's bodies share its conversation's
    key); a record of the same stream sealed under another key is opened all the same."""
    log, feed = open_log(isolated), Feed()
    keyring = backend_for(isolated).keyring()
    try:
        log.process(feed(Topic.RUNTIME, admitted("r1", "c1"), part("r1", "k1", "first body"),
                         part("r1", "k2", "second body")), feed.emit)
        notifications = log.recorder.select_notifications(start=1, limit=10_000)
        sealed = [n for n in notifications if b"__sealed__" in n.state]
        last = log.mapper.to_domain_event(sealed[-1])
        log.mapper.bind(last.originator_id, "c-elsewhere")  # as if sealed before its conversation was known
        resealed = log.mapper.to_stored_event(last)
        assert b"c-elsewhere" in resealed.state
        calls: list[list[str]] = []
        keys_for, key_for = keyring.keys_for, keyring.key_for
        keyring.keys_for = lambda names: calls.append(sorted(names)) or keys_for(names)  # type: ignore[method-assign]
        keyring.key_for = lambda name, create=False: calls.append([name]) or key_for(name, create)  # type: ignore[method-assign]

        opened = BatchOpener(log.mapper, keyring)([*sealed[:-1], resealed])

        assert calls == [["c1"], ["c-elsewhere"]], "one read for the batch, one for the name it missed"
        bodies = [m.block.content.markdown for e in opened for _, m in announce_publication(e)
                  if m.type == "answer.published"]
        assert bodies == [log.mapper.to_domain_event(s).block["content"]["markdown"] for s in sealed], \
            "every body opened, the resealed one included"
        assert set(bodies) == {"first body", "second body"}
    finally:
        keyring.close()
        log.close()
