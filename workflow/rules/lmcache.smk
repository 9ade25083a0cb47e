# The LMCache the runs use: the pinned upstream wheel (sha256-checked), with patches/*.patch for `patched`.


rule lmcache_build:
    group:
        "prepare"
    message:
        "LMCache build {wildcards.variant}: the pinned upstream wheel{params.with_patches}"
    input:
        patches=lambda wildcards: PATCHES if wildcards.variant == "patched" else [],
    output:
        record="build/lmcache/{variant}/build.json",
    wildcard_constraints:
        variant="patched|upstream",
    params:
        with_patches=lambda wildcards, input: f" + {len(input.patches)} patch(es)" if input.patches else "",
        argv=lambda wildcards, input, output: [
            "--out", os.path.dirname(output.record), "--cache-dir", "build/lmcache/upstream-wheel",
            *(word for key, value in LMCACHE["upstream"].items() for word in (f"--upstream-{key}", value)),
            *(word for patch in input.patches for word in ("--patch", patch)),
        ],
    resources:
        **SMALL_JOB,
        measurement=HALF_SLOT,
    log:
        "logs/lmcache_build/{variant}.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier lmcache-build {params.argv:q} > {log:q} 2>&1"
