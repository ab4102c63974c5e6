"""The one way imprint starts its processes: ``imprint up`` and every test tier that runs
real parts (e2e, fault, integration, browser) go through :class:`Launcher`.

    launcher = Launcher(settings)                   # state folder: settings.state_dir
    launcher.start("publication")                   # python -m services.cli serve publication
    launcher.start("publication", name="publication-2")         # a second instance
    launcher.start("delivery", name="delivery-2",
                   settings=settings.model_copy(update={"http_port": 8081}))  # its own port
    launcher.start("relay", module="tests.fault.crash_relay",   # any ``python -m <module> <args>``
                   env={"IMPRINT_TEST_RELAY_PAUSE": "0.2"})      # that ends in a part's serve
    launcher.wait_ready()                           # every child alive and ready (or LaunchError)
    launcher.ready("journal")                       # the same check once, without waiting
    launcher.wait_exit("relay")                     # a crash wrapper's self-kill; its exit code
    launcher.kill("relay")                          # SIGKILL now; returns the exit code (-9)
    launcher.stop("delivery")                       # SIGTERM, then SIGKILL after ``grace`` seconds
    launcher.restart("delivery")                    # the same command, env and settings again
    launcher.log("publication")                     # what the child wrote so far (stdout+stderr)
    launcher.exited()                               # children that died on their own (to restart)
    launcher.stop_all()                             # every child, in reverse start order

(The test tiers use :class:`tests.support.stack.Stack`, this launcher as a context
manager that starts some parts, waits until they are ready and stops them all.)

Every child is known by its *name* (by default its part). For each one:

- its pid is in ``<state>/run/<name>.pid`` while it runs (removed when it is stopped);
- its stdout and stderr are appended to ``<state>/logs/<name>.log``;
- its environment is this process's environment without any ``IMPRINT_*`` variable, then
  :meth:`Settings.to_env` of the launcher's (or the child's own) settings, then ``env``:
  the child reads back exactly the settings it was given, never a stale variable;
- it is *ready* when Delivery answers ``GET /readyz`` with 200 on the child's own
  ``http_host:http_port``, or, for the other parts, when it has logged ``part running``
  (:func:`services.common.lifecycle.run_until_stopped`) since it was started (with a log
  level above INFO, when it has stayed alive for ``QUIET_READY_SECONDS``).

Processes are stopped and killed by their own pid only (never by name)."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from services.common.settings import Settings

PARTS = ("publication", "journal", "delivery")
"""imprint's parts, in the order ``imprint up`` starts them. Publication and the Journal each
relay their own log (``publication-relay`` and ``journal-relay`` run a relay on its own, for
a deployment that wants one: ``IMPRINT_PUBLICATION_RELAY=separate``)."""
READY_LINE = "part running"
"""What a consumer part logs (at INFO) once its broker has started (``run_until_stopped``)."""
QUIET_READY_SECONDS = 2.0
"""A part configured to log above INFO never logs READY_LINE: alive this long counts as ready."""


class LaunchError(RuntimeError):
    """A child exited while it was awaited, or did not become ready in time (the log tail is in the message)."""


@dataclass
class Child:
    """One started process: how it was started (to restart it the same way) and its Popen."""

    name: str
    part: str
    argv: list[str]
    env: dict[str, str]
    settings: Settings
    log_path: Path
    pid_path: Path
    process: subprocess.Popen[bytes]
    log_offset: int = 0
    """Size of the log when this process was started: readiness reads only what came after."""
    started_at: float = field(default_factory=time.monotonic)
    stopped: bool = False
    """Stopped or killed through the launcher (so not a part that exited on its own)."""
    seen_ready: bool = False

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def returncode(self) -> int | None:
        return self.process.poll()


def answers_ready(base_url: str) -> bool:
    """Whether the Delivery at ``base_url`` answers ``GET /readyz`` with 200 now (1 s at most)."""
    try:
        with urllib.request.urlopen(f"{base_url}/readyz", timeout=1) as response:  # noqa: S310 - loopback, our own
            return bool(response.status == 200)
    except OSError:
        return False


def wait_answering(base_url: str, process: subprocess.Popen[bytes], *, timeout: float = 60.0,
                   describe: Callable[[], str] = lambda: "") -> None:
    """Block until the Delivery ``process`` serves ``base_url`` (:func:`answers_ready`), for a
    Delivery started outside a :class:`Launcher`. Raises :class:`LaunchError`, with
    ``describe()`` (say, its log tail), when it exits meanwhile or the time runs out."""
    deadline = time.monotonic() + timeout
    while not answers_ready(base_url):
        if process.poll() is not None:
            raise LaunchError(f"delivery at {base_url} exited with {process.returncode}:\n{describe()}")
        if time.monotonic() > deadline:
            raise LaunchError(f"delivery at {base_url} not ready after {timeout:.0f}s:\n{describe()}")
        time.sleep(0.2)


def child_environment(settings: Settings, env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a child configured by ``settings``: the current environment
    minus every ``IMPRINT_*`` variable, plus ``settings.to_env()``, plus ``env``."""
    variables = {k: v for k, v in os.environ.items() if not k.startswith("IMPRINT_")}
    variables.update(settings.to_env())
    variables.update(env or {})
    return variables


