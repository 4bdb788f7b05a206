"""What submitters and operators do to a spool: submit, cancel, retry, wait.

A request from options or a batch line (`request`, `batch`), what submit
records of the submitter (`environment`), durable acceptance (`submit`),
backpressure (`limits`), and the operator's changes of tasks
(`operations`) and fencing checks (`fence`); what a member of a shared
spool does instead, through its drop (`member`). Everything here runs in a
short-lived command's process, so its import cost is its start-up time.
"""
