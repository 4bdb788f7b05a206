"""Text that every layer shares, below even the times.

Patterns compiled on first use (`lazyre`), so that a command pays only for
the patterns it matches against.
"""
