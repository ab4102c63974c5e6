"""The runtime journal service: ``application`` (RuntimeJournal), ``queries`` (read side),
``relay`` (announces the log on imprint.runs.v1, mapped by ``imprint.journal.announcements``),
``message_index`` (mutable lookup table). Kafka wiring lives in ``consumer`` and ``__main__``."""
