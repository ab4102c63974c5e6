"""The runtime journal service: ``application`` (RuntimeJournal), ``queries`` (read side),
``announcements`` (imprint.runs.v1 mapping), ``message_index`` (mutable lookup table).
Kafka wiring lives in ``consumer`` and ``__main__``."""
