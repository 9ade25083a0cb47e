# The model every tier serves: generated locally (random weights from a seed, a trained tokenizer), never fetched.


rule model:
    output:
        config=f"models/{MODEL['served_name']}/config.json",
    params:
        out=lambda wildcards, output: os.path.dirname(output.config),
        flags=" ".join(f"--{key.replace('_', '-')} {value}" for key, value in MODEL["generate"].items()),
    log:
        "logs/model.log",
    conda:
        "../../environment.yml"
    shell:
        "kvtier model --out {params.out} {params.flags} > {log} 2>&1"
