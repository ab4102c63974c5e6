"""``make bench`` / ``python -m bench``: imprint end to end beside its floors (transport,
commit, naive peer), cost growth, paced latency, SSE fan-out and replay, driven only
through Kafka, HTTP and the CLI. Measures and reports; never asserts. See
``bench/README.md``."""
