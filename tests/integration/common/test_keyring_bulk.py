"""``keys_for``: many conversation keys in one read (the relay opens a batch's bodies with
it). A destroyed or missing key reads as ``None``, exactly as ``key_for`` reads it (X8)."""

from __future__ import annotations

import pytest

from services.common.backends import Backend


@pytest.mark.rule("X8")
def test_keys_for_reads_like_key_for(backend: Backend) -> None:
    ring = backend.keyring()
    try:
        names = [f"conv-{i}" for i in range(3)] + ['odd "name" é']
        keys = {name: ring.key_for(name, create=True) for name in names}
        ring.destroy("conv-1")
        found = ring.keys_for([*names, "never-keyed", "conv-0"])
        assert found == {"conv-0": keys["conv-0"], "conv-1": None, "conv-2": keys["conv-2"],
                         'odd "name" é': keys['odd "name" é'], "never-keyed": None}
        assert all(found[name] == ring.key_for(name) for name in found)
        assert ring.keys_for([]) == {}
    finally:
        ring.close()
