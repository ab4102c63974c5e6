"""Composition roots: each subpackage wires a consumer, a store and a producer
around the pure rules in ``imprint``."""
