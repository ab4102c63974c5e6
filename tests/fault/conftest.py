"""This tier runs the real processes on topics with several partitions (issue 12)."""

from __future__ import annotations

import pytest

from tests.conftest import several_partitions


@pytest.fixture
def topic_partitions() -> int:
    return several_partitions()
