"""What operators and Prometheus see: stats, the daemon's metrics, the exporter.

`stats` counts the spool by names (cached per directory by `dircounts`);
`metrics` holds the daemon's figures; `exporter` writes and serves them;
`counting` is the child process that counts for the exporter.
"""
