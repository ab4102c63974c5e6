"""Publication: candidate bodies → blocks (SPEC §3, P1–P21), as a pure core.

One module per rule, so a reader finds each rule by file name:

==================  ==========================================================
``candidate``       P1 identity, P2/P3 intake
``extraction``      P4 readable text, roles, labels
``tokens``          the ``[[cite:…]]``/``[[num:…]]``/``[[ref:…]]`` syntax
``capacity``        P5 truncation
``citations``       P7/P8 original standing of a cited source
``numbers``         P9 Host-issued values
``hints``           P10 source hints and their binding
``duplicates``      P11 exact duplicates
``revisions``       P12 modification targets
``quota``           P13 modification quota
``ordinals``        P18 delivery position
``dependencies``    P21 effective sources and withdrawal
``block_ids``       Host-issued block ids
``settlement``      the pipeline: one decision per block (P6, P8)
``run``             the run aggregate: one commit, one transaction (P15)
``facts``           what a run knows when it settles, as typed values
``policy``          the tunable limits (P5, P13)
``saving``          P15 what a commit that did not plainly succeed leaves
``proof``           R4 what a commit's proof covers
``handling``        the handler table: what one message does (pure)
``aggregates``      the aggregates a handler reads and creates in a unit's workspace
``outcomes``        how a settled candidate ended; receipt and reconciliation ids
``sources``         the source registry aggregate and its standing
``conversations``   which runs a conversation deletion reaches (X8; sealing in ``imprint.shredding``)
``announcements``   committed events → ``imprint.publication.v1`` messages (P14)
==================  ==========================================================

No Kafka, SQL, HTTP or asyncio here."""

from imprint.publication.announcements import (
    announce,
    announce_all,
    announcement_id,
    preview_for,
    save_unknown_for,
)
from imprint.publication.block_ids import issue_block_id
from imprint.publication.conversations import ConversationRuns
from imprint.publication.candidate import Candidate, IntakeRefusal, ProposedBlock, candidate_id_for, intake
from imprint.publication.facts import BlockRecord, Grant, NumericValue, RunFacts
from imprint.publication.policy import DEFAULT_POLICY, Policy
from imprint.publication.run import BlockOutcome, CandidateOutcome, PublicationRun, receipt_id_for
from imprint.publication.settlement import (
    BlockDecision,
    Commit,
    Rejected,
    RevisionRejected,
    Unchanged,
    relied_sources,
    settle,
    sources_to_check,
)
from imprint.publication.sources import EMPTY_STANDING, SourceFacts, SourceRecord, SourceStanding, standing_of

__all__ = [
    "DEFAULT_POLICY",
    "EMPTY_STANDING",
    "BlockDecision",
    "BlockOutcome",
    "BlockRecord",
    "Candidate",
    "CandidateOutcome",
    "Commit",
    "ConversationRuns",
    "Grant",
    "IntakeRefusal",
    "NumericValue",
    "Policy",
    "ProposedBlock",
    "PublicationRun",
    "Rejected",
    "RevisionRejected",
    "RunFacts",
    "SourceFacts",
    "SourceRecord",
    "SourceStanding",
    "Unchanged",
    "announce",
    "announce_all",
    "announcement_id",
    "candidate_id_for",
    "intake",
    "issue_block_id",
    "preview_for",
    "receipt_id_for",
    "relied_sources",
    "save_unknown_for",
    "settle",
    "sources_to_check",
    "standing_of",
]
