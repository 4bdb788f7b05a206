"""The spool: the on-disk format and its state machine.

The directory is the state, the name is the index, the body is the
request. This package owns every path of the layout and the protocol they
keep (`layout`), the words for states and phases (`states`), the names and
bodies (`task`), the renames between states (`transitions`, on the
primitives of `fsutil`), the one end of a task (`ending`), the journal,
keys, dependencies, pauses, the daemons' records in run/, the hints and
lookups by id (`hints`, `byid`), the one walk by state (`walk`), listings,
retention and fsck, cluster-wide permits (`permits`), and a shared
spool's members' drop (`drop`) and modes (`sharing`). No threads and no
command line: everything above reads and changes the spool through it.
"""
