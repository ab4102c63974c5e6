"""The one way imprint starts its processes: ``imprint up``, every test tier that runs
real parts (e2e, fault, integration, browser) and the bench go through :class:`Launcher`.

    launcher = Launcher(settings)                   # state folder: settings.state_dir
    launcher.start("publication")                   # python -m services.cli serve publication
    launcher.start("publication", name="publication-2")         # a second instance
    launcher.start("delivery", name="delivery-2",
                   settings=settings.model_copy(update={"http_port": 8081}))  # its own port
    launcher.start("journal", settings=settings.model_copy(update={"log_level": "WARNING"}))
    launcher.start("relay", module="tests.fault.crash_relay",   # any ``python -m <module> <args>``
                   env={"IMPRINT_TEST_RELAY_PAUSE": "0.2"})      # that ends in a part's serve
    launcher.start("delivery", wrap=["py-spy", "record", "-o", "out.txt", "--"])  # under a profiler
    launcher.start("relay", cwd=tree, env={"PYTHONPATH": f"{tree}:{tree}/libs"})  # another checkout
    launcher.start_command("replay", "services.cli", ["replay"],  # not a part: any module, its
                           discard_stdout=True)                  # stdout to /dev/null if unread
    launcher.wait_ready()                           # every part alive and ready (or LaunchError)
    launcher.ready("journal")                       # the same check once, without waiting
    launcher.wait_exit("replay")                    # a command's or a crash wrapper's exit code
    launcher.children["replay"].usage               # its rusage once reaped (CPU, ru_maxrss)
    launcher.children["delivery"].target_pid        # the part's own process (under a wrapper too)
    launcher.kill("relay")                          # SIGKILL now; returns the exit code (-9)
    launcher.stop("delivery")                       # SIGTERM, then SIGKILL after ``grace`` seconds
    launcher.restart("delivery")                    # the same command, env and settings again
    launcher.log("publication")                     # what the child wrote so far (stdout+stderr)
    launcher.exited()                               # children that died on their own (to restart)
    launcher.stop_all()                             # every child, in reverse start order

(The test tiers use :class:`tests.support.stack.Stack`, this launcher as a context
manager that starts some parts, waits until they are ready and stops them all; the bench's
:class:`bench.procs.Stack` measures the CPU and RSS of the children of one.)

Every child is known by its *name* (by default its part). For each one:

- its pid (the wrapper's, for a wrapped child) is in ``<state>/run/<name>.pid`` while it
  runs (removed when it is stopped);
- its stdout and stderr are appended to ``<state>/logs/<name>.log`` (only its stderr with
  ``discard_stdout``);
- its environment is this process's environment without any ``IMPRINT_*`` variable, then
  :meth:`Settings.to_env` of the launcher's (or the child's own) settings, then ``env``:
  the child reads back exactly the settings it was given, never a stale variable; a child's
  log level is its settings' ``log_level``;
- a part is *ready* when Delivery answers ``GET /readyz`` with 200 on the child's own
  ``http_host:http_port``, or, for the other parts, when it has logged ``part running``
  (:func:`services.common.lifecycle.run_until_stopped`) since it was started (with a log
  level above INFO, when it has stayed alive for ``QUIET_READY_SECONDS``); a command
  (:meth:`Launcher.start_command`) is ready while it runs and is not awaited by default.

A *wrapped* child (``wrap``: a command prefix ending in ``--``, like ``py-spy record … --``)
runs the part as the wrapper's child. Its ``target_pid`` is that process; stopping it sends
SIGTERM there, so the wrapper sees its target end, finishes (a profiler writes its output)
and exits; ``grace`` then bounds the wait for the wrapper.

The launcher reaps its children itself (``os.wait4``), so each child's exit code and
resource usage stay known. Processes are stopped and killed by their own pid only (never
by name)."""

from __future__ import annotations

