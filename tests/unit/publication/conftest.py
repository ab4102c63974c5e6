"""Fixtures for the Publication core tests."""

from __future__ import annotations

import pytest
from pub_helpers import new_run, registry

from imprint.publication import PublicationRun, SourceStanding


@pytest.fixture
def run() -> PublicationRun:
    return new_run()


@pytest.fixture
def standing() -> SourceStanding:
    return registry()
