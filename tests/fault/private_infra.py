"""A PostgreSQL server and a Kafka (one broker or a 3-broker KRaft cluster) of the test's
own, started with the project's ``deploy/local`` scripts on free loopback ports and a
private state dir, so a test may crash and restart them. The shared servers on
9092/5432 are never touched: every command here runs with this object's
``IMPRINT_STATE_DIR``, ports and pid files.

``kill_postgres`` is ``pg_ctl -m immediate stop`` (every server process quits at once,
no checkpoint: crash recovery on the next start); ``kill_kafka`` SIGKILLs a broker."""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import uuid
from pathlib import Path

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "local"
ROOT = DEPLOY.parents[1]


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_run(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports, below Linux's ephemeral range
    (32768+), so no outgoing connection can take one between this check and the server's bind."""
    rng = random.Random()
    for _ in range(500):
        base = rng.randrange(20000, 32000 - n)
        if all(_free(base + i) for i in range(n)):
            return base
    raise RuntimeError(f"no run of {n} free ports")


class PrivateInfra:
    def __init__(self, *, brokers: int = 1, partitions: int = 3, state_dir: Path | None = None) -> None:
        self.brokers = brokers
        self.partitions = partitions
        self.state_dir = state_dir or ROOT / ".imprint" / "private" / uuid.uuid4().hex[:10]
        base = free_port_run(1 + 2 * brokers)  # one run: the three kinds of port never overlap
        self.pg_port, self.kafka_port, self.controller_port = base, base + 1, base + 1 + brokers
        self.kills: list[str] = []

    # ------------------------------------------------------------------ addresses
    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{self.kafka_port + i}" for i in range(self.brokers))

    @property
    def database_url(self) -> str:
        return f"postgresql://imprint:imprint@127.0.0.1:{self.pg_port}/imprint_test"

    # ------------------------------------------------------------------- commands
    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update(IMPRINT_STATE_DIR=str(self.state_dir), PG_PORT=str(self.pg_port),
                   KAFKA_PORT=str(self.kafka_port), KAFKA_CONTROLLER_PORT=str(self.controller_port),
                   KAFKA_BROKERS=str(self.brokers), KAFKA_TOPIC_PARTITIONS=str(self.partitions))
        return env

    def _script(self, script: str, *args: str, timeout: float = 240, attempts: int = 1) -> None:
        """Run a deploy/local script; ``attempts`` > 1 for the idempotent start commands (on
        a loaded machine the admin tool that checks the topics can time out once)."""
        for attempt in range(1, attempts + 1):
            result = subprocess.run(["bash", str(DEPLOY / script), *args], env=self._env(), capture_output=True,
                                    text=True, timeout=timeout)
            if result.returncode == 0:
                return
            if attempt == attempts:
                raise RuntimeError(f"{script} {' '.join(args)} failed ({result.returncode}):\n"
                                   f"{result.stdout[-2000:]}\n{result.stderr[-4000:]}")

    @property
    def _kafka(self) -> str:
        return "kafka-cluster.sh" if self.brokers > 1 else "kafka.sh"

    def up(self) -> PrivateInfra:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._script("postgres.sh", "up", attempts=2)
            if self.brokers > 1:
                self._script("kafka.sh", "jars")
            self._script(self._kafka, "up", attempts=3)
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Stop both servers (by their pid files) and delete their data."""
        errors = []
        for script in (self._kafka, "postgres.sh"):
            try:
                self._script(script, "reset")
            except Exception as error:  # keep going: the other server must stop too
                errors.append(str(error))
        if errors:
            raise RuntimeError("\n".join(errors))
        shutil.rmtree(self.state_dir, ignore_errors=True)

    def kill_postgres(self) -> None:
        self._script("postgres.sh", "kill")
        self.kills.append("postgres")

    def start_postgres(self) -> None:
        self._script("postgres.sh", "up", attempts=2)

    def kill_kafka(self, node: int | None = None) -> None:
        if self.brokers > 1:
            assert node is not None, "name the node of the cluster to kill"
            self._script(self._kafka, "kill", str(node))
            self.kills.append(f"kafka-{node}")
        else:
            self._script(self._kafka, "kill")
            self.kills.append("kafka")

    def start_kafka(self, node: int | None = None) -> None:
        if self.brokers > 1:
            assert node is not None
            self._script(self._kafka, "start", str(node), attempts=3)
        else:
            self._script(self._kafka, "up", attempts=3)

    def log(self, name: str) -> str:
        path = self.state_dir / "logs" / name
        return path.read_text(errors="replace") if path.exists() else ""
