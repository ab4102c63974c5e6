"""``make bench`` / ``python -m bench``: Publication's costs, measured (never asserted).

1. ``core``: the pure core — ``settle`` on a typical two-block proposal (µs per call).
2. ``log``: ``PublicationLog.process`` in-process on PostgreSQL — proposals/s and ms per
   poll for polls of 1, 50 and 500 proposals (one tracked transaction per poll).
3. ``e2e``: publication + relay as real processes over Kafka and PostgreSQL — ms from
   producing an ``answer.part`` on ``imprint.runtime.v1`` to its ``answer.published`` on
   ``imprint.publication.v1``.

Everything runs on its own PostgreSQL schema and topic prefix, removed afterwards.
Results go to stdout and to ``<state dir>/bench/last.json``."""
