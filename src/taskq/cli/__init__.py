"""The command line: click commands, their parameter types and their output.

This is the one place where errors become a message and an exit status.
"""
