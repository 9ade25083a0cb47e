"""The pipeline on a real Slurm cluster. workflow/scripts/slurm_local.sh stands up a single-node one on this machine
(as root: it installs slurm-wlm and munge, and starts munged, slurmctld and slurmd). On a copy of the session's
built project (tests/conftest.py `built`, run locally), the smallest DAG that exercises what Slurm changes then goes
through `snakemake --profile profiles/slurm`: R3's second round removed and measured again (instance A's job, then
instance B's, handing off through the pool), the campaign over it and R3's page (short jobs, each in its group).
Everything else of the test preset is up to date there, so nothing else runs. That run starts in the background as
soon as the session's project is built (tests/conftest.py `built`), beside the tests before these, which wait for
it. Checked:

- every job went through the scheduler: each job the dry run planned ran inside a Slurm job (its id in Snakemake's
  output, its Slurm log naming it), the short ones in their groups, and each id is COMPLETED in the scheduler's own
  record of finished jobs (the job-completion log);
- measurement jobs took the whole node (`--exclusive`), the others one CPU;
- R3's instances A and B ran as two jobs, B after A, sharing only the pool, B resumed from what A left, and the
  page rendered through Slurm verifies it;
- that page and its tables have the files and columns of the local run's;
- a job that asks for more than the node has is refused at submission, not left pending;
- a killed Snakemake cancels its jobs: nothing left in the queue, no server left running;
- the teardown leaves no daemon.
Every measuring command also holds the node's lock under Slurm (tests/test_node_lock.py checks each one waits).

Skipped, with the reason printed, when not root or when Slurm cannot start here.
"""

import dataclasses
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest

from conftest import (
    PRESET,
    SLURM_CONF,
    Background,
    copy_built,
    processes_mentioning,
    slurm_local,
    start_background,
    tool_env,
)

pytestmark = pytest.mark.workflow

JOBCOMP = Path("/var/log/slurm/kvtier-jobcomp.log")  # slurm_local.sh's JobCompLoc
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd")
# The rules of measurement jobs (kvtier.runs.cluster), by name or prefix.
MEASURING = ("tier_run_", "r3_", "r1_reads", "r1_resume", "boundary_cells", "g2_storage", "r9_loads", "platform",
             "soak")
SUBMITTED = re.compile(r"Job (\S+) has been submitted with SLURM jobid (\d+) \(log: (.+?)\)\.")
# What a Slurm job ran: the Snakemake inside it (the jobstep executor) is given its jobs as `--target-jobs`.
TARGETS = re.compile(r"--target-jobs (.+?) --")
CAMPAIGN = "raw_data/runs/test"
# What the smallest DAG asks for: R3's second round measured again, the campaign over it and R3's page.
REMEASURED = [f"{CAMPAIGN}/round-2/cross_instance", f"{CAMPAIGN}/round-2/cross_instance_handoff"]
GOALS = [REMEASURED[0], f"{CAMPAIGN}/R2_readings.csv", "evidence/R3/R3.html"]
FORCED = ["campaign", "render_R3"]  # they read the new round, which Snakemake does not know before it is measured
PLANNED = {"r3_populate": 1, "r3_resume": 1, "campaign": 1, "render_R3": 1}
# Only these rules may run: every unit measured after R3 in the rounds' order waits for it (its `after` input), so a
# remeasured R3 would make them all look out of date.
# The session's run took sequential rounds (its looks chose round 3's units after round 2): here the campaign is
# over 2 fixed rounds, so that a remeasured round does not send every later look and round back to the scheduler.
SELECT = ["--forcerun", *FORCED, "--allowed-rules", *PLANNED, "--config", "runs={max_rounds: 2}"]


@dataclasses.dataclass
class SlurmRun:
    project: Path
    background: Background
    output: str = ""


def start_on_slurm(project: Path) -> SlurmRun:
    """The smallest DAG through Slurm on `project` (a copy of the session's built project), started in the
    background (tests/conftest.py `built` starts it as soon as that project is built)."""
    from test_workflow import jobs_of_dry_run
    for rel in REMEASURED:
        shutil.rmtree(project / rel)
    planned = jobs_of_dry_run(project, PRESET[1:], extra=SELECT, targets=GOALS)
    if planned != PLANNED:
        pytest.fail(f"the smallest DAG would run {planned}, not {PLANNED}")
    cmd = ["snakemake", *GOALS, *SELECT, "--profile", "profiles/slurm", *PRESET]
    return SlurmRun(project, start_background(cmd, project, project.parent / "snakemake.out"))


