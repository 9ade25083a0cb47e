"""The pipeline on a real Slurm cluster. workflow/scripts/slurm_local.sh stands up a single-node one on this machine
(as root: it installs slurm-wlm and munge, and starts munged, slurmctld and slurmd); the session's run of the test
preset (tests/conftest.py `built_run`) then goes through `snakemake --profile profiles/slurm`, and:

- every job went through the scheduler: a Slurm job id for each in Snakemake's output, a Slurm log for each, and
  each id in the scheduler's own record of finished jobs (the job-completion log), COMPLETED;
- measurement jobs took the whole node (`--exclusive`), the others did not;
- R3's instances A and B ran as two jobs, B after A, sharing only the pool;
- the evidence has the pages and tables of a local run of the same preset (tests/test_workflow.py, against
  tests/golden/test_preset_evidence.json, whichever executor built it);
- a job that asks for more than the node has is refused at submission, not left pending;
- a killed Snakemake cancels its jobs: nothing left in the queue, no server left running;
- the teardown leaves no daemon.

Skipped, with the reason printed, when not root or when Slurm cannot start here.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import PRESET, processes_mentioning, slurm_local, tool_env

pytestmark = pytest.mark.workflow

JOBCOMP = Path("/var/log/slurm/kvtier-jobcomp.log")  # slurm_local.sh's JobCompLoc
DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd")
# The rules of measurement jobs (kvtier.runs.cluster), by name or prefix.
MEASURING = ("tier_run_", "r3_", "r1_reads", "r1_resume", "boundary_cells", "g2_storage", "r9_loads", "platform",
             "soak")
SUBMITTED = re.compile(r"Job (\S+) has been submitted with SLURM jobid (\d+) \(log: (.+?)\)\.")
# What a Slurm job ran: the Snakemake inside it (the jobstep executor) is given its jobs as `--target-jobs`.
TARGETS = re.compile(r"--target-jobs (.+?) --")


@pytest.fixture(scope="module")
def on_slurm(slurm_cluster, request):
    """The session's run of the test preset, which went through Slurm here."""
    if slurm_cluster:  # the reason there is no Slurm
        pytest.skip(slurm_cluster)
    built_run = request.getfixturevalue("built_run")
    assert built_run.executor == "slurm"
    return built_run.project, built_run.output


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
    from test_workflow import ALL_JOBS
    project, out = on_slurm
    jobs = submitted(out, project)
    assert sorted(rule for job in jobs for rule, _ in job["ran"]) == sorted(
        rule for rule, count in ALL_JOBS.items() if rule != "all" for _ in range(count)), out[-3000:]
    # The short jobs went in groups (profiles/slurm): fewer submissions than jobs. A group's log folder is named
    # by the group and its rules: group_prepare_lmcache_build_model_model_r9, group_gate_G1_gate_g1_gate_proceed.
    groups = [part for job in jobs for part in job["log"].parts if part.startswith("group_")]
    # Each round's tier runs too, between its R3 jobs (kvtier.runs.order.stretches): here one stretch a round; and
    # the measurements outside the rounds (R1, G2's storage, R9, B) as `probes`.
    names = ("prepare", "gate_G1", "probes", "round1_1", "round2_1", "gates_G2_G3", "pages")
    assert sorted(next((n for n in names if g.startswith(f"group_{n}_")), g) for g in groups) == sorted(names), groups
    records = jobcomp()
    for job in jobs:
        assert records.get(job["id"], {}).get("JobState") == "COMPLETED", (job, records.get(job["id"]))
    assert queue() == []


def test_measurement_jobs_took_the_whole_node_and_the_rest_did_not(on_slurm):
    project, out = on_slurm
    records = jobcomp()
    cpus = os.cpu_count()
    for job in submitted(out, project):
        whole = {rule.startswith(MEASURING) for rule, _ in job["ran"]}
        assert len(whole) == 1, job  # never a measurement in a group with a short job
        whole = whole.pop()
        procs = int(records[job["id"]]["ProcCnt"])
        if whole or len(job["ran"]) == 1:
            assert (procs == cpus) == whole, (job, records[job["id"]])
        else:  # a group of short jobs runs them one after another (profiles/slurm `cores: 1`): one small job's
            # share (cluster.small.cpus, 1 by default), never the node's exclusivity nor more than it has
            assert procs == 1, (job, records[job["id"]])


def test_r3_ran_as_two_jobs_handing_off_through_the_pool(on_slurm):
    project, out = on_slurm
    campaign = project / "raw_data" / "runs" / "test"
    for round_ in (1, 2):
        run_record = json.loads((campaign / f"round-{round_}" / "cross_instance" / "run.json").read_text())
        handoff = run_record["metadata"]["handoff"]
        writer, reader = run_record["segments"]
        assert writer["status"] == "handed-off" and reader["status"] == "complete"
        assert writer["base_url"] != reader["base_url"] or writer["end"] <= reader["start"]
        assert handoff["writer_stopped"] <= handoff["reader_started"] and handoff["files"] > 0
        ids = {rule: int(job["id"]) for job in submitted(out, project) for rule, wildcards in job["ran"]
               if rule in ("r3_populate", "r3_resume") and wildcards == f"round={round_}"}
        assert set(ids) == {"r3_populate", "r3_resume"} and ids["r3_populate"] < ids["r3_resume"], ids
    page = (project / "evidence" / "R3" / "R3.html").read_text()
    assert "VERIFIED:" in page and "NOT VERIFIED" not in page and "one node" in page


def test_a_job_asking_for_more_than_the_node_has_is_refused_at_submission(slurm_cluster):
    # slurm_local.sh's EnforcePartLimits=ALL: by default Slurm queues such a job and leaves it pending for ever
    # (reason PartitionConfig), and a Snakemake run waits on it with no error (seen: a group job asking 3 CPUs).
    if slurm_cluster:
        pytest.skip(slurm_cluster)
    refused = subprocess.run(["sbatch", "--cpus-per-task", str(os.cpu_count() + 1), "--wrap", "true"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode != 0 and "More processors requested than permitted" in refused.stderr, refused
    assert queue() == []


def test_a_killed_snakemake_cancels_its_jobs_and_leaves_no_server(on_slurm, tmp_path):
    project = tmp_path / "kvtier"
    shutil.copytree(on_slurm[0], project, symlinks=True)
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
    again = slurm_local("down")  # idempotent
    assert again.returncode == 0, again.stderr
