# The LMCache the runs use: the pinned upstream wheel (sha256-checked), with patches/*.patch for `patched`.


rule lmcache_build:
    input:
        patches=lambda wildcards: PATCHES if wildcards.variant == "patched" else [],
    output:
        record="build/lmcache/{variant}/build.json",
    wildcard_constraints:
        variant="patched|upstream",
    params:
        out=lambda wildcards, output: os.path.dirname(output.record),
        patch_flags=lambda wildcards, input: " ".join(f"--patch {p}" for p in input.patches),
        upstream=" ".join(f"--upstream-{key} {value}" for key, value in LMCACHE["upstream"].items()),
    log:
        "logs/lmcache_build/{variant}.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier lmcache-build --out {params.out} --cache-dir build/lmcache/upstream-wheel {params.upstream}"
        " {params.patch_flags} > {log} 2>&1"