@pytest.fixture(scope="module")
def on_slurm(slurm_background) -> SlurmRun:
    """That run, once it has ended (with the tests before these ones running beside it)."""
    if isinstance(slurm_background, str):  # the reason there is no Slurm
        pytest.skip(slurm_background)
    done = slurm_background.background.wait()
    if done.returncode != 0:
        pytest.fail(f"{' '.join(done.args)} exited {done.returncode}\n{done.stdout[-6000:]}")
    slurm_background.output = done.stdout
    return slurm_background


def live(name: str) -> list[int]:
    """Pids of live processes of that name (zombies are dead: nothing may reap them here)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = proc.joinpath("stat").read_text()
        except OSError:
            continue
        comm, state = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()[0]
        if comm == name and state != "Z":
            pids.append(int(proc.name))
    return pids


def submitted(out: str, project: Path | None = None) -> list[dict]:
    """Every Slurm job Snakemake submitted, from Snakemake's output: its Slurm id, its Slurm log (the executor
    plugin's .snakemake/slurm_logs/rule_<rule>/<wildcard values>/<id>.log, or group_<group>/... for a group of
    short jobs), and, where the project is given, the jobs it ran: (rule, wildcards) from that log."""
    jobs = []
    for _, slurm_id, log in SUBMITTED.findall(out):
        job = {"id": slurm_id, "log": Path(log)}
        if project is not None:
            text = (job["log"] if job["log"].is_absolute() else project / job["log"]).read_text()
            job["ran"] = sorted(tuple(target.split(":", 1)) for target in TARGETS.search(text).group(1).split())
        jobs.append(job)
    return jobs


def jobcomp() -> dict[str, dict]:
    """{job id: fields} of every finished job in the scheduler's job-completion log."""
    records = {}
    for line in JOBCOMP.read_text().splitlines():
        fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
        if "JobId" in fields:
            records[fields["JobId"]] = fields
    return records


def queue() -> list[str]:
    return subprocess.run(["squeue", "-h", "-o", "%i %j %T"], capture_output=True, text=True,
                          check=True).stdout.split("\n")[:-1]


def test_every_job_went_through_the_scheduler(on_slurm):
    jobs = submitted(on_slurm.output, on_slurm.project)
    assert sorted(rule for job in jobs for rule, _ in job["ran"]) == sorted(
        rule for rule, count in PLANNED.items() for _ in range(count)), on_slurm.output[-3000:]
    # The short jobs went in their groups (profiles/slurm), named in their log folders (group_pages_render_R3).
    groups = [part for job in jobs for part in job["log"].parts if part.startswith("group_")]
    names = ("gates_G2_G3", "pages")
    assert sorted(next((n for n in names if g.startswith(f"group_{n}_")), g) for g in groups) == sorted(names), groups
    records = jobcomp()
    for job in jobs:
        assert records.get(job["id"], {}).get("JobState") == "COMPLETED", (job, records.get(job["id"]))
    assert queue() == []


def test_measurement_jobs_took_the_whole_node_and_the_rest_did_not(on_slurm):
    records = jobcomp()
    cpus = os.cpu_count()
    jobs = submitted(on_slurm.output, on_slurm.project)
    assert len(jobs) == 4  # R3's two jobs, the campaign, the page
    for job in jobs:
        whole = {rule.startswith(MEASURING) for rule, _ in job["ran"]}
        assert len(whole) == 1, job  # never a measurement in a group with a short job
        whole = whole.pop()
        procs = int(records[job["id"]]["ProcCnt"])
        # a short job (alone or in a group run one after another, profiles/slurm `cores: 1`) asks one small job's
        # share (cluster.small.cpus, 1 by default), never the node's exclusivity nor more than it has
        assert procs == (cpus if whole else 1), (job, records[job["id"]])


