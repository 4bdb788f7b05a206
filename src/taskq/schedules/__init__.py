"""Recurring schedules: when slots fall, a schedule's files, occurrences made.

`slots` is pure (cron expressions and intervals in a zone) and `rules` the
union of several with their exclusions; `store` owns SPOOL/schedules/NAME/;
`materialise` turns slots into ordinary tasks (catch-up, overlap, the next
occurrence made ahead), `following` does it for --every-after, `ends`
records how occurrences ended (failures in a row, the auto-pause) and
`asked` makes the occurrences asked for by hand (run now, backfill);
`view` is what `taskq schedule show` reads.
"""
