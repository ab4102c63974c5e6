"""R8, the log outlives the code: every golden log under ``tests/golden/logs/`` — made by
an earlier release and never regenerated — replays, verifies and serves under this
code exactly as it did under the code that made it (and R1: the same log, the same
view, whatever process or backend reads it).

For each golden folder and each backend the stores are put back into a fresh state
folder (SQLite) or a fresh schema (PostgreSQL), and ``tests/golden/serving.py`` runs
``imprint replay``, ``imprint replay --verify`` and a real Delivery fed by the logs'
relays. How each output is compared:

* ``replay.jsonl`` and ``verify.jsonl``: byte for byte. The command writes canonical
  JSON lines (sorted keys, no whitespace) in the order the runs were opened, and each
  line carries its view's hash: order and bytes are the promise (R1).
* ``answer/<run>.json``: as canonical JSON. Key order in an HTTP JSON body is not part
  of the contract; everything else — values, list order (blocks in display order),
  status code — is.

A folder that is incomplete, or whose files no longer match the sha256 it was made
with, fails before anything is served.

Replay, verify and serve read the runs' streams. What else a log holds — the source
registry and its shards' reliance records, the conversations, the journal's aggregates —
is read by the consumers when they go on from it, so every aggregate of a golden log must
load too, through whatever upcasters its events and snapshots need, the same from its
latest snapshot as from its events alone."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from imprint.canonical import canonical_json
from imprint.publication.run import PublicationRun
from imprint.publication.sources import SourceDependents, SourceRecord
from services.common.settings import Settings
from services.journal.application import open_journal
from services.publication.application import open_log
from tests.golden.folder import BACKENDS, LOGS, Golden, releases, restored
from tests.golden.serving import observe

pytestmark = pytest.mark.rule("R8")


def test_there_is_a_golden_log() -> None:
    assert releases(), f"no golden log under {LOGS}: make one with python -m tests.golden.make_golden <release>"


@pytest.mark.parametrize("release", releases())
def test_a_golden_folder_is_complete_and_unchanged(release: str) -> None:
    problems = Golden(LOGS / release).problems()
    assert not problems, f"golden log {release} is incomplete or changed:\n" + "\n".join(problems)


@pytest.mark.e2e
@pytest.mark.timeout(300)
@pytest.mark.rule("R1")
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("release", releases())
def test_a_golden_log_replays_verifies_and_serves_as_it_did(
    release: str, backend: str, kafka_bootstrap: str, database_url: str, tmp_path: Path,
) -> None:
    golden = Golden(LOGS / release)
    problems = golden.problems()
    assert not problems, f"golden log {release} is incomplete or changed:\n" + "\n".join(problems)
    base = Settings(_env_file=None,  # type: ignore[call-arg]
                    kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    with restored(golden.path, backend, base, tmp_path / "state") as settings:
        observed = observe(settings, golden.runs)
    assert sorted(observed) == sorted(golden.outputs())
    differing = [name for name in golden.outputs() if comparable(name, observed[name]) != comparable(
        name, golden.expected(name))]
    assert not differing, (f"{release} on {backend}: {differing} differ from what the release that made it saw\n"
                           + first_difference(comparable(differing[0], golden.expected(differing[0])),
                                              comparable(differing[0], observed[differing[0]])))


@pytest.mark.integration
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("release", releases())
def test_every_aggregate_of_a_golden_log_loads_as_it_was_written(
    release: str, backend: str, kafka_bootstrap: str, database_url: str, tmp_path: Path,
) -> None:
    golden = Golden(LOGS / release)
    assert not golden.problems()
    base = Settings(_env_file=None,  # type: ignore[call-arg]
                    kafka_bootstrap=kafka_bootstrap, database_url=database_url)
    loaded: dict[object, object] = {}
    with restored(golden.path, backend, base, tmp_path / "state") as settings:
        for app in (open_log(settings), open_journal(settings)):
            try:
                originators = dict.fromkeys(n.originator_id for n in app.recorder.select_notifications(
                    start=1, limit=1_000_000))
                for originator_id in originators:
                    aggregate = app.repository.get(originator_id)  # from its latest snapshot, if any
                    folded = None
                    for event in app.events.get(originator_id):
                        folded = event.mutate(folded)
                    assert vars(aggregate) == vars(folded), f"{release} on {backend}: {aggregate!r} from its snapshot"
                    loaded[originator_id] = aggregate
            finally:
                app.close()
    assert {a.run_id for a in loaded.values() if isinstance(a, PublicationRun)} == set(golden.runs)
    records = [a for a in loaded.values() if isinstance(a, SourceRecord)]
    reliance = [a for a in loaded.values() if isinstance(a, SourceDependents)]
    assert records and reliance
    for dependents in reliance:  # the id the log wrote is the id this code derives
        assert SourceDependents.id_for(dependents.source_id, dependents.shard) == dependents.id
    for record in records:  # every shard a record opened has its reliance record
        assert all(SourceDependents.id_for(record.source_id, shard) in loaded for shard in record.shards)


def comparable(name: str, output: bytes) -> bytes:
    """What is compared of an output: its bytes, or for an HTTP body its canonical JSON."""
    if name.startswith("answer/"):
        return canonical_json(json.loads(output)).encode()
    return output


def first_difference(expected: bytes, observed: bytes, lines: int = 40) -> str:
    """The first differing line of two outputs, each of its JSON values pretty-printed, as a diff."""
    pairs = zip(expected.splitlines(), observed.splitlines(), strict=False)
    at = next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(expected.splitlines()),
                                                                   len(observed.splitlines())))

    def pretty(output: bytes) -> list[str]:
        found = output.splitlines()
        if at >= len(found):
            return ["(no such line)"]
        return json.dumps(json.loads(found[at]), indent=1, sort_keys=True, ensure_ascii=False).splitlines()

    diff = difflib.unified_diff(pretty(expected), pretty(observed), "expected", "observed", lineterm="", n=2)
    return f"line {at + 1}:\n" + "\n".join(list(diff)[:lines])
