"""Adapters shared by the services: Kafka plumbing and event store environments."""
