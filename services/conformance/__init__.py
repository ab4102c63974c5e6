"""The conformance kit: imprint's client protocol (docs/protocol.md) checked from outside.

* ``report.py``  a case's result and the report: a readable table and JSON
* ``cli.py``     ``imprint conformance server`` and ``imprint conformance client``
* ``server.py``  the server cases, run against any deployment's URL: ``kit.py`` (the engine),
  ``stream_cases.py``, ``access_cases.py``, ``path_cases.py`` (the families), ``scenarios.py``
  (the runs it makes), ``sse.py`` (its SSE reader)
* ``client.py``  the client cases, played to a client adapter (JSON lines over stdin/stdout)
"""
