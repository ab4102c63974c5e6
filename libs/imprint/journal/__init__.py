"""The runtime journal's domain (SPEC §5, X1–X10; P19, P20; D5).

One home per rule:

=================  =====================================================================
``lifecycle``      X2 — the transition table and its typed refusals
``conditions``     X3 — question normalization, QCS identity and inheritance
``execution``      X1, X2, X4, P19, P20 — the ``AnswerExecution`` aggregate
``conversation``   X3 binding list, X8 deletion tombstone (serializes admission vs deletion)
``history``        X4, X5, X6, D5 — projection without recomputation, verified lookup index
``redaction``      X7 — source tombstones, redaction serialized with completion
``diagnostics``    X9 — bounded traces of codes, ids, counts and timings
``leases``         X10 — run leases: when a run is due, what closing it records, the shards
``intake``         which message touches which aggregate (storage-agnostic)
``announcements``  committed events → ``imprint.runs.v1`` messages (X4, X6)
``views``          read models returned by ``services.journal.queries``
=================  =====================================================================

X8's field sealing and the ``Keyring`` protocol live in ``imprint.shredding``, shared
with Publication. Nothing here opens a socket or a database connection.
"""