class Launcher:
    """Starts, watches, stops and kills imprint's child processes (see the module docstring)."""

    def __init__(self, settings: Settings, *, grace: float = 15.0) -> None:
        self.settings = settings
        self.grace = grace
        self.run_dir = Path(settings.state_dir) / "run"
        self.log_dir = Path(settings.state_dir) / "logs"
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.children: dict[str, Child] = {}

    # ------------------------------------------------------------------ starting

    def start(self, part: str, *, name: str | None = None, module: str | None = None, args: Iterable[str] = (),
              env: Mapping[str, str] | None = None, settings: Settings | None = None) -> Child:
        """Start ``part`` as ``name`` (default: the part's name).

        Without ``module`` the child is the real ``python -m services.cli serve <part>``;
        with it, ``python -m <module> <args>`` (a wrapper that ends in the part's serve).
        ``settings`` replaces the launcher's settings for this child only; ``env`` is
        added on top of the derived environment. A live child of the same name is an error."""
        name = name or part
        running = self.children.get(name)
        if running is not None and running.returncode is None:
            raise LaunchError(f"{name} is already running (pid {running.pid})")
        child_settings = settings or self.settings
        argv = [sys.executable, "-m", module, *args] if module else [sys.executable, "-m", "services.cli", "serve", part]
        return self._spawn(name, part, argv, child_environment(child_settings, env), child_settings)

    def restart(self, name: str) -> Child:
        """Start ``name`` again with the command, environment and settings it was last started with."""
        old = self.children[name]
        if old.returncode is None:
            raise LaunchError(f"{name} is still running (pid {old.pid})")
        return self._spawn(name, old.part, old.argv, old.env, old.settings)

    def _spawn(self, name: str, part: str, argv: list[str], env: dict[str, str], settings: Settings) -> Child:
        log_path = self.log_dir / f"{name}.log"
        pid_path = self.run_dir / f"{name}.pid"
        with open(log_path, "ab") as log:  # the child keeps its own descriptor
            offset = log.tell()
            process = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL)
        pid_path.write_text(str(process.pid))
        child = Child(name, part, argv, env, settings, log_path, pid_path, process, log_offset=offset)
        self.children[name] = child
        return child

    # ------------------------------------------------------------------ watching

    @property
    def processes(self) -> dict[str, subprocess.Popen[bytes]]:
        """Every child's ``Popen`` by name (live or exited)."""
        return {name: child.process for name, child in self.children.items()}

    def log(self, name: str) -> str:
        """Everything ``name`` wrote to its log (all of its starts)."""
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def exited(self) -> list[Child]:
        """The children that have exited on their own (not stopped or killed through this launcher)."""
        return [child for child in self.children.values() if not child.stopped and child.returncode is not None]

    def ready(self, name: str) -> bool:
        """Whether ``name`` is running and ready now (see the module docstring); never blocks for long."""
        child = self.children[name]
        if child.returncode is not None:
            return False
        if not child.seen_ready:
            child.seen_ready = self._answers(child)
        return child.seen_ready

    @staticmethod
    def _answers(child: Child) -> bool:
        if child.part == "delivery":
            return answers_ready(f"http://{child.settings.http_host}:{child.settings.http_port}")
        if logging.getLevelName(child.settings.log_level.upper()) > logging.INFO:
            return time.monotonic() - child.started_at > QUIET_READY_SECONDS  # it does not log READY_LINE
        with open(child.log_path, "rb") as log:
            log.seek(child.log_offset)
            return READY_LINE.encode() in log.read()

    def wait_ready(self, names: Iterable[str] | None = None, timeout: float = 60.0) -> None:
        """Block until every named child (default: all not stopped or killed through the
        launcher) is ready. Raises :class:`LaunchError` with the child's log tail when one
        exits meanwhile or the time runs out."""
        waiting = list(names) if names is not None else [n for n, c in self.children.items() if not c.stopped]
        deadline = time.monotonic() + timeout
        while waiting:
            for name in list(waiting):
                child = self.children[name]
                if child.returncode is not None:
                    raise LaunchError(f"{name} exited with {child.returncode}:\n{self.tail(name)}")
                if self.ready(name):
                    waiting.remove(name)
            if waiting and time.monotonic() > deadline:
                raise LaunchError(f"not ready after {timeout:.0f}s: {', '.join(waiting)}\n"
                                  + "\n".join(self.tail(name) for name in waiting))
            if waiting:
                time.sleep(0.2)

    def wait_exit(self, name: str, timeout: float = 60.0) -> int:
        """Wait for ``name`` to exit on its own (a crash wrapper's self-kill); its exit code."""
        child = self.children[name]
        try:
            code = child.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise LaunchError(f"{name} did not exit within {timeout:.0f}s:\n{self.tail(name)}") from None
        child.pid_path.unlink(missing_ok=True)
        return code

    def tail(self, name: str, chars: int = 4000) -> str:
        return f"----- {name} log (tail) -----\n{self.log(name)[-chars:]}"

    # ------------------------------------------------------------------ stopping

    def stop(self, name: str, *, grace: float | None = None) -> int | None:
        """SIGTERM ``name``, SIGKILL it if it is still alive after ``grace`` seconds; its exit code
        (None when no such child was started)."""
        child = self.children.get(name)
        if child is None:
            return None
        child.stopped = True
        code = _terminate(child.process, self.grace if grace is None else grace)
        child.pid_path.unlink(missing_ok=True)
        return code

    def kill(self, name: str) -> int:
        """SIGKILL ``name`` now (the fault tiers' crash); its exit code, ``-SIGKILL`` when it was alive."""
        child = self.children[name]
        child.stopped = True
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGKILL)
        code = child.process.wait(timeout=10)
        child.pid_path.unlink(missing_ok=True)
        return code

    def stop_all(self, *, grace: float | None = None) -> None:
        """SIGTERM every live child at once (reverse start order), then wait; SIGKILL what outlives ``grace``."""
        children = list(reversed(self.children.values()))
        for child in children:
            child.stopped = True
            if child.process.poll() is None:
                child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + (self.grace if grace is None else grace)
        for child in children:
            _terminate(child.process, max(0.1, deadline - time.monotonic()), signalled=True)
            child.pid_path.unlink(missing_ok=True)


def _terminate(process: subprocess.Popen[bytes], grace: float, *, signalled: bool = False) -> int:
    if process.poll() is None and not signalled:
        process.send_signal(signal.SIGTERM)
    try:
        return process.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.wait()

