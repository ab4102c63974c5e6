"""The ``imprint`` command: one entry point for every part and tool of the stack."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import subprocess
import sys
from pathlib import Path

from services.common.observability import configure_logging
from services.common.settings import get_settings

PARTS = {
    "publication": "services.publication.service",
    "relay": "services.relay.service",
    "journal": "services.journal.service",
    "delivery": "services.delivery.service",
}
DEPLOY_LOCAL = Path(__file__).resolve().parent.parent / "deploy" / "local"


def _serve(args: argparse.Namespace) -> int:
    module = importlib.import_module(PARTS[args.part])
    asyncio.run(module.serve(get_settings()))
    return 0


def _up(args: argparse.Namespace) -> int:
    from services.stack import run_stack

    return run_stack(get_settings(), demo=args.demo, exit_after_demo=args.exit_after_demo)


def _demo(args: argparse.Namespace) -> int:
    from services.demo import run_demo

    return asyncio.run(run_demo(get_settings(), watch=not args.no_watch))


def _token(args: argparse.Namespace) -> int:
    from services.delivery.auth import mint_token

    print(mint_token(get_settings(), args.account, ttl_seconds=args.ttl))
    return 0


def _infra(args: argparse.Namespace) -> int:
    return subprocess.call(["bash", str(DEPLOY_LOCAL / "infra.sh"), args.action])


def _replay(args: argparse.Namespace) -> int:
    from services.recovery.cli import replay

    return replay(get_settings(), run_id=args.run, verify=args.verify)


def _recover(args: argparse.Namespace) -> int:
    from services.recovery.cli import recover

    return recover(get_settings(), run_id=args.run, apply=args.apply)


def _export(args: argparse.Namespace) -> int:
    from services.recovery.cli import export

    return export(get_settings(), run_id=args.run)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="imprint", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser("serve", help="run one part of the stack in the foreground")
    serve.add_argument("part", choices=sorted(PARTS))
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
    token.add_argument("--ttl", type=int, default=None)
    token.set_defaults(func=_token)

    infra = sub.add_parser("infra", help="start or stop the local Kafka and PostgreSQL (deploy/local)")
    infra.add_argument("action", choices=["up", "down", "reset", "status"])
    infra.set_defaults(func=_infra)

    replay = sub.add_parser("replay", help="rebuild answer views from the Publication log (R1)")
    replay.add_argument("--run")
    replay.add_argument("--verify", action="store_true")
    replay.set_defaults(func=_replay)

    recover = sub.add_parser("recover", help="report (and with --apply reconcile) recovery state (R7)")
    recover.add_argument("--run")
    recover.add_argument("--apply", action="store_true")
    recover.set_defaults(func=_recover)

    export = sub.add_parser("export", help="export a run's committed history for audit (P21)")
    export.add_argument("--run", required=True)
    export.set_defaults(func=_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    settings = get_settings()
    configure_logging(json=settings.log_json, level=settings.log_level)
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
