"""The ``imprint`` command: one entry point for every part and tool of the stack."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import NoReturn

from services.common.backends import backend_for
from services.common.observability import configure_logging
from services.common.settings import get_settings

SERVABLE = {
    "publication": "services.publication.service",
    "relay": "services.publication.relay",  # alias of publication-relay
    "publication-relay": "services.publication.relay",
    "journal-relay": "services.journal.relay",
    "journal": "services.journal.service",
    "delivery": "services.delivery.service",
}
"""What ``imprint serve`` runs, by name → its module: each part, and each log's relay on its own
(the parts ``imprint up`` starts are :data:`services.common.launcher.PARTS`)."""
DEPLOY_LOCAL = Path(__file__).resolve().parent.parent / "deploy" / "local"


def _serve(args: argparse.Namespace) -> int:
    import uvloop

    from services.common.tracing import configure_tracing

    module = importlib.import_module(SERVABLE[args.part])
    # off unless the standard OTEL_* environment asks for it; one service name per part
    configure_tracing(f"imprint-{'publication-relay' if args.part == 'relay' else args.part}")
    # Every part is one event loop carrying polls, produce requests, notifications and (in
    # Delivery) a socket write per SSE client per wake-up: uvloop runs that loop in C.
    uvloop.run(module.serve(get_settings()))
    return 0


def _up(args: argparse.Namespace) -> int:
    from services.common.tracing import configure_tracing
    from services.stack import run_stack

    configure_tracing("imprint-runtime")  # the demo's runtime, when it plays here; the parts trace themselves
    return run_stack(get_settings(), demo=args.demo, exit_after_demo=args.exit_after_demo)


def _demo(args: argparse.Namespace) -> int:
    from services.common.tracing import configure_tracing
    from services.demo import run_demo

    configure_tracing("imprint-runtime")  # the demo is a runtime: its proposals start their traces
    return asyncio.run(run_demo(get_settings(), watch=not args.no_watch))


def _token(args: argparse.Namespace) -> int:
    if args.operator:
        from services.delivery.operator import mint_operator_token

        print(mint_operator_token(get_settings(), args.account, ttl_seconds=args.ttl))
        return 0
    from services.delivery.auth import mint_token

    print(mint_token(get_settings(), args.account, ttl_seconds=args.ttl))
    return 0


def _infra(args: argparse.Namespace) -> int:
    return subprocess.call(["bash", str(DEPLOY_LOCAL / "infra.sh"), args.action])


def _replay(args: argparse.Namespace) -> int:
    from services.recovery.cli import replay

    preflight()
    return replay(get_settings(), run_id=args.run, verify=args.verify, output=_output(args), bodies=args.bodies,
                  workers=args.workers)


def _recover(args: argparse.Namespace) -> int:
    from services.recovery.cli import recover

    preflight()
    return recover(get_settings(), run_id=args.run, apply=args.apply, output=_output(args),
                   read_kafka=not args.no_kafka)


def _export(args: argparse.Namespace) -> int:
    from services.recovery.cli import export

    preflight()
    return export(get_settings(), run_id=args.run)


def _inspect(args: argparse.Namespace) -> int:
    from services.delivery.view_store import ViewStore
    from services.recovery.cli import inspect, inspect_conversation

    preflight()
    settings = get_settings()
    if args.conversation is not None:
        return inspect_conversation(settings, args.conversation, output=_output(args))
    return inspect(settings, run_id=args.run, output=_output(args), open_store=lambda: ViewStore(settings))


def preflight() -> None:
    """One plain connection first, so a database that does not answer is one clear line within
    seconds (the stores' connection pools would wait and retry for half a minute)."""
    backend_for(get_settings()).check_reachable()


def _output(args: argparse.Namespace) -> str:
    return "json" if args.json else "table"


def positive_seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive number of seconds, not {value}")
    return value


class Parser(argparse.ArgumentParser):
    """Usage errors in one line (exit 2), not a usage block."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


EXIT_FAILED = 1
EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="imprint", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    serve = sub.add_parser("serve", help="run one part of the stack in the foreground")
    serve.add_argument("part", choices=sorted(SERVABLE))
    serve.set_defaults(func=_serve)

    up = sub.add_parser("up", help="run the whole stack as supervised child processes")
    up.add_argument("--demo", action="store_true", help="play the scripted research run once the stack is ready")
    up.add_argument("--exit-after-demo", action="store_true", help="stop the stack when the demo has been watched")
    up.set_defaults(func=_up)

    demo = sub.add_parser("demo", help="play a scripted research run onto Kafka and watch its stream")
    demo.add_argument("--no-watch", action="store_true")
    demo.set_defaults(func=_demo)

    token = sub.add_parser("token", help="mint a bearer token for an account")
    token.add_argument("--account", required=True)
    token.add_argument("--ttl", type=positive_seconds, default=None, help="lifetime in seconds (> 0)")
    token.add_argument("--operator", action="store_true", help="with the operator claim (the run inspector page)")
    token.set_defaults(func=_token)

    infra = sub.add_parser("infra", help="start or stop the local Kafka and PostgreSQL (deploy/local)")
    infra.add_argument("action", choices=["up", "down", "reset", "status"])
    infra.set_defaults(func=_infra)

    replay = sub.add_parser("replay", help="rebuild answer views from the Publication log (R1)")
    replay.add_argument("--run")
    replay.add_argument("--verify", action="store_true",
                        help="check determinism and the integrity of every committed revision; exit 1 on failure")
    replay.add_argument("--bodies", action="store_true", help="include block bodies (left out by default)")
    replay.add_argument("--json", action="store_true", help="JSON lines for machines instead of a table")
    replay.add_argument("--workers", type=int, default=None,
                        help="processes folding the runs (default: up to 2, one per core; --verify folds in one)")
    replay.set_defaults(func=_replay)

    recover = sub.add_parser("recover", help="report (and with --apply reconcile) recovery state (R7)")
    recover.add_argument("--run")
    recover.add_argument("--apply", action="store_true", help="append the findings as reconciliation facts")
    recover.add_argument("--no-kafka", action="store_true", help="do not read save-unknowns back from Kafka")
    recover.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    recover.set_defaults(func=_recover)

    export = sub.add_parser("export", help="export a run's committed history for audit (P21)")
    export.add_argument("--run", required=True)
    export.set_defaults(func=_export)

    inspect = sub.add_parser("inspect", help="one run as a timeline: log, journal, delivery, client; or one "
                                             "conversation's questions, policies and outcomes")
    which = inspect.add_mutually_exclusive_group(required=True)
    which.add_argument("--run")
    which.add_argument("--conversation", help="the conversation's queue timeline (X12)")
    inspect.add_argument("--json", action="store_true", help="one JSON document instead of tables")
    inspect.set_defaults(func=_inspect)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        settings = get_settings()
        configure_logging(json=settings.log_json, level=settings.log_level)
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        return 130
    except Exception as error:  # noqa: BLE001 — one clear line, no traceback (IMPRINT_DEBUG=1 shows it)
        if os.environ.get("IMPRINT_DEBUG"):
            raise
        print(f"imprint: {describe_failure(error)}", file=sys.stderr)
        return EXIT_FAILED


def describe_failure(error: BaseException) -> str:
    """One line for an operator: what failed, where, and the first line of why."""
    import sqlite3

    import psycopg
    from eventsourcing.persistence import InterfaceError, OperationalError
    from pydantic import ValidationError

    chain = [error]
    while chain[-1].__cause__ is not None or chain[-1].__context__ is not None:
        nxt = chain[-1].__cause__ or chain[-1].__context__
        assert nxt is not None
        if nxt in chain:
            break
        chain.append(nxt)
    reason = next((str(e).strip().splitlines()[0] for e in reversed(chain) if str(e).strip()), type(error).__name__)
    if any(isinstance(e, (psycopg.OperationalError, OperationalError, InterfaceError, sqlite3.OperationalError,
                          psycopg.errors.ConnectionTimeout)) for e in chain):
        return f"the database does not answer ({database_label()}): {reason}"
    if isinstance(error, ValidationError) and error.title == "Settings":
        # each refused setting by its variable; never its value, which may be a secret
        return "bad configuration: " + "; ".join(
            f"{setting_variable(problem['loc'])}: {problem['msg']}" for problem in error.errors(include_url=False))
    if isinstance(error, ValidationError):
        return f"bad configuration: {reason}"
    return f"{type(error).__name__}: {reason}"


def setting_variable(location: tuple[int | str, ...]) -> str:
    """The ``IMPRINT_*`` variable of a setting pydantic refused (its location's first part)."""
    return f"IMPRINT_{str(location[0]).upper()}" if location else "IMPRINT_*"


def database_label() -> str:
    """The configured database without its password."""
    from urllib.parse import urlparse

    try:
        settings = get_settings()
    except Exception:  # noqa: BLE001
        return "unknown"
    if not settings.database_url:
        return f"SQLite under {settings.state_dir}"
    url = urlparse(settings.database_url)
    return f"{url.scheme}://{url.username or ''}@{url.hostname}:{url.port or 5432}{url.path}"


if __name__ == "__main__":
    sys.exit(main())
