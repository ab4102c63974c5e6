"""A front end on another origin: a second local HTTP server (its own port, so its own
origin) serving a page that imports the AI SDK's own client (``ai`` 5.x, 6.x, 7.x as
``tests/node`` installs them) through an import map, and the reader the Node tier runs
(``tests/node/ui_message_reader.mjs``). Chromium on that page reaching Delivery is a
real cross-origin request: the browser enforces CORS, not the test."""

from __future__ import annotations

import functools
import json
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.support.net import free_port

NODE_TIER = Path(__file__).resolve().parents[1] / "node"
NODE22 = NODE_TIER / "node_modules" / ".bin" / "node"
LINES = ("ai5", "ai6", "ai7")


@functools.cache
def import_map() -> str:
    """The page's import map (``tests/node/browser/import_map.mjs``), made once per session."""
    if not all((NODE_TIER / "node_modules" / line).exists() for line in LINES):
        raise RuntimeError("the AI SDK client is not installed: run `make node-deps` (npm ci --prefix tests/node)")
    done = subprocess.run([str(NODE22), "--conditions=browser", "--conditions=module", "browser/import_map.mjs",
                           *LINES], cwd=NODE_TIER, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"import map: {done.stderr}")
    return json.dumps(json.loads(done.stdout))


class _Handler(SimpleHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - the http.server spelling
        if self.path.split("?")[0] != "/":
            return super().do_GET()
        page = (NODE_TIER / "browser" / "reader.html").read_text().replace("IMPORT_MAP", import_map()).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(page)))
        self.end_headers()
        self.wfile.write(page)

    def log_message(self, format: str, *args: Any) -> None:
        pass


class FrontEnd:
    """The page's server on 127.0.0.1 and a port of its own (``origin``), in a thread."""

    def __init__(self) -> None:
        self.port = free_port()
        self.server = ThreadingHTTPServer(("127.0.0.1", self.port),
                                          functools.partial(_Handler, directory=str(NODE_TIER)))
        self.thread = threading.Thread(target=self.server.serve_forever, name=f"front-end-{self.port}", daemon=True)

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> FrontEnd:
        import_map()
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
