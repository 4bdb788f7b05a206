"""Commands on the spool as a whole: status (the daemons), stats, gc (retention), fsck."""

from __future__ import annotations

import json
import os
from typing import Any

import click

from taskq import errors
from taskq.cli import output
from taskq.cli.common import spool_of
from taskq.cli.params import DURATION, PlainHelp
from taskq.cli.render import daemon_line, paused_line, permit_line, stats_text
from taskq.cli.timefmt import stamper, time_format
from taskq.errors import NotFound
from taskq.observe import stats
from taskq.spool import fsck, pause, permits, retention, rundir
from taskq.spool.defaults import default_host_id
from taskq.times.clock import wall_us


@click.command(cls=PlainHelp, name="status")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list.")
@time_format
@click.pass_context
def status_command(ctx: click.Context, as_json: bool, local: bool | None) -> None:
    """Show the daemons on this spool: dispatching or not, clock uncertainty, load, permits."""
    stamp = stamper(local)
    spool = spool_of(ctx)
    records = rundir.daemons(spool.run, default_host_id(), wall_us())
    held = permits.holdings(spool)
    if as_json:
        output.write(json.dumps(with_permits(spool.run, records, held), indent=1))
        return

    for r in records:
        output.write(daemon_line(r, stamp))
    for pause_held in pause.active(spool, wall_us()):
        output.write(paused_line(pause_held.to_doc()))
    for holding in held:
        output.write(permit_line(holding.to_doc(), stamp))


def with_permits(
    run_dir: str, records: list[dict[str, Any]], held: list[permits.Holding]
) -> list[dict[str, Any]]:
    """Each record with the permits its daemon holds; a holder with no record gets one of its own.

    (A daemon stopped while its attempts ran, or whose record was removed,
    may still hold permits until their leases expire.)
    """
    by_daemon: dict[str, list[permits.Holding]] = {}
    for holding in held:
        by_daemon.setdefault(holding.lease.daemon, []).append(holding)
    for r in records:
        r["permits"] = [h.to_doc() for h in by_daemon.pop(str(r.get("owner")), [])]
    for daemon, found in by_daemon.items():
        here = found[0].lease.host == default_host_id()
        alive = rundir.daemon_alive(run_dir, daemon) if here else None
        records.append({"owner": daemon, "alive": alive, "permits": [h.to_doc() for h in found]})
    return records


@click.command(cls=PlainHelp, name="stats")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@time_format
@click.pass_context
def stats_command(ctx: click.Context, as_json: bool, local: bool | None) -> None:
    """Counts per state and queue, the overdue backlog, lateness and daemons."""
    stamp = stamper(local)
    doc = stats.collect(spool_of(ctx), wall_us(), default_host_id())
    if as_json:
        output.write(json.dumps(doc, indent=1))
        return

    output.write(stats_text(doc, stamp))


@click.command(cls=PlainHelp, name="gc")
@click.option(
    "--older-than",
    type=DURATION,
    default="7d",
    show_default=True,
    metavar="DURATION",
    help="Remove done/ days that ended longer ago than this.",
)
@click.option("--dry-run", is_flag=True, help="Report what would go; change nothing.")
@click.pass_context
def gc_command(ctx: click.Context, older_than: int, dry_run: bool) -> None:
    """Prune finished tasks from done/, with their logs and keys."""
    found = retention.collect(spool_of(ctx), wall_us(), older_than, dry_run)
    verb = "would remove" if dry_run else "removed"
    text = (
        f"{verb} {found.tasks} done task(s) in {found.days} day(s), with their logs "
        f"and {found.keys} key(s)"
    )
    if dry_run:
        output.write(text)
    else:
        output.done(text)


@click.command(cls=PlainHelp, name="fsck")
@click.option("--dry-run", is_flag=True, help="Report what is wrong; change nothing.")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON object.")
@click.pass_context
def fsck_command(ctx: click.Context, dry_run: bool, as_json: bool) -> None:
    """Check the spool's structure and permissions; quarantine and repair what is bad."""
    spool = spool_of(ctx)
    if not os.path.isdir(spool.root):
        raise NotFound(f"no spool at {spool.root}")
    report = fsck.check(spool, wall_us(), dry_run)
    summary = f"fsck: {report.problems} problem(s), {report.fixed} fixed"
    if as_json:
        doc = {"problems": report.problems, "fixed": report.fixed, "findings": report.lines}
        text = json.dumps(doc, indent=1)
    else:
        text = "\n".join([*report.lines, summary])
    # Its status says what remains wrong, printed or not; what it fixed stays fixed.
    output.done(text, summary)
    ctx.exit(errors.fsck_status(report.problems, report.fixed))
