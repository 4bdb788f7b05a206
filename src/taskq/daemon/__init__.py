"""The daemon: its loop and the small parts it is composed of.

`loop` orders the parts; `wiring` makes them and hands each the others it
reports to; `inhand` (the attempts prepared and running), `wakeplan` (the
loop's timers, how long it sleeps) and `lifecycle` (the parts started and
stopped) are the loop's own state and steps, composed into it the same way.
Each other module is one part with one job (see the map in
docs/design.md): wake-ups, the clock guard, dispatch, starting, the
attempts, recovery, settling, policy, group commit, housekeeping, a shared
spool's intake (pickup, intake) and the threads that tell of ends and
release dependents.
"""
