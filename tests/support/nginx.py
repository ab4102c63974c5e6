"""A real reverse proxy in front of Delivery: Debian's nginx (``/usr/sbin/nginx``, never a
download), started on a free 127.0.0.1 port with its own prefix and configuration under the
test's folder, and stopped by its own pid (its master's pid file).

Two configurations: :data:`BUFFERING`, what a proxy left as it comes (response buffering on,
Delivery's ``X-Accel-Buffering: no`` ignored as many proxies and CDNs do, gzip on for every
type, a read timeout shorter than the keep-alive interval), and the README's recommended one
(:func:`recommended_locations`, read from README.md itself so the test proves what the README says)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

import httpx

from tests.support.net import free_port

NGINX = os.environ.get("IMPRINT_NGINX", "/usr/sbin/nginx")
README = Path(__file__).resolve().parents[2] / "README.md"

BUFFERING = """
        proxy_pass http://delivery;
        proxy_buffering on;
        proxy_ignore_headers X-Accel-Buffering;
        proxy_read_timeout 2s;
        gzip on;
        gzip_proxied any;
        gzip_min_length 0;
        gzip_types text/event-stream application/json;
"""
"""A proxy that buffers: what the path checks must catch, each with the setting to change."""


def recommended_locations() -> str:
    """The ``location`` blocks of the README's recommended nginx configuration (its ``nginx``
    code block, between ``# imprint: begin`` and ``# imprint: end``)."""
    block = re.search(r"```nginx\n(.*?)```", README.read_text(), re.DOTALL)
    assert block, "README.md has no ```nginx block"
    inner = re.search(r"# imprint: begin\n(.*?)# imprint: end", block.group(1), re.DOTALL)
    assert inner, "the README's nginx block has no '# imprint: begin' … '# imprint: end' part"
    return inner.group(1)


class Nginx:
    """nginx on a free port proxying to ``upstream`` (host:port) with ``locations`` (the
    body of ``server {}``; ``proxy_pass http://delivery`` names the upstream)."""

    def __init__(self, prefix: Path, upstream: str, locations: str, *, keepalive_seconds: float) -> None:
        self.prefix, self.upstream, self.locations = prefix, upstream, locations
        self.port = free_port()
        self.keepalive = keepalive_seconds
        self.pid: int | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def conf(self) -> str:
        # as root, nginx's workers would run as nobody, who cannot enter the test's folder
        user = "user root;" if os.geteuid() == 0 else ""
        return f"""
{user}
daemon on;
pid {self.prefix}/nginx.pid;
error_log {self.prefix}/error.log info;
worker_processes 1;
events {{ worker_connections 256; }}
http {{
    access_log off;
    client_body_temp_path {self.prefix}/body;
    proxy_temp_path {self.prefix}/proxy;
    fastcgi_temp_path {self.prefix}/fastcgi;
    uwsgi_temp_path {self.prefix}/uwsgi;
    scgi_temp_path {self.prefix}/scgi;
    upstream delivery {{ server {self.upstream}; }}
    server {{
        listen 127.0.0.1:{self.port};
        location / {{
{self.locations}
        }}
    }}
}}
"""

    def __enter__(self) -> Nginx:
        if not os.path.exists(NGINX):
            raise RuntimeError(f"no nginx at {NGINX}: apt-get install -y nginx-light (make system-deps)")
        self.prefix.mkdir(parents=True, exist_ok=True)
        conf = self.prefix / "nginx.conf"
        conf.write_text(self.conf())
        done = subprocess.run([NGINX, "-p", str(self.prefix), "-c", str(conf)], capture_output=True, text=True,
                              timeout=30)
        assert done.returncode == 0, f"nginx did not start: {done.stderr}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            pid_file = self.prefix / "nginx.pid"
            if pid_file.exists() and pid_file.read_text().strip():
                self.pid = int(pid_file.read_text().strip())
                try:
                    httpx.get(self.url + "/healthz", timeout=2)
                    return self
                except httpx.HTTPError:
                    pass
            time.sleep(0.1)
        raise AssertionError(f"nginx never answered on {self.url}: {self.log()}")

    def log(self) -> str:
        path = self.prefix / "error.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self.pid is None:
            return
        try:
            os.kill(self.pid, signal.SIGTERM)  # the master's fast stop: it ends its workers, open streams too
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
        os.kill(self.pid, signal.SIGKILL)
