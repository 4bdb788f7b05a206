"""Telling people that a task ended: the JSON event, mail and the hook.

`event` builds the event from a task's name, body and journal; `mail`
decides whether and whom to mail; `teller` is the daemon's thread that
runs the hook and sendmail under timeouts, off the loop.
"""
