"""The runtime journal's domain (§5 of docs/rules.md, X1–X11; P19, P20; D5).

One home per rule:

==================  =====================================================================
``lifecycle``       X2 — the transition table and its typed refusals
``conditions``      X3 — question normalization, QCS identity and inheritance
``execution``       X1, X2, X4, P19, P20 — the ``AnswerExecution`` aggregate
``conversation``    X3 binding list, X8 deletion tombstone (serializes admission vs deletion)
``history``         X4, X5, X6, D5 — projection without recomputation, verified lookup index
``redaction``       X7 — source tombstones, redaction serialized with completion
``diagnostics``     X9 — bounded traces of codes, ids, counts and timings
``leases``          X10 — run leases: when a run is due, what closing it records, the shards
``stopping``        X11 — a user's stop request, a recorded fact of the open run
``refusals``        typed refusals: why a message was not applied (a recorded fact)
``queue_handling``  X12 — the handler table's rows of the conversation's queue
``handling``        the handler table: which message touches which aggregate (storage-agnostic)
``effects``         what a handler knows besides the body (its context) and what it returns
``keys``            X8 — the per-conversation keys a unit of work seals private fields under
``deletion``        X8 — a conversation's deletion: key destroyed, tombstone, executions erased
``events``          the event base every journal aggregate shares
``ids``             deterministic aggregate ids from natural keys
``announcements``   committed events → ``imprint.runs.v1`` messages (X4, X6)
``views``           read models returned by ``services.journal.queries``
==================  =====================================================================

X8's field sealing and the ``Keyring`` protocol live in ``imprint.shredding``, shared
with Publication. Nothing here opens a socket or a database connection.
"""
