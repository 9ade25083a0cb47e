"""Where a pipeline run's minutes went, from Snakemake's own log: each job's start and finish, per rule and in all.

Snakemake writes `[<date>]` before every job it starts (followed by `Job N: <message>`, or `rule R:` ... `jobid: N`)
and before every job it finishes (`Finished jobid: N (Rule: R)`), to its terminal and to
.snakemake/log/<time>.snakemake.log. The dates have one-second resolution, which is fine for jobs of seconds to
minutes. On a cluster Snakemake prints no date with a submission (`Job N has been submitted with SLURM jobid …`):
the start is then the last date it printed before it (the run's start, or the finish that freed the slot), and a
group of jobs submitted as one (`Job <uuid> has been submitted`) starts each of its jobs then. Queueing and the
status checks are counted in.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from ..core.errors import KvtierError

_DATE = re.compile(r"^\[(\w{3} \w{3} +\d+ \d\d:\d\d:\d\d \d{4})\]$")
_STARTED_MESSAGE = re.compile(r"^Job (\d+): ")
_STARTED_RULE = re.compile(r"^(?:local)?rule (\S+):$")
_JOBID = re.compile(r"^\s+jobid: (\d+)$")
_FINISHED = re.compile(r"^Finished jobid: (\d+) \(Rule: (\S+)\)$")
_HEADER_DATE = re.compile(r"^Date: (\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_SUBMITTED = re.compile(r"^Job (\S+) has been submitted with SLURM jobid")


@dataclass(frozen=True)
class Job:
    jobid: int
    rule: str
    started: datetime
    finished: datetime

    @property
    def seconds(self) -> float:
        return (self.finished - self.started).total_seconds()


def _date(text: str) -> datetime:
    return datetime.strptime(" ".join(text.split()), "%a %b %d %H:%M:%S %Y")


def parse(text: str) -> list[Job]:
    """Every job of the log that both started and finished, in the order they finished."""
    started: dict[int, datetime] = {}
    jobs, date, pending_rule, group_started = [], None, None, None
    for raw in text.splitlines():
        line = raw.strip()
        if m := _DATE.match(line):
            date, pending_rule = _date(m.group(1)), None
        elif m := _HEADER_DATE.match(line):
            date = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")
        elif date is None:
            continue
        elif m := _SUBMITTED.match(line):
            if m.group(1).isdigit():
                started.setdefault(int(m.group(1)), date)
            else:  # a group job: its jobs finish one by one, each counted from the group's submission
                group_started = date
        elif m := _STARTED_MESSAGE.match(line):
            started.setdefault(int(m.group(1)), date)
        elif m := _STARTED_RULE.match(line):
            pending_rule = m.group(1)
        elif pending_rule and (m := _JOBID.match(raw)):
            started.setdefault(int(m.group(1)), date)
        elif m := _FINISHED.match(line):
            jobid = int(m.group(1))
            start = started.get(jobid, group_started)
            if start is not None:
                jobs.append(Job(jobid, m.group(2), start, date))
    return jobs


def newest_log(project: Path) -> Path:
    """The newest log in which a job finished: a dry run (or a run that did nothing) after it leaves one too."""
    logs = sorted((Path(project) / ".snakemake" / "log").glob("*.snakemake.log"))
    if not logs:
        raise KvtierError(f"{project}/.snakemake/log: no Snakemake log (run the pipeline first, or name a log)")
    for log in reversed(logs):
        if parse(log.read_text(errors="replace")):
            return log
    return logs[-1]


def text(log: Path) -> str:
    try:
        content = Path(log).read_text(errors="replace")
    except OSError as exc:
        raise KvtierError(f"{log}: cannot read the log ({exc.strerror})") from None
    jobs = parse(content)
    if not jobs:
        raise KvtierError(f"{log}: no finished job in it (is it Snakemake's log of a run, not of a dry run?)")
    first = min(job.started for job in jobs)
    wall = (max(job.finished for job in jobs) - first).total_seconds()
    per_rule: dict[str, list[float]] = defaultdict(list)
    for job in jobs:
        per_rule[job.rule].append(job.seconds)
    lines = [f"{log}: {len(jobs)} jobs, {wall:.0f} s from the first start to the last finish", "",
             f"{'rule':<28} {'jobs':>4} {'seconds':>8} {'share':>6}"]
    for rule, times in sorted(per_rule.items(), key=lambda item: -sum(item[1])):
        lines.append(f"{rule:<28} {len(times):>4} {sum(times):>8.0f} {100 * sum(times) / wall if wall else 0:>5.1f}%")
    lines += ["", f"{'job':<40} {'start s':>8} {'seconds':>8}"]
    for job in sorted(jobs, key=lambda j: j.started):
        lines.append(f"{job.rule + ' #' + str(job.jobid):<40} {(job.started - first).total_seconds():>8.0f} "
                     f"{job.seconds:>8.0f}")
    return "\n".join(lines)
