"""``imprint conformance server``: the client protocol (docs/protocol.md) checked against a
deployment from outside, as a client on the network sees it — Delivery itself, or whatever
stands in front of it (a reverse proxy, a load balancer, a CDN).

Families of cases, each case naming its rule:

* ``sse``, ``frames`` — the stream's headers, every frame kind against its schema
  (``schemas/imprint.sse.v1.schema.json``), ids, the terminal pair, D3's summary, the merged view;
* ``resume``, ``reset``, ``end`` — every resume position by header and by query, 204 after
  ``done``, ``reset`` for every kind of unusable id, refused ids;
* ``tickets``, ``isolation``, ``receipts``, ``cancel`` — D6's scope, expiry and reuse, 404 after
  the same wait, D4's receipts, D2/X11's cancel;
* ``ai-sdk``, ``notices``, ``cors`` — the AI SDK stream read by the rules, D7's notices, CORS
  for an allowed and a refused origin;
* ``path`` — D10: a frame produced reaches the client before the next one is produced,
  ``Last-Event-ID`` arrives intact, keep-alives arrive within the interval, nothing compresses
  the stream. A failure names the proxy setting to change.

With ``--kafka`` the kit makes its own runs through the runtime SDK
(:mod:`services.conformance.scenarios`); else it reads the finished run ``--run``."""

from __future__ import annotations

import argparse
import asyncio
import logging

from services.conformance.access_cases import AccessCases
from services.conformance.path_cases import PathCases
from services.conformance.report import Report
from services.conformance.stream_cases import StreamCases


def run(args: argparse.Namespace) -> Report:
    """The command's entry point (:mod:`services.conformance.cli`)."""
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the report says what was requested
    return asyncio.run(ServerKit(args).run())


class ServerKit(StreamCases, AccessCases, PathCases):
    """Every family of cases over one engine (:class:`services.conformance.kit.Kit`)."""
