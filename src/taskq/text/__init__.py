"""Text that every layer shares, below even the times.

Patterns compiled on first use (`lazyre`), so that a command pays only for
the patterns it matches against; and the one way untrusted text is shown
in log lines, `.reason` files and listings (`quote`); a command as
listings show it, one line a shell would read, through quote (`shell`).
"""
