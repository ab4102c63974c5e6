"""structlog set-up: console in development, JSON with ``IMPRINT_LOG_JSON=1``.

Call sites bind ``run_id``, ``candidate_id`` and ``block_id``; body text is never logged.
A processor drops keys that are known to carry private text, as a last guard."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

PRIVATE_KEYS = frozenset({"markdown", "text", "body", "question", "answer_text", "excerpt", "arguments"})


def _drop_private_text(_: Any, __: str, event_dict: dict[str, Any]) -> dict[str, Any]:
    for key in PRIVATE_KEYS & event_dict.keys():
        event_dict[key] = "<redacted>"
    return event_dict


def configure_logging(json: bool = False, level: str = "INFO") -> None:
    renderer: Any = structlog.processors.JSONRenderer() if json else structlog.dev.ConsoleRenderer(colors=False)
    logging.basicConfig(stream=sys.stderr, level=level.upper(), format="%(message)s")
    # FastStream sets its "faststream" logger to INFO when it is first imported (and then
    # logs "Received"/"Processed" for every poll): import it before setting the levels.
    import faststream  # noqa: F401
    for noisy in ("aiokafka", "kafka", "faststream", "uvicorn.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            _drop_private_text,
            structlog.processors.StackInfoRenderer(),
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )


def get_logger(name: str, **bound: Any) -> structlog.stdlib.BoundLogger:
    return structlog.get_logger(name).bind(**bound)
