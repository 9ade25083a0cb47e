# kvtier: raw_data -> evidence. Thin on purpose: rules call `kvtier`; logic lives in src/kvtier.
from snakemake.utils import min_version

min_version("9.0")


configfile: "config/config.yaml"


# `snakemake --report`: every evidence page and chart, filed under its item (PAGE_REPORT and CHART_REPORT in
# workflow/rules/common.smk).
report: "workflow/report/workflow.rst"


include: "workflow/rules/common.smk"
include: "workflow/rules/replay.smk"
include: "workflow/rules/audit.smk"
include: "workflow/rules/model.smk"
include: "workflow/rules/lmcache.smk"
include: "workflow/rules/runs.smk"
include: "workflow/rules/measured.smk"
include: "workflow/rules/r1.smk"
include: "workflow/rules/boundary.smk"
include: "workflow/rules/gates.smk"
include: "workflow/rules/r9.smk"
include: "workflow/rules/sweep.smk"
include: "workflow/rules/soak.smk"
include: "workflow/rules/index.smk"


onstart:
    # Killed (SIGTERM) or hung up on (SIGHUP), Snakemake cancels its jobs as on Ctrl-C, so that no job submitted to
    # a cluster, and no server, outlives the run that started it (kvtier.core.interrupt).
    kvtier_interrupt.interrupt_on(signal.SIGTERM, signal.SIGHUP)
    # vLLM imported once for the run, each server forked from it (kvtier.stack.fork_server), where the jobs run
    # on this machine (common.smk: never one the run inherited).
    if FORK_SERVER_ON and workflow.local_exec:
        FORK_SERVER.start(FORK_SERVER_LOG, kvtier_fork_server.snakemake_job_environment(
            threads=1, path_first=JOB_PATH_FIRST))


onsuccess:
    FORK_SERVER.stop()


onerror:
    FORK_SERVER.stop()


rule all:
    default_target: True
    input:
        f"{EVIDENCE}/index.html",
        # R8: the manifest of the whole package, written once everything else is.
        rules.package_manifest.output.manifest,
        # The last gate's flag: a run whose gate failed does not reach its target (unless gates.stop_on_fail: false).
        [f"{GATES_DIR}/{LAST_GATE}.proceed"] if GATES_ON else [],
