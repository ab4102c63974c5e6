"""imprint: the domain library.

Pure rules and value objects live here; nothing in this package opens a socket,
a database connection or an HTTP server. Adapters live in ``services``.
"""