import logging
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from services.common.processes import child_pids, parent_of
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
    """One started process: how it was started (to restart it the same way), its Popen, and
    its exit code and resource usage once the launcher has reaped it."""

    name: str
    part: str | None
    """The part it serves; ``None`` for a command (:meth:`Launcher.start_command`)."""
    argv: list[str]
    """The whole command line, a wrapper's prefix included."""
    env: dict[str, str]
    settings: Settings
    log_path: Path
    pid_path: Path
    process: subprocess.Popen[bytes]
    cwd: Path | None = None
    wrapped: bool = False
    """Started under a wrapper (``wrap``): the part is the wrapper's child, see :attr:`target_pid`."""
    discard_stdout: bool = False
    log_offset: int = 0
    """Size of the log when this process was started: readiness reads only what came after."""
    started_at: float = field(default_factory=time.monotonic)
    stopped: bool = False
    """Stopped or killed through the launcher (so not a part that exited on its own)."""
    seen_ready: bool = False
    usage: resource.struct_rusage | None = None
    """What ``os.wait4`` reported when the launcher reaped it: its CPU time and that of the
    processes it waited for, ``ru_maxrss``. ``None`` while it runs (or when something else
    reaped it through :attr:`process`)."""
    _reaping: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _target: int | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        """The process the launcher started (the wrapper, for a wrapped child)."""
        return self.process.pid

    @property
    def target_pid(self) -> int | None:
        """The process that runs the child's command: :attr:`pid`, or for a wrapped child the
        wrapper's child (``None`` until the wrapper has started it, or once it has ended).
        A part's CPU and RSS are read here."""
        if not self.wrapped:
            return self.pid
        if self._target is None or parent_of(self._target) != self.pid:
            started = child_pids(self.pid)
            self._target = started[0] if started else None
        return self._target

    @property
    def returncode(self) -> int | None:
        """Its exit code once it has exited (reaping it, which records :attr:`usage`), else ``None``."""
        with self._reaping:
            if self.process.returncode is None:
                try:
                    pid, status, usage = os.wait4(self.process.pid, os.WNOHANG)
                except ChildProcessError:  # reaped through the Popen by its other users
                    return self.process.poll()
                if pid:
                    self.process.returncode = os.waitstatus_to_exitcode(status)
                    self.usage = usage
            return self.process.returncode

    def wait(self, timeout: float | None) -> int | None:
        """Its exit code once it exits, within ``timeout`` seconds (``None``: however long it
        takes); ``None`` when it is still running then. Checked at most 20 ms apart."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = 0.001
        while (code := self.returncode) is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return None
            time.sleep(pause if left is None else min(pause, left))
            pause = min(2 * pause, 0.02)
        return code

    def signal(self, number: int, *, wrapper: bool = False) -> None:
        """Send ``number`` to :attr:`target_pid` (to the wrapper while it has no child yet), or
        with ``wrapper`` to the process the launcher started, unless the child was reaped."""
        with self._reaping:  # a reaped pid may already be another process's
            if self.process.returncode is not None:
                return
            try:
                os.kill(self.pid if wrapper else (self.target_pid or self.pid), number)
            except ProcessLookupError:  # the wrapper's child ended meanwhile
                pass


def answers_ready(base_url: str) -> bool:
    """Whether the Delivery at ``base_url`` answers ``GET /readyz`` with 200 now (1 s at most)."""
    try:
        with urllib.request.urlopen(f"{base_url}/readyz", timeout=1) as response:  # noqa: S310 - loopback, our own
            return bool(response.status == 200)
    except OSError:
        return False


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
              env: Mapping[str, str] | None = None, settings: Settings | None = None,
              wrap: Sequence[str] = (), cwd: Path | None = None) -> Child:
        """Start ``part`` as ``name`` (default: the part's name).

        Without ``module`` the child is the real ``python -m services.cli serve <part>``;
        with it, ``python -m <module> <args>`` (a stand-in that ends in the part's serve, like
        the fault tier's crash relay).
        ``settings`` replaces the launcher's settings for this child only; ``env`` is
        added on top of the derived environment. ``wrap`` is a command prefix the part runs
        under (``[py_spy, "record", …, "--"]``; see the module docstring); ``cwd`` the folder
        it starts in (default: this process's). A live child of the same name is an error."""
        name = name or part
        child_settings = settings or self.settings
        argv = [sys.executable, "-m", module, *args] if module else [sys.executable, "-m", "services.cli", "serve", part]
        return self._spawn(name, part, [*wrap, *argv], child_environment(child_settings, env), child_settings,
                           cwd=cwd, wrapped=bool(wrap))

    def start_command(self, name: str, module: str, args: Iterable[str] = (), *,
                      env: Mapping[str, str] | None = None, settings: Settings | None = None,
                      discard_stdout: bool = False) -> Child:
        """Start ``python -m <module> <args>`` as ``name``: a child that is not one of imprint's
        parts (``imprint replay``, a bench's helper process), configured like a part. It is
        ready while it runs and :meth:`wait_ready` does not wait for it unless named; wait
        for its end with :meth:`wait_exit`. ``discard_stdout`` sends its stdout to /dev/null
        (an output nobody reads, which would only fill the log); its stderr is still logged."""
        child_settings = settings or self.settings
        return self._spawn(name, None, [sys.executable, "-m", module, *args], child_environment(child_settings, env),
                           child_settings, discard_stdout=discard_stdout)

    def restart(self, name: str) -> Child:
        """Start ``name`` again with the command, environment and settings it was last started with."""
        old = self.children[name]
        return self._spawn(name, old.part, old.argv, old.env, old.settings, cwd=old.cwd, wrapped=old.wrapped,
                           discard_stdout=old.discard_stdout)

    def _spawn(self, name: str, part: str | None, argv: list[str], env: dict[str, str], settings: Settings, *,
               cwd: Path | None = None, wrapped: bool = False, discard_stdout: bool = False) -> Child:
        running = self.children.get(name)
        if running is not None and running.returncode is None:
            raise LaunchError(f"{name} is still running (pid {running.pid})")
        log_path = self.log_dir / f"{name}.log"
        pid_path = self.run_dir / f"{name}.pid"
        with open(log_path, "ab") as log:  # the child keeps its own descriptor
            offset = log.tell()
            process = subprocess.Popen(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL if discard_stdout else log,
                                       stderr=log if discard_stdout else subprocess.STDOUT, stdin=subprocess.DEVNULL)
        pid_path.write_text(str(process.pid))
        child = Child(name, part, argv, env, settings, log_path, pid_path, process, cwd=cwd, wrapped=wrapped,
                      discard_stdout=discard_stdout, log_offset=offset)
        self.children[name] = child
        return child

    # ------------------------------------------------------------------ watching

    @property
    def processes(self) -> dict[str, subprocess.Popen[bytes]]:
        """Every child's ``Popen`` by name (live or exited). A child's exit read here is lost to
        :attr:`Child.usage`; :attr:`Child.returncode` keeps it."""
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
        if child.part is None:
            return True
        if child.part == "delivery":
            return answers_ready(f"http://{child.settings.http_host}:{child.settings.http_port}")
        if logging.getLevelName(child.settings.log_level.upper()) > logging.INFO:
            return time.monotonic() - child.started_at > QUIET_READY_SECONDS  # it does not log READY_LINE
        with open(child.log_path, "rb") as log:
            log.seek(child.log_offset)
            return READY_LINE.encode() in log.read()

    def wait_ready(self, names: Iterable[str] | None = None, timeout: float = 60.0) -> None:
        """Block until every named child (default: every part not stopped or killed through
        the launcher) is ready. Raises :class:`LaunchError` with the child's log tail when one
        exits meanwhile or the time runs out."""
        waiting = list(names) if names is not None else [
            n for n, c in self.children.items() if not c.stopped and c.part is not None]
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

    def wait_exit(self, name: str, timeout: float | None = 60.0) -> int:
        """Wait for ``name`` to exit on its own (a command's end, a crash wrapper's self-kill);
        its exit code. ``timeout=None`` waits however long it takes."""
        child = self.children[name]
        code = child.wait(timeout)
        if code is None:
            raise LaunchError(f"{name} did not exit within {timeout:.0f}s:\n{self.tail(name)}")
        child.pid_path.unlink(missing_ok=True)
        return code

    def tail(self, name: str, chars: int = 4000) -> str:
        return f"----- {name} log (tail) -----\n{self.log(name)[-chars:]}"

    # ------------------------------------------------------------------ stopping

    def stop(self, name: str, *, grace: float | None = None) -> int | None:
        """SIGTERM ``name`` (its target, when wrapped), SIGKILL it if it is still alive after
        ``grace`` seconds; its exit code (None when no such child was started)."""
        child = self.children.get(name)
        if child is None:
            return None
        child.stopped = True
        child.signal(signal.SIGTERM)
        return _reap(child, self.grace if grace is None else grace)

    def kill(self, name: str) -> int:
        """SIGKILL ``name`` now (the fault tiers' crash; a wrapped child's target and wrapper
        both); its exit code, ``-SIGKILL`` when it was alive."""
        child = self.children[name]
        child.stopped = True
        _kill(child)
        code = child.wait(10)
        if code is None:
            raise LaunchError(f"{name} outlived SIGKILL for 10 s")
        child.pid_path.unlink(missing_ok=True)
        return code

    def stop_all(self, *, grace: float | None = None) -> None:
        """SIGTERM every live child at once (reverse start order), then wait; SIGKILL what outlives ``grace``."""
        children = list(reversed(self.children.values()))
        for child in children:
            child.stopped = True
            child.signal(signal.SIGTERM)
        deadline = time.monotonic() + (self.grace if grace is None else grace)
        for child in children:
            _reap(child, max(0.1, deadline - time.monotonic()))


def _kill(child: Child) -> None:
    child.signal(signal.SIGKILL)
    if child.wrapped:
        child.signal(signal.SIGKILL, wrapper=True)


def _reap(child: Child, grace: float) -> int:
    """Wait ``grace`` seconds for a signalled ``child`` to exit, SIGKILL it if it has not; its exit code."""
    code = child.wait(grace)
    if code is None:
        _kill(child)
        code = child.wait(None)
    child.pid_path.unlink(missing_ok=True)
    assert code is not None
    return code
