"""The runtime journal service: :mod:`.application` (RuntimeJournal), :mod:`.run_leases` (its run
leases, X10), :mod:`.queries` (read side), :mod:`.relay` (announces the log on imprint.runs.v1,
mapped by :mod:`imprint.journal.announcements`), :mod:`.message_index` (mutable lookup table),
:mod:`.leases` (the lease sweeper, X10), :mod:`.retention` (the retention sweeper, X8). Kafka
wiring lives in :mod:`.consumer` and :mod:`.service`."""
