# The model every tier serves: generated locally (random weights from a seed, a trained tokenizer), never fetched.


rule model:
    group:
        "prepare"
    message:
        "The model every tier serves, generated locally: {output.config}"
    output:
        config=f"models/{MODEL['served_name']}/config.json",
    params:
        argv=lambda wildcards, output: [
            "--out", os.path.dirname(output.config),
            *(word for key, value in MODEL["generate"].items() for word in (f"--{key.replace('_', '-')}", value)),
        ],
    resources:
        **SMALL_JOB,
        measurement=HALF_SLOT,
    log:
        "logs/model.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier model {params.argv:q} > {log:q} 2>&1"
