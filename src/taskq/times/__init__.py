"""Instants, durations and the clock: parsing, formatting, the local zone.

Instants are integers of microseconds since the epoch, UTC; durations are
microseconds too. `timespec` parses and formats them in the forms taskq
writes (no zone but UTC) and reads the wall clock; `atgrammar` reads the
words of at(1)'s time grammar and `when` gives a WHEN (those words,
ISO-8601, @EPOCH) its instant; `zones` owns the one local zone; `clock`
the daemon's monotonic clock and how far to trust the wall clock. Pure but for reading the
clocks and the zone database; imports nothing of taskq but `errors` and
`text`.
"""
