"""Kafka topic names of the v1 contract."""

from enum import StrEnum


class Topic(StrEnum):
    RUNTIME = "imprint.runtime.v1"
    SOURCES = "imprint.sources.v1"
    PUBLICATION = "imprint.publication.v1"
    RUNS = "imprint.runs.v1"
    DELIVERY = "imprint.delivery.v1"
    CONTROL = "imprint.control.v1"
    DEADLETTER = "imprint.deadletter.v1"
