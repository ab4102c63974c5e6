"""Runs parts of the stack as real processes (``python -m services.cli serve <part>``)
for the e2e and fault tiers, configured by one test's isolated settings."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from services.common.settings import Settings

ALL_PARTS = ("publication", "relay", "journal", "delivery")


def environment(settings: Settings) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("IMPRINT_")}
    env.update(
        IMPRINT_KAFKA_BOOTSTRAP=settings.kafka_bootstrap,
        IMPRINT_STATE_DIR=str(settings.state_dir),
        IMPRINT_TOPIC_PREFIX=settings.topic_prefix,
        IMPRINT_GROUP_PREFIX=settings.group_prefix,
        IMPRINT_HTTP_HOST=settings.http_host,
        IMPRINT_HTTP_PORT=str(settings.http_port),
        IMPRINT_AUTH_SECRET=settings.auth_secret.get_secret_value(),
        IMPRINT_LOG_LEVEL="INFO",
        IMPRINT_RETENTION_SECONDS=str(settings.retention_seconds),
        IMPRINT_RETENTION_SWEEP_SECONDS=str(settings.retention_sweep_seconds),
    )
    if settings.database_url:
        env["IMPRINT_DATABASE_URL"] = settings.database_url
    if settings.database_schema:
        env["IMPRINT_DATABASE_SCHEMA"] = settings.database_schema
    return env


class Stack:
    def __init__(self, settings: Settings, parts: tuple[str, ...] = ALL_PARTS) -> None:
        self.settings = settings
        self.parts = parts
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self.log_dir = Path(settings.state_dir) / "logs"
        self.log_dir.mkdir(parents=True, exist_ok=True)

    @property
    def base_url(self) -> str:
        return f"http://{self.settings.http_host}:{self.settings.http_port}"

    def start(self, part: str) -> None:
        log = open(self.log_dir / f"{part}.log", "ab")  # noqa: SIM115
        self.processes[part] = subprocess.Popen(
            [sys.executable, "-m", "services.cli", "serve", part],
            env=environment(self.settings), stdout=log, stderr=subprocess.STDOUT,
        )

    def stop(self, part: str, *, kill: bool = False, timeout: float = 20) -> None:
        process = self.processes.pop(part, None)
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()

    def log(self, part: str) -> str:
        path = self.log_dir / f"{part}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for part, process in self.processes.items():
                if process.poll() is not None:
                    raise AssertionError(f"{part} exited with {process.returncode}:\n{self.log(part)[-4000:]}")
            if "delivery" not in self.processes and time.monotonic() > deadline - timeout + 2:
                return  # no HTTP to probe: alive for two seconds is ready enough
            try:
                if httpx.get(f"{self.base_url}/readyz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise AssertionError("delivery never became ready:\n" + self.log("delivery")[-4000:])

    def __enter__(self) -> Stack:
        for part in self.parts:
            self.start(part)
        self.wait_ready()
        return self

    def wait_for_run(self, run_id: str, token: str, timeout: float = 30) -> dict:
        """Poll ``GET /v1/runs/{run_id}`` until Delivery knows the run (it learns runs from imprint.runs.v1)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            response = httpx.get(f"{self.base_url}/v1/runs/{run_id}", headers={"Authorization": f"Bearer {token}"})
            if response.status_code == 200:
                return response.json()
            time.sleep(0.2)
        raise AssertionError(f"delivery never learned run {run_id}:\n" + self.log("journal")[-3000:])

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        for part in list(self.processes):
            self.stop(part)
        if e is not None:
            for part in self.parts:
                print(f"----- {part} log (tail) -----\n{self.log(part)[-3000:]}", file=sys.stderr)
