"""The tests' network helpers: ``free_port`` (a port on 127.0.0.1 that nothing listens on now) and
``connections_to`` (the clients connected to a port)."""

from __future__ import annotations

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def connections_to(port: int) -> int:
    """Established TCP connections a server on 127.0.0.1:``port`` holds (its side of each, from
    ``/proc/net/tcp``): how a test knows that clients of another process have connected."""
    established = "01"
    count = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for row in table:
            local, _remote, state = row.split()[1:4]
            if state == established and int(local.rsplit(":", 1)[1], 16) == port:
                count += 1
    return count
