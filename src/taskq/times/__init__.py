"""Instants, durations and the clock: parsing, formatting, the local zone.

Instants are integers of microseconds since the epoch, UTC; durations are
microseconds too. `timespec` parses and formats them (at(1) forms among
them), `zones` owns the one local zone, `clock` the daemon's wall and
monotonic clocks and how far to trust them. Pure but for reading the
clocks and the zone database; imports nothing of taskq but `errors` and
`text`.
"""