def test_r3_ran_as_two_jobs_handing_off_through_the_pool(on_slurm):
    from kvtier.evidence import measured, r3
    project = on_slurm.project
    run_record = json.loads((project / REMEASURED[0] / "run.json").read_text())
    handoff = run_record["metadata"]["handoff"]
    writer, reader = run_record["segments"]
    assert writer["status"] == "handed-off" and reader["status"] == "complete"
    assert writer["base_url"] != reader["base_url"] or writer["end"] <= reader["start"]
    assert handoff["writer_stopped"] <= handoff["reader_started"] and handoff["files"] > 0
    ids = {rule: int(job["id"]) for job in submitted(on_slurm.output, project) for rule, wildcards in job["ran"]
           if rule in ("r3_populate", "r3_resume") and wildcards == "round=2"}
    assert set(ids) == {"r3_populate", "r3_resume"} and ids["r3_populate"] < ids["r3_resume"], ids
    # B resumed from the pool what A left, in every window of both rounds (the campaign, run as a Slurm job).
    verdict = r3.verdict(measured.load(project / CAMPAIGN, "R3"))
    assert verdict["verified"], verdict
    page = (project / "evidence" / "R3" / "R3.html").read_text()
    assert "SEQUENTIAL SHARING VERIFIED:" in page and "NOT VERIFIED" not in page and "one node" in page


def test_the_pages_rendered_through_slurm_have_the_shape_of_a_local_run(on_slurm, built):
    """R3's page and tables as the session's local run rendered them: the same files, columns and rows (the
    figures are measured again)."""
    ours, local = on_slurm.project / "evidence" / "R3", built / "evidence" / "R3"
    assert sorted(p.name for p in ours.iterdir()) == sorted(p.name for p in local.iterdir())
    for table in local.glob("*.csv"):
        mine, theirs = pd.read_csv(ours / table.name), pd.read_csv(table)
        assert list(mine.columns) == list(theirs.columns), table.name
        assert mine.iloc[:, 0].tolist() == theirs.iloc[:, 0].tolist(), table.name


def test_a_job_asking_for_more_than_the_node_has_is_refused_at_submission(slurm_background):
    # slurm_local.sh's EnforcePartLimits=ALL: by default Slurm queues such a job and leaves it pending for ever
    # (reason PartitionConfig), and a Snakemake run waits on it with no error (seen: a group job asking 3 CPUs).
    if isinstance(slurm_background, str):
        pytest.skip(slurm_background)
    slurm_background.background.wait()  # its jobs gone from the queue, whatever became of them
    refused = subprocess.run(["sbatch", "--cpus-per-task", str(os.cpu_count() + 1), "--wrap", "true"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "More processors requested than permitted" in refused.stderr, refused
    assert queue() == []


def test_a_killed_snakemake_cancels_its_jobs_and_leaves_no_server(on_slurm, built, tmp_path):
    project = copy_built(built, tmp_path / "kvtier")
    target = "raw_data/runs/test/R9"  # vLLM loads: a server up within seconds of the job starting
    shutil.rmtree(project / target)
    # The target first: --configfile takes every word after it.
    proc = subprocess.Popen(["snakemake", target, "--profile", "profiles/slurm", *PRESET], cwd=project,
                            env=tool_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + 600
    while not [pid for pid in processes_mentioning(str(project))
               if b"vllm" in Path(f"/proc/{pid}/cmdline").read_bytes()]:
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no server started under Slurm"
        time.sleep(1)
    assert queue(), "the job is not in the queue"
    proc.send_signal(signal.SIGTERM)  # `kill PID`: what a scheduler or a user does to the Snakemake process
    out, _ = proc.communicate(timeout=300)
    deadline = time.monotonic() + 120
    while (queue() or processes_mentioning(str(project))) and time.monotonic() < deadline:
        time.sleep(1)
    assert queue() == [], "a job was left in the queue"
    assert processes_mentioning(str(project)) == [], "a server was left running"
    slurm_id = submitted(out)[-1]["id"]
    assert jobcomp()[slurm_id]["JobState"] == "CANCELLED", (slurm_id, out[-2000:])


def test_the_teardown_leaves_no_daemon(on_slurm):
    down = slurm_local("down")
    assert down.returncode == 0, down.stderr
    assert {name: live(name) for name in DAEMONS} == {name: [] for name in DAEMONS}
    # Its configuration goes with the daemons: left behind, every Snakemake start waits ~10 s on scontrol.
    assert not SLURM_CONF.exists(), SLURM_CONF.read_text()[:200]
    again = slurm_local("down")  # idempotent
    assert again.returncode == 0, again.stderr
