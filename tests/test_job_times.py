"""kvtier job-times: where a pipeline run's minutes went, from Snakemake's log."""

from kvtier.cli import main
from kvtier.package import job_times

LOG = """Job stats:
job      count
-------  -----
model        1
render_R2    1
total        2

[Fri Dec  4 15:21:49 2026]
Job 7: The model: models/kvtier-model
Reason: Missing output files: models/kvtier-model/config.json
[Fri Dec  4 15:21:50 2026]
localrule render_R2:
    input: raw_data/published/R2_readings.csv
    jobid: 3
[Fri Dec  4 15:22:52 2026]
Finished jobid: 7 (Rule: model)
1 of 2 steps (50%) done
[Fri Dec  4 15:23:00 2026]
Finished jobid: 3 (Rule: render_R2)
2 of 2 steps (100%) done
"""


def test_job_times_reads_each_jobs_start_and_finish_from_snakemakes_log(tmp_path, capsys):
    jobs = job_times.parse(LOG)
    assert [(j.rule, j.jobid, j.seconds) for j in jobs] == [("model", 7, 63.0), ("render_R2", 3, 70.0)]
    (tmp_path / ".snakemake" / "log").mkdir(parents=True)
    (tmp_path / ".snakemake" / "log" / "2026-12-04T152148.snakemake.log").write_text(LOG)
    assert main(["job-times", "--project", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "2 jobs, 71 s from the first start to the last finish" in out and "render_R2 #3" in out
    # A dry run afterwards leaves a newer log with no job in it: --project still reads the run.
    (tmp_path / ".snakemake" / "log" / "2026-12-04T160000.snakemake.log").write_text(LOG.split("[Fri")[0])
    assert main(["job-times", "--project", str(tmp_path)]) == 0
    assert "152148.snakemake.log: 2 jobs" in capsys.readouterr().out
    (tmp_path / "dry.log").write_text(LOG.split("[Fri")[0])
    assert main(["job-times", str(tmp_path / "dry.log")]) == 2
    assert "no finished job in it" in capsys.readouterr().err
