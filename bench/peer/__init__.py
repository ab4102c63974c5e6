"""The peer: imprint's stack built the obvious way, with the same libraries, on the same
broker and PostgreSQL, fed the same runtime messages (``bench.workload``).

Three processes, each doing one thing per message:

* :mod:`bench.peer.publication` — a FastStream subscriber taking one message per call
  from the runtime topic; per proposal an eventsourcing ``Application`` does
  ``repository.get`` of the run, triggers one event carrying the blocks and ``save``\\ s
  it, then publishes one record per block, each send awaited;
* :mod:`bench.peer.delivery` — a second one-message subscriber on those records: one
  psycopg ``INSERT`` of the frame and one ``NOTIFY`` per record, in one transaction
  from a connection pool;
* :mod:`bench.peer.sse` — FastAPI with sse-starlette under uvicorn: each run's frames
  to its clients, from one ``LISTEN`` connection.

Client settings are the libraries' defaults (a consumer reading from the earliest offset
is the one choice made). :mod:`bench.peer.runner` starts them, offers the loads and
measures them as :mod:`bench.e2e` measures imprint's stack."""
