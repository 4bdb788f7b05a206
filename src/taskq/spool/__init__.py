"""The spool: the on-disk format and its state machine.

The directory is the state, the name is the index, the body is the
request. This package owns every path of the layout (`layout`), the names
and bodies (`task`), the renames between states (`transitions`, on the
primitives of `fsutil`), the journal, keys, dependencies, pauses, the
daemons' records in run/, lookups by id (`byid`), listings, retention and
fsck, and a shared spool's members' drop (`drop`) and modes (`sharing`).
No threads and no command line: everything above reads and changes the
spool through it.
"""
