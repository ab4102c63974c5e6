"""``imprint conformance``: the kit's two commands.

``server`` runs the server cases against a deployment's URL (``services.conformance.server``);
``client`` plays the scripted streams to a client adapter (``services.conformance.client``).
Each prints the report's table and, with ``--json PATH``, writes it as JSON; exit 0 when every
case passed, 1 when one failed, 2 on a usage error."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1


def add_commands(sub: Any) -> None:
    """The ``conformance`` group on the ``imprint`` parser's subcommands."""
    conformance = sub.add_parser("conformance", help="check a deployment or a client against docs/protocol.md")
    kits = conformance.add_subparsers(dest="kit", required=True, parser_class=type(conformance))

    server = kits.add_parser("server", help="run the server cases against a deployment")
    server.add_argument("--url", required=True, help="the deployment's base URL (Delivery, or the proxy before it)")
    server.add_argument("--token", required=True, help="a bearer token of an account (imprint token --account …)")
    server.add_argument("--kafka", default=None,
                        help="the deployment's Kafka bootstrap: the kit creates its own runs through the runtime SDK")
    server.add_argument("--run", default=None, help="without --kafka: an existing finished run to read")
    server.add_argument("--origin", default=None, help="an origin the deployment allows (the CORS cases)")
    server.add_argument("--topic-prefix", default=None,
                        help="with --kafka: the deployment's topic prefix (default: IMPRINT_TOPIC_PREFIX)")
    server.add_argument("--keepalive", type=float, default=None,
                        help="the deployment's keep-alive interval, in seconds (IMPRINT_SSE_KEEPALIVE_SECONDS; 15)")
    server.add_argument("--frame-wait", type=float, default=None,
                        help="how long a produced frame may take to reach the kit, in seconds (5)")
    server.add_argument("--ticket-wait", type=float, default=None,
                        help="wait for a ticket to expire when it lives at most this long, in seconds (30)")
    _common(server)
    server.set_defaults(func=_server)

    client = kits.add_parser("client", help="play the client cases to a client adapter (JSON lines on stdin/stdout)")
    client.add_argument("adapter", nargs=argparse.REMAINDER, help="-- the adapter command and its arguments")
    _common(client)
    client.set_defaults(func=_client)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", dest="json_path", default=None, help="also write the report as JSON to this file")
    parser.add_argument("--only", default=None, help="run only these families of cases (comma-separated)")
    parser.add_argument("--failures", action="store_true", help="print only the failed cases' rows")


def _kit(name: str) -> Any:
    try:
        return importlib.import_module(f"services.conformance.{name}")
    except ModuleNotFoundError as missing:
        if missing.name == f"services.conformance.{name}":
            raise SystemExit(f"imprint conformance {name}: this kit is not installed in this version") from None
        raise


def _finish(report: Any, args: argparse.Namespace) -> int:
    report.print(sys.stdout, only_failures=args.failures)
    if args.json_path:
        report.write_json(args.json_path)
    return EXIT_OK if report.passed else EXIT_FAILED


def _server(args: argparse.Namespace) -> int:
    return _finish(_kit("server").run(args), args)


def _client(args: argparse.Namespace) -> int:
    adapter = list(args.adapter)
    if adapter[:1] == ["--"]:
        adapter = adapter[1:]
    if not adapter:
        raise SystemExit("imprint conformance client: give the adapter command after --")
    args.adapter = adapter
    return _finish(_kit("client").run(args), args)
