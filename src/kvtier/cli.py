"""kvtier: reproducible evidence for KV-cache tiering in LLM serving."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
from pathlib import Path

from .core import interrupt, node_lock
from .core.errors import KvtierError
from .stack import emulated


def _cmd_config_check(args) -> None:
    from .core import config
    cfg = config.load(args.config)
    print(f"{args.config}: valid")
    if args.show:
        print(json.dumps(cfg, indent=2))


def _parse_params(pairs: list[str]) -> dict:
    params = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name.isidentifier():
            raise KvtierError(f"--param {pair!r}: expected NAME=VALUE with NAME a Python identifier")
        params[name] = _number_or_text(value)
    return params


def _named_values(texts: list[str], option: str, shape: str, example: str, empty_value: bool = False) -> dict:
    """{name: value} from repeated NAME=VALUE options; one that is not is refused naming the option and its shape."""
    values = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not name or not (value or empty_value):
            raise KvtierError(f"{option} {text!r}: expected {shape}, e.g. {example}")
        values[name] = value
    return values


def _number_or_text(value: str):
    """Papermill parameters keep their type: '2' is the integer 2, '2.5' a float, anything else text."""
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


def _cmd_render(args) -> None:
    from .evidence import render
    from .gates import record
    page = render.render(args.item, args.notebook, args.out_dir, _parse_params(args.param),
                         sorted({*args.input, *args.gate}), cell_timeout_s=args.cell_timeout_s,
                         html_template=args.html_template, after_failed_gates=record.failed_gates(args.gate))
    print(f"{args.item}: rendered {page}")


def _cmd_index(args) -> None:
    from .evidence import index
    not_run = _named_values(args.not_run, "--not-run", "ITEM=REASON", "S=not emulated here")
    print(f"wrote {index.build(args.evidence_dir, args.item, not_run)}")


def _cmd_manifest(args) -> None:
    from .package import manifest
    path, digest = manifest.write(args.root, args.evidence_dir)
    print(f"wrote {path}: sha256 {digest} (every page stamped with it)")


def _cmd_verify(args) -> int:
    from .package import manifest
    findings, checked = manifest.verify(args.root, args.manifest)
    for finding in findings:
        print(finding)
    if findings:
        counts = {kind: sum(f.kind == kind for f in findings) for kind in ("MODIFIED", "MISSING", "EXTRA")}
        print(f"kvtier verify: {len(findings)} finding(s) in {checked} files: "
              + ", ".join(f"{n} {kind}" for kind, n in counts.items() if n), file=sys.stderr)
        return 1
    print(f"kvtier verify: {checked} files match the manifest")
    return 0


def _cmd_package(args) -> None:
    from .package import archive
    path, digest = archive.build(args.root, args.out_dir, args.manifest)
    print(f"wrote {path} (manifest sha256 {digest})")


def _cmd_import(args) -> None:
    from .bench.imports import import_file
    print(f"wrote {import_file(args.format, args.file, args.out)}")


def _cmd_compare(args) -> int:
    from .bench import compare
    from .bench.imports import metrics
    (label_a, windows_a), (label_b, windows_b) = metrics.load(args.run_a), metrics.load(args.run_b)
    a = metrics.pick(args.run_a, windows_a, args.window_a)
    b = metrics.pick(args.run_b, windows_b, args.window_b)
    rows, only_a, only_b = compare.compare(a, b, args.tolerance, args.abs_tolerance_s, args.metric)
    print(compare.text(f"{args.run_a} ({label_a})", f"{args.run_b} ({label_b})", a, b, rows, only_a, only_b,
                       args.tolerance, args.abs_tolerance_s))
    return 1 if any(row.verdict == "DIFFER" for row in rows) else 0


def _cmd_compare_runs(args) -> int:
    from .package import compare_runs
    rows, absent = compare_runs.compare(Path(args.evidence_a), Path(args.evidence_b))
    print(compare_runs.text(args.evidence_a, args.evidence_b, rows, absent, show_same=args.all))
    tally, share = compare_runs.counts(rows), compare_runs.same_share(rows)
    if tally[compare_runs.OPPOSITE] or not share >= args.min_same:
        print(f"kvtier compare-runs: {tally[compare_runs.OPPOSITE]} opposite, same word in "
              f"{100 * share:.1f} % (at least {100 * args.min_same:g} % asked)", file=sys.stderr)
        return 1
    return 0


def _cmd_job_times(args) -> None:
    from .package import job_times
    print(job_times.text(Path(args.log) if args.log else job_times.newest_log(Path(args.project))))


def _cmd_screenshots(args) -> None:
    from .evidence import screenshots
    written, drawn = screenshots.shoot_all(args.evidence_dir, args.out_dir)
    for path in written:
        print(f"wrote {path}")
    print("Chinese text: drawn with a CJK font" if drawn else
          f"Chinese text: NOT drawn (boxes): no CJK font here; {screenshots.INSTALL}")
    if not drawn and args.require_cjk:
        raise KvtierError("Chinese text is not drawn on this machine (--require-cjk)")


def _cmd_r2(args) -> None:
    from .evidence import r2
    derived = r2.load(args.published_dir)
    print(r2.report_markdown(derived), end="")
    for name, value in r2.headline(derived).items():
        print(f"{name}: {value}")


def _cmd_notebook_sync(args) -> None:
    from .evidence import notebooks
    for py in args.py:
        print(f"wrote {notebooks.sync(py)}")


def _cmd_audit(args) -> None:
    from .audit import audit as run_audit
    from .audit import crosschecks, ledger, load_tables, report
    from .evidence.published import R2_ROUNDS_SPEC, R2_SPEC, load_rounds, load_table
    claims = ledger.load(args.claims, args.published_dir, args.sources)
    if claims.declares_tables and (args.runs or args.boundary):
        raise KvtierError(f"{args.claims}: --runs and --boundary re-evaluate the shipped documents' R2 and B "
                          "claims on kvtier's own runs; this ledger declares its own tables")
    local = {"R2": load_table(Path(args.runs) / R2_SPEC.file, R2_SPEC)} if args.runs else None
    # A campaign's rounds, where it kept them, give every local value its interval.
    by_round = Path(args.runs or "") / R2_ROUNDS_SPEC.file
    rounds = {r: {"R2": t} for r, t in load_rounds(by_round).items()} if args.runs and by_round.is_file() else None
    results = run_audit(claims, load_tables(args.published_dir, claims.tables), local, rounds)
    statements = None
    if args.boundary:
        from .audit import shapes
        from .evidence.boundary import load_grid
        statements = shapes.evaluate_all(claims.boundary_statements, load_grid(args.boundary))
    if args.out_dir:
        for path in report.write(results, crosschecks.all_checks(results), args.out_dir):
            print(f"wrote {path}")
        for path in report.write_statements(statements, args.out_dir) if statements is not None else []:
            print(f"wrote {path}")
    for verdict, n in report.counts(results).items():
        print(f"{verdict:>13}: {n}")
    uncovered = ledger.uncovered_digits(claims)
    for where in uncovered[:20]:
        print(f"warning: a digit in no claim and no not_claims entry: {where}", file=sys.stderr)
    if len(uncovered) > 20:
        print(f"warning: ... and {len(uncovered) - 20} more digits in no claim", file=sys.stderr)
    if statements is not None:
        print(f"document 000's boundary statements on the measured map {args.boundary} (shape only):")
        print(shapes.text(statements))
    if args.page:
        from .core.paths import NOTEBOOKS_DIR
        from .evidence import render
        params = {"claims": str(Path(args.claims).resolve()), "published_dir": str(Path(args.published_dir).resolve()),
                  "sources_dir": str(Path(args.sources).resolve()) if args.sources else "",
                  "out_dir": str(Path(args.page).resolve())}
        sources = Path(args.sources or Path(args.published_dir) / ledger.SOURCES_DIR)
        inputs = [args.claims, *(sources / name for name in claims.documents),
                  *(Path(args.published_dir) / spec.file for spec in claims.tables.values())]
        page = render.render("audit", NOTEBOOKS_DIR / "audit.ipynb", args.page, params, sorted(map(str, inputs)))
        print(f"wrote {page}")


def _cmd_bench(args) -> None:
    from .bench.runner import BenchConfig, Runner
    metrics_urls = _named_values(args.metrics, "--metrics", "NAME=URL", "vllm=http://127.0.0.1:8000/metrics",
                                 empty_value=True)
    if args.resume:
        run = json.loads((Path(args.resume) / "run.json").read_text()) if (Path(args.resume) / "run.json").is_file() \
            else None
        if run is None:
            raise KvtierError(f"{args.resume}: no run.json to resume")
        cfg, run_dir = BenchConfig(**run["config"]), args.resume
    else:
        if not args.base_url or not args.model or not args.run_dir:
            raise KvtierError("--base-url, --model and --run-dir are required (or --resume RUN_DIR)")
        cfg = BenchConfig(
            base_url=args.base_url, model=args.model, workload=args.workload, endpoint=args.endpoint,
            concurrency=args.concurrency, rate_per_s=args.rate, sessions=args.sessions,
            context_tokens=args.context_tokens, followup_tokens=args.followup_tokens,
            output_tokens=args.output_tokens, requests=args.requests, input_tokens=args.input_tokens,
            trace=args.trace, time_scale=args.time_scale, length_scale=args.length_scale,
            max_requests=args.max_requests, max_input_tokens=args.max_input_tokens, seed=args.seed,
            timeout_s=args.timeout_s, ttft_sla_s=args.ttft_sla_s, metrics_urls=metrics_urls, evict=args.evict,
            populate_url=args.populate_url, turns=args.turns, reuse=args.reuse)
        run_dir = args.run_dir
    try:
        result = Runner(cfg, run_dir, resume=bool(args.resume)).run()
    except KeyboardInterrupt:
        print(f"kvtier: interrupted; {run_dir} is marked incomplete (resume with --resume {run_dir})",
              file=sys.stderr)
        raise SystemExit(130) from None
    for window in result["windows"]:
        ttft = window["ttft_s"] or {}
        print(f"{window['window']:>14}: {window['requests']['ok']}/{window['requests']['total']} ok, "
              f"TTFT p50 {ttft.get('p50', float('nan')):.4f} s, "
              f"output {window['output_tok_s']['aggregate'] or 0:.1f} tok/s")
    print(f"wrote {Path(run_dir) / 'summary.json'}")


def _cmd_model(args) -> None:
    from dataclasses import fields

    from .stack.model import ModelSpec, generate
    spec = ModelSpec(**{f.name: getattr(args, f.name) for f in fields(ModelSpec)})
    print(f"wrote {generate(args.out, spec)}")


def _cmd_tier_run(args) -> None:
    from .runs.tier_run import TierSettings, run_tiers
    summaries = run_tiers(args.tier, _settings(TierSettings, args.settings, "--settings"), args.run_dir)
    for tier, summary in zip(args.tier, summaries):
        _print_windows(tier, summary)


def _print_windows(tier: str, summary: dict) -> None:
    for window in summary["windows"]:
        print(f"{tier} {window['window']}: TTFT p50 {window['ttft_s']['p50']:.4f} s")


def _cmd_r3_populate(args) -> None:
    from .runs.cross_instance import populate
    from .runs.tier_run import TierSettings
    handoff = populate(_settings(TierSettings, args.settings, "--settings"), args.handoff_dir)
    print(f"R3 instance A on {handoff['writer']['host']}: {len(handoff['files'])} chunk files "
          f"({handoff['pool_state']['bytes']} bytes) in {handoff['pool']}; hand-off in {args.handoff_dir}")


def _cmd_r3_resume(args) -> None:
    from .core.tiers import CROSS_INSTANCE
    from .runs.cross_instance import resume
    from .runs.tier_run import TierSettings
    summary = resume(_settings(TierSettings, args.settings, "--settings"), args.handoff_dir, args.run_dir)
    _print_windows(CROSS_INSTANCE, summary)


def _settings(cls, text: str, option: str):
    try:
        return cls(**json.loads(text))
    except (ValueError, TypeError) as exc:
        raise KvtierError(f"{option}: {exc}") from None


def _cmd_r1_reads(args) -> None:
    from .evidence.r1 import reads_plan, undecided_reads
    from .runs.r1 import ReadSettings, run_reads
    settings = _settings(ReadSettings, args.settings, "--settings")
    plan = reads_plan(dataclasses.asdict(settings))
    judge = (lambda reads_dir: undecided_reads(reads_dir, settings.load_concurrency, plan)) if plan else None  # noqa: E731
    run = run_reads(settings, args.run_dir, undecided=judge)
    looks = run["sequential"]["looks"]
    rounds = looks[-1]["after_rounds"] if looks else settings.rounds
    print(f"R1 reads {run['status']}: {args.run_dir}, {rounds} rounds ({run['sequential']['stop']})")


def _cmd_r1_resume(args) -> None:
    from .runs.r1 import ResumeSettings, run_resume
    from .runs.tier_run import TierSettings
    run = run_resume(_settings(TierSettings, args.settings, "--settings"),
                     _settings(ResumeSettings, args.resume, "--resume"), args.run_dir)
    print(f"R1 resume {run['status']}: {args.run_dir}")


def _cmd_probe(args) -> None:
    from .probes import platform_probe
    paths = _named_values(args.path, "--path", "NAME=DIRECTORY", "shared_pool=/mnt/pool")
    platform_probe.write(args.out, paths, args.model_dir, args.lmcache_build)
    print(f"wrote {args.out}")


def _cmd_lmcache_build(args) -> None:
    from dataclasses import replace

    from .stack import lmcache_build
    pinned = {"version": args.upstream_version, "filename": args.upstream_filename, "sha256": args.upstream_sha256}
    upstream = replace(lmcache_build.Upstream(), **{k: v for k, v in pinned.items() if v})
    wheel = args.upstream_wheel or lmcache_build.fetch(upstream, args.cache_dir)
    record = lmcache_build.build(wheel, upstream, args.patch, args.out)
    print(f"built lmcache {record['version']} (patch set {record['patch_set']}): {args.out}/{record['artifact']['file']}"
          f" sha256 {record['artifact']['sha256']}")


def _cmd_campaign(args) -> None:
    from .evidence import campaign_rounds
    from .runs.campaign import aggregate, runs_of
    rounds_run = len({r.round for r in runs_of(args.campaign_dir)})
    tables = aggregate(args.campaign_dir, campaign_rounds.record(campaign_rounds.read_looks(args.look), rounds_run))
    print(tables["attribution"][["tier", "concurrency", "valid", "rule"]].to_string(index=False))


def _cmd_campaign_look(args) -> None:
    from .core.atomic import write_text
    from .evidence import campaign_rounds
    settings = _settings(dict, args.settings, "--settings")
    try:
        rounds = campaign_rounds.CampaignRounds(settings["rounds"], settings.get("max_rounds"),
                                                settings.get("budget_s"))
        units = [tuple(u) for u in settings["units"]]
        only = settings.get("sequential_tiers")
        pairs = [tuple(pair) for pair in settings.get("driving_pairs") or ()]
    except (KeyError, TypeError) as exc:
        raise KvtierError(f"--settings: needs rounds, max_rounds, budget_s and units: {exc}") from exc
    kinds = [kind for unit in units for kind in unit]
    previous = None
    if args.previous:
        try:
            previous = json.loads(Path(args.previous).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise KvtierError(f"--previous {args.previous}: not a campaign look ({exc})") from exc
    found = campaign_rounds.look(args.campaign_dir, args.after, rounds, units,
                                 campaign_rounds.drivers(kinds, only, pairs), previous)
    write_text(args.out, json.dumps(found, indent=2) + "\n")
    print(f"campaign look after {args.after} rounds: {len(found['undecided'])} comparison(s) undecided; "
          + (f"stop: {found['stop']}" if found["stop"] else
             f"round {args.after + 1} measures {', '.join('+'.join(u) for u in found['next_units'])}"))


def _cmd_boundary_run(args) -> None:
    from .evidence.boundary import parse_slas, undecided_cells
    from .evidence.sequential import Plan
    from .runs.boundary import BoundaryRounds, BoundarySettings, run_rounds
    from .runs.boundary_replay import replay
    plan = BoundaryRounds(args.rounds, args.max_rounds, args.cell_budget_s)
    settings = _settings(BoundarySettings, args.settings, "--settings")
    slas = parse_slas(" ".join(args.sla))
    judge = None
    if plan.most > plan.rounds:
        sequential = Plan(plan.rounds, plan.most)
        judge = lambda frame: undecided_cells(frame, sequential, slas)  # noqa: E731 - the judge between rounds
    summaries = run_rounds(settings, plan, args.boundary_dir, undecided=judge,
                           after_rounds=lambda stacks: replay(settings, stacks, args.boundary_dir,
                                                              settings.replay_controls))
    print(f"boundary: {len(summaries)} cell runs, {args.rounds} round(s) of every cell"
          + (f", up to {plan.most} for an undecided one" if judge else "") + f", into {args.boundary_dir}")


def _cmd_boundary(args) -> None:
    from .runs.boundary import aggregate
    tables = aggregate(args.boundary_dir)
    rounds = tables["B_rounds"]
    print(rounds.groupby(["context_tokens", "concurrency", "scheme"])["ttft_p50_s"].median().to_string())


def _cmd_workload_profile(args) -> None:
    from .bench import profile
    from .core.atomic import write_text
    service = None
    if args.prefill_tok_s is not None or args.time_per_output_token_s is not None:
        if args.prefill_tok_s is None or args.time_per_output_token_s is None:
            raise KvtierError("the service-time model needs both --prefill-tok-s and --time-per-output-token-s")
        service = profile.ServiceModel(args.prefill_tok_s, args.time_per_output_token_s)
    result = profile.profile(profile.load(args.trace, args.format), service, source=str(args.trace))
    if args.out:
        write_text(args.out, json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2) if args.json else profile.text(result))


def _cmd_gate_g1(args) -> int:
    from .core.config import load_yaml
    from .gates import bom, record
    from .probes import platform_probe
    if (args.expect is None) == (args.config is None):
        raise KvtierError("give the bill of materials as --expect JSON or --config FILE (its gates.g1.expect)")
    if args.config:
        lines = ((load_yaml(args.config) or {}).get("gates") or {}).get("g1", {}).get("expect")
        if lines is None:
            raise KvtierError(f"{args.config}: no gates.g1.expect")
        source = f"{args.config}: gates.g1.expect"
    else:
        try:
            lines = json.loads(args.expect)
        except ValueError as exc:
            raise KvtierError(f"--expect: not JSON ({exc})") from None
        source = "--expect"
    if not isinstance(lines, list):
        raise KvtierError(f"{source}: expected a list of lines, got {type(lines).__name__}")
    bill = bom.load_bill(lines, source)
    if not Path(args.record).is_file():
        raise KvtierError(f"{args.record}: no platform record (`kvtier probe` writes one)")
    rows = bom.check(bill, platform_probe.read(args.record))  # read and checked against its schema
    print(bom.text(rows))
    if args.out:
        record.write(args.out, record.make("G1", bom.verdict(rows), rows, [args.record], {"expect": lines},
                                           args.note))
    return 0 if bom.verdict(rows) == bom.PASS else 1


def _cmd_gate_g2(args) -> int:
    from .core.table_io import read_table
    from .gates import g2, record
    settings = _settings(g2.G2Settings, args.settings, "--settings")
    inputs = [Path(args.storage) / g2.STORAGE_FILE]
    passes = g2.load_storage(args.storage, args.r1_reads)
    rows = g2.storage_lines(passes, settings)
    emulated_caps = g2.emulation_lines(args.storage, passes)
    if emulated_caps:  # the caps judged come from the storage run's platform record
        rows += emulated_caps
        inputs.append(Path(args.storage) / g2.PLATFORM_FILE)
    if args.r1_reads:
        inputs.append(Path(args.r1_reads) / g2.R1_FIO_FILE)
    if args.rounds:
        rows += g2.engine_lines(read_table(args.rounds), settings)
        inputs.append(args.rounds)
    print(g2.text(rows))
    if args.out:
        record.write(args.out, record.make("G2", g2.verdict(rows), rows, inputs,
                                           {"max_cv": settings.max_cv, "floors": settings.floors}))
    return 0 if g2.verdict(rows) == g2.PASS else 1


def _cmd_gate_g3(args) -> int:
    from dataclasses import asdict

    from .core.table_io import read_table
    from .gates import g3, record
    settings = _settings(g3.G3Settings, args.settings, "--settings")
    plan = None
    if args.conditions:
        from .evidence.campaign_rounds import plan_of
        try:
            plan = plan_of(json.loads(Path(args.conditions).read_text()))
        except (OSError, json.JSONDecodeError) as exc:
            raise KvtierError(f"--conditions {args.conditions}: not a campaign's conditions ({exc})") from exc
    rows = g3.lines(read_table(args.rounds), settings, plan)
    inputs = [args.rounds] + ([args.conditions] if args.conditions else [])
    if args.correctness:
        rows += g3.correctness_lines(read_table(args.correctness), settings)
        inputs.append(args.correctness)
    print(g3.text(rows, settings))
    if args.out:
        notes = [args.why] if args.why else []
        record.write(args.out, record.make("G3", g3.verdict(rows), rows, inputs, asdict(settings), notes))
    return 0 if g3.verdict(rows) == g3.PASS else 1


def _cmd_soak(args) -> None:
    import shutil

    from .runs.soak import SoakSettings, run_soak
    settings = _settings(SoakSettings, args.settings, "--settings")  # refuses bad settings before anything is removed
    if args.replace:
        if args.resume:
            raise KvtierError("--resume and --replace: one or the other")
        shutil.rmtree(args.run_dir, ignore_errors=True)
    run = run_soak(settings, args.run_dir, resume=args.resume)
    segment = run["segments"][-1]
    print(f"soak {run['status']}: {args.run_dir} (soak clock {segment['soak_from_s']:g} to {segment['soak_to_s']:g} s "
          f"of {run['config']['duration_s']:g})")


def _cmd_gate_g4(args) -> int:
    from dataclasses import asdict

    from .evidence import r5
    from .gates import g4, record
    settings = _settings(g4.G4Settings, args.settings, "--settings")
    data = r5.load(args.soak_dir)
    if data["run"]["status"] != "complete":
        raise KvtierError(f"{args.soak_dir}: the soak is {data['run']['status']!r}; resume it (kvtier soak --resume) "
                          "before judging it")
    rows = g4.lines(data, r5.windows(data), settings)
    print(g4.text(rows))
    if args.out:
        inputs = [Path(args.soak_dir) / name for name in ("run.json", "requests.jsonl", "samples.jsonl",
                                                                "events.jsonl")]
        share = r5.monitor_share(data)
        notes = [f"the telemetry thread used {100 * share:.2f} % of one CPU" if share is not None else
                 "the telemetry's CPU share is unknown (fewer than two samples)", *g4.notes(rows)]
        record.write(args.out, record.make("G4", g4.verdict(rows), rows, inputs, asdict(settings), notes))
    return 0 if g4.verdict(rows) == g4.PASS else 1


def _cmd_gate_proceed(args) -> None:
    from .gates import record
    flag = record.proceed(args.record, args.flag, stop_on_fail=bool(args.stop_on_fail),
                          stop_on_undecided=bool(args.stop_on_undecided))
    after = {record.PASS: "", record.FAIL: " after a failed gate (gates.stop_on_fail is false), every later page marked",
             record.UNDECIDED: " after an undecided gate (gates.stop_on_undecided is false), every later page marked"}
    print(f"{flag['gate']} {flag['verdict']}: later stages run{after[flag['verdict']]}")


def _cmd_r9_loads(args) -> None:
    from .runs.r9 import LoadSettings, run_loads
    run = run_loads(_settings(LoadSettings, args.settings, "--settings"), args.run_dir)
    print(f"R9 loads {run['status']}: {args.run_dir}")


def _cmd_sweep_run(args) -> None:
    from .runs.sweep import SweepSettings, run_sweep
    from .runs.tier_run import TierSettings
    run = run_sweep(_settings(SweepSettings, args.sweep, "--sweep"), _settings(TierSettings, args.settings,
                                                                               "--settings"), args.run_dir)
    print(f"bandwidth sweep {run['status']}: {args.run_dir}")


def _cmd_g2_storage(args) -> None:
    from .runs.g2_storage import StorageSettings, run_storage
    run = run_storage(_settings(StorageSettings, args.settings, "--settings"), args.run_dir)
    print(f"G2 storage {run['status']}: {args.run_dir}")


def _emulated_devices(text: str) -> list:
    try:
        tiers = json.loads(text)
    except ValueError as exc:
        raise KvtierError(f"--tiers: not JSON ({exc})") from None
    return emulated.devices_with_paths(tiers, "--tiers: a JSON object {tier: {path, size, read, write, "
                                              "read_iops?, write_iops?}}")


def _cmd_emulate(args) -> int:
    if args.action == "check":
        why = emulated.unavailable()
        print(f"emulated tiers: {'not available here: ' + why if why else 'available'}")
        return 1 if why else 0
    if args.action == "down":
        freed = emulated.teardown(args.state, remove_images=args.remove_images)
        print(f"emulated tiers down: {', '.join(freed) if freed else 'nothing was up'}")
        return 0
    emulation = emulated.Emulation(_emulated_devices(args.tiers), args.state, args.name)
    if args.action == "up":
        record = emulation.up()
        print(json.dumps(emulated.public(record), indent=1))
        return 0
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        raise KvtierError("kvtier emulate run: no command after --")
    emulation.up()
    try:
        return emulation.run(argv)
    finally:
        for line in emulated.teardown(args.state):
            print(f"emulated tiers: freed {line}", file=sys.stderr)


def _cmd_advise(args) -> int:
    from .evidence import advise, advise_tiers, boundary, sweep
    slas = [(metric, value) for metric, value in (("ttft_p50_s", args.sla_ttft_p50), ("ttft_p99_s", args.sla_ttft_p99))
            if value is not None]
    for metric, value in slas:
        if not value > 0:
            raise KvtierError(f"--sla-{metric[:-2].replace('_', '-')} {value!r}: must be > 0 s")
    if not args.boundary and not args.sweep:
        raise KvtierError("advise: give a measured boundary (--boundary B_DIR), a bandwidth sweep with the hardware "
                          "to predict for (--sweep S_DIR --tier NAME=BANDWIDTH or --g2 RECORD), or both")
    hardware = None
    if args.sweep:
        tiers = dict(advise_tiers.parse_tier(t) for t in args.tier)
        if args.g2:
            tiers = {**advise_tiers.tiers_from_g2(args.g2), **tiers}
        source = " and ".join(filter(None, [f"G2 record {args.g2}" if args.g2 else "",
                                            "the command line" if args.tier else ""]))
        hardware = advise_tiers.Hardware(tiers, args.prefill_tok_s, args.kv_bytes_per_token, source)
    elif args.tier or args.g2 or args.prefill_tok_s or args.kv_bytes_per_token:
        raise KvtierError("advise: --tier, --g2, --prefill-tok-s and --kv-bytes-per-token describe hardware for "
                          "the bandwidth sweep's model: give --sweep S_DIR too")
    try:
        profile = json.loads(Path(args.profile).read_text())
        points = advise.operating_points(profile)  # reads every key advise needs
    except FileNotFoundError:
        raise KvtierError(f"{args.profile}: profile not found (write one with `kvtier workload profile LOG "
                          "--out FILE`)") from None
    except (ValueError, KeyError, TypeError):
        raise KvtierError(f"{args.profile}: not a kvtier workload profile (expected concurrency.peak and "
                          "context_tokens.p50/p90/p99)") from None
    measured_map = advise.advise(boundary.load_grid(args.boundary), profile, slas) if args.boundary else None
    predicted = None
    if hardware is not None:
        swept = sweep.analyse(args.sweep)
        predicted = advise_tiers.predict(swept, hardware, points, args.sla_ttft_p50)
    if args.json:
        print(json.dumps(measured_map if predicted is None else {"boundary": measured_map, "tiers": predicted},
                         indent=2))
    else:
        print("\n\n".join(filter(None, [measured_map and advise.text(measured_map),
                                          predicted and advise_tiers.text(swept, hardware, predicted)])))
    good = (measured_map is not None and advise.any_met(measured_map)) or (
        predicted is not None and advise_tiers.any_beats(predicted))
    return 0 if good else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kvtier", description=__doc__.splitlines()[0] if __doc__ else None)
    from . import __version__
    parser.add_argument("--version", action="version", version=f"kvtier {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("config", help="validate a workflow config file against its schema")
    p.add_argument("config", help="YAML config file, e.g. config/config.yaml")
    p.add_argument("--show", action="store_true", help="print the config with defaults filled in")
    p.set_defaults(func=_cmd_config_check)

    p = sub.add_parser("render", help="execute an evidence notebook and render it to HTML with a manifest")
    p.add_argument("item", help="evidence item id, e.g. R2")
    p.add_argument("--notebook", required=True, help="the parameterized notebook (.ipynb)")
    p.add_argument("--out-dir", required=True, help="the item's evidence folder")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="papermill parameter (repeatable)")
    p.add_argument("--input", action="append", default=[], metavar="FILE",
                   help="raw input file to hash into the manifest (repeatable)")
    p.add_argument("--gate", action="append", default=[], metavar="RECORD",
                   help="a gate this page's data were measured after: its verdict record; a FAIL marks the page "
                        "'after a failed gate' (repeatable)")
    p.add_argument("--cell-timeout-s", type=int, default=600)
    p.add_argument("--html-template", default="kvtier", choices=["kvtier", "lab", "classic", "basic"],
                   help="nbconvert template: kvtier (code folded), or nbconvert's own")
    p.set_defaults(func=_cmd_render)

    p = sub.add_parser("index", help="write evidence/index.html and evidence/manifest.json")
    p.add_argument("--evidence-dir", default="evidence")
    p.add_argument("--item", action="append", default=[], required=True, help="rendered item id (repeatable)")
    p.add_argument("--not-run", action="append", default=[], metavar="ITEM=REASON",
                   help="an item this run did not make, and why (repeatable), e.g. S='not emulated here: not root'")
    p.set_defaults(func=_cmd_index)

    p = sub.add_parser("manifest", help="R8: write evidence/package_manifest.json (the sha256 of every file of the "
                       "package) and stamp its hash on every page")
    p.add_argument("--root", default=".", help="the project folder")
    p.add_argument("--evidence-dir", default="evidence", help="the evidence folder, relative to ROOT")
    p.set_defaults(func=_cmd_manifest)

    p = sub.add_parser("verify", help="R8: check the package against its manifest; every MODIFIED, MISSING or EXTRA "
                       "path is named, and any exits 1")
    p.add_argument("--root", default=".", help="the project folder")
    p.add_argument("--manifest", help="the manifest to check against (default: ROOT/evidence/package_manifest.json)")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("package", help="R8: write dist/kvtier-evidence-<version>-<hash>.tar.gz, byte-reproducible, "
                       "from a package that verifies")
    p.add_argument("--root", default=".", help="the project folder")
    p.add_argument("--out-dir", default="dist")
    p.add_argument("--manifest", help="the package's manifest (default: ROOT/evidence/package_manifest.json)")
    p.set_defaults(func=_cmd_package)

    from .bench.imports import FORMATS
    p = sub.add_parser("import", help="another tool's result file mapped onto kvtier's summary metrics, each "
                       "with its definition, and every field that cannot be mapped listed, into a new run folder")
    p.add_argument("format", choices=FORMATS)
    p.add_argument("file", help="the tool's result file")
    p.add_argument("--out", required=True, metavar="RUN_DIR", help="a new folder for the imported run")
    p.set_defaults(func=_cmd_import)

    p = sub.add_parser("compare", help="two runs' shared metrics side by side, each AGREE or DIFFER within a "
                       "tolerance (B is the reference); exit 1 on any DIFFER")
    p.add_argument("run_a", metavar="RUN_A", help="a kvtier run folder (summary.json) or an imported one")
    p.add_argument("run_b", metavar="RUN_B", help="the reference run, of either kind")
    p.add_argument("--window-a", help="the window of A to compare (needed when A has several)")
    p.add_argument("--window-b", help="the window of B to compare (needed when B has several)")
    p.add_argument("--tolerance", type=float, default=0.15, help="relative tolerance, of |B|")
    p.add_argument("--abs-tolerance-s", type=float, default=0.0,
                   help="absolute floor of the tolerance for times, in seconds")
    p.add_argument("--metric", action="append", help="compare only this metric (repeatable), e.g. ttft_s.p50")
    p.set_defaults(func=_cmd_compare)

    p = sub.add_parser("compare-runs", help="two runs' evidence folders: every measured comparison's verdict word in "
                       "both, marked same / decided vs undecided / opposite, and the counts; exit 1 on any opposite "
                       "word or when fewer than --min-same keep theirs")
    p.add_argument("evidence_a", metavar="EVIDENCE_A", help="an evidence folder (e.g. the shipped package's)")
    p.add_argument("evidence_b", metavar="EVIDENCE_B", help="another run's evidence folder (e.g. your rerun's)")
    p.add_argument("--all", action="store_true", help="list the comparisons that kept their word too")
    p.add_argument("--min-same", type=float, default=0.9, metavar="SHARE",
                   help="the share of comparisons in both folders that must keep their word (default 0.9)")
    p.set_defaults(func=_cmd_compare_runs)

    p = sub.add_parser("job-times", help="where a pipeline run's minutes went: each job's time and each rule's total, "
                       "from Snakemake's log")
    p.add_argument("log", nargs="?", help="a Snakemake log or its terminal output (default: the newest under "
                   "PROJECT/.snakemake/log)")
    p.add_argument("--project", default=".", help="the project folder")
    p.set_defaults(func=_cmd_job_times)

    p = sub.add_parser("screenshots", help="headless Chromium screenshots of every rendered page (a maintainer's "
                       "check of how readers see them)")
    p.add_argument("--evidence-dir", default="evidence")
    p.add_argument("--out-dir", default="screenshots")
    p.add_argument("--require-cjk", action="store_true", help="fail when Chinese is drawn as boxes")
    p.set_defaults(func=_cmd_screenshots)

    p = sub.add_parser("r2", help="print the published R2 table regenerated from its readings, and the derived figures")
    p.add_argument("--published-dir", default="raw_data/published")
    p.set_defaults(func=_cmd_r2)

    p = sub.add_parser("audit", help="give every registered claim a verdict against the published readings: the "
                       "two shipped documents by default, any document with --ledger/--readings/--sources")
    p.add_argument("--claims", "--ledger", dest="claims", default="raw_data/published/claims.yaml",
                   help="the claims ledger (workflow/schemas/claims.schema.yaml)")
    p.add_argument("--published-dir", "--readings", dest="published_dir", default="raw_data/published",
                   help="the folder of the ledger's readings tables (and of sources/ unless --sources)")
    p.add_argument("--sources", default=None, help="the folder of the documents the ledger quotes "
                   "(default: READINGS/sources)")
    p.add_argument("--out-dir", help="write verdicts.json/.csv and cross_checks.json/.csv here")
    p.add_argument("--page", metavar="DIR", help="render the audit page (notebooks/audit.ipynb) into DIR: "
                   "audit.html with its verdicts and cross-checks tables")
    p.add_argument("--runs", metavar="DIR", help="a campaign (R2_readings.csv in DIR, and R2_rounds.csv where "
                   "kept): re-evaluate ratio claims on it as a local analogue, each value with its interval over "
                   "the rounds")
    p.add_argument("--boundary", metavar="DIR", help="a boundary run (B_rounds.csv in DIR): check document 000's "
                   "boundary statements against the measured map, by shape only (does the winner change, and "
                   "which way)")
    p.set_defaults(func=_cmd_audit)

    p = sub.add_parser("bench", help="measure an OpenAI-compatible server: cold-resume sessions, multi-turn "
                       "conversations, random requests or a trace replay, into a run directory", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--base-url", help="server, e.g. http://127.0.0.1:8000")
    p.add_argument("--model", help="served model name")
    p.add_argument("--run-dir", help="new run directory (raw_data/runs/<run_id>)")
    p.add_argument("--resume", metavar="RUN_DIR", help="resume an incomplete run (its config is reused)")
    p.add_argument("--workload", choices=("cold-resume", "multi-turn", "random", "trace"), default="cold-resume")
    p.add_argument("--endpoint", choices=("completions", "chat"), default="completions")
    p.add_argument("--concurrency", type=int, nargs="+", default=[8, 16, 32], help="closed-loop concurrencies")
    p.add_argument("--rate", type=float, help="open loop: Poisson arrivals at this many requests/s (random)")
    p.add_argument("--sessions", type=int, default=16, help="cold-resume sessions; multi-turn conversation slots")
    p.add_argument("--context-tokens", type=int, default=4096, help="tokens of each session's context")
    p.add_argument("--followup-tokens", type=int, default=32, help="tokens of the follow-up turn (multi-turn: "
                   "of every turn)")
    p.add_argument("--turns", type=int, default=4, help="multi-turn: turns per conversation")
    p.add_argument("--reuse", type=float, default=1.0, help="multi-turn: fraction of later turns that return to "
                   "their conversation (the rest open a new one)")
    p.add_argument("--output-tokens", type=int, default=32, help="tokens to generate per request")
    p.add_argument("--requests", type=int, default=64, help="random requests per window")
    p.add_argument("--input-tokens", type=int, default=512, help="prompt tokens of each random request")
    p.add_argument("--trace", help="Mooncake trace (JSONL)")
    p.add_argument("--time-scale", type=float, default=1.0, help="multiply trace arrival times")
    p.add_argument("--length-scale", type=float, default=1.0, help="multiply trace input/output lengths")
    p.add_argument("--max-requests", type=int, help="replay only the first N trace requests")
    p.add_argument("--max-input-tokens", type=int, help="cap trace prompts (the server's max model length)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timeout-s", type=float, default=600.0, help="longest a request may take")
    p.add_argument("--ttft-sla-s", type=float, help="TTFT SLA for goodput")
    p.add_argument("--metrics", action="append", default=[], metavar="NAME=URL",
                   help="/metrics to snapshot around each window (repeatable), e.g. vllm=http://HOST:PORT/metrics")
    p.add_argument("--evict", default="none",
                   help="cold-resume eviction before each resume: none, reset-prefix-cache, or a shell command")
    p.add_argument("--populate-url", help="cold resume across instances: populate through this server (one that "
                   "shares the KV pool), resume through --base-url")
    p.set_defaults(func=_cmd_bench)

    p = sub.add_parser("model", help="generate the default small Llama model locally (random weights, trained "
                       "tokenizer; nothing from a hub)", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", required=True, help="model directory to write")
    from dataclasses import fields as _fields

    from .stack.model import ModelSpec
    for f in _fields(ModelSpec):
        p.add_argument(f"--{f.name.replace('_', '-')}", dest=f.name, type=type(f.default), default=f.default)
    p.set_defaults(func=_cmd_model)

    p = sub.add_parser("tier-run", help="one tier's cold-resume run on real vLLM (+ LMCache): servers started, "
                       "measured and stopped; or two tiers one server start measures, one after the other")
    p.add_argument("tier", nargs="+", help="recompute, engine, dram, local_disk or shared_pool; or `recompute "
                   "engine` or `dram local_disk` on the same servers (R3's cross_instance: r3-populate, r3-resume)")
    p.add_argument("--run-dir", required=True, nargs="+", help="one run directory per tier, in their order")
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.tier_run.TierSettings")
    p.set_defaults(func=_cmd_tier_run)

    p = sub.add_parser("r3-populate", help="R3, instance A: populate every session onto the shared pool, stop, and "
                       "write the hand-off (the run so far, the pool's chunk files) for r3-resume")
    p.add_argument("--handoff-dir", required=True, help="new directory for the hand-off")
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.tier_run.TierSettings")
    p.set_defaults(func=_cmd_r3_populate)

    p = sub.add_parser("r3-resume", help="R3, instance B (another process, job or node on the same pool path): "
                       "check the pool holds what A left, then resume every session from it at each concurrency")
    p.add_argument("--handoff-dir", required=True, help="r3-populate's hand-off directory")
    p.add_argument("--run-dir", required=True, help="new run directory: A's run, completed by B")
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.tier_run.TierSettings")
    p.set_defaults(func=_cmd_r3_resume)

    p = sub.add_parser("r1-reads", help="R1 (a) and (b): cold loads of N chunks by one LMCache fs L2 worker, "
                       "upstream vs patched, beside fio's direct reads per queue depth, and checkpoint saves")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.r1.ReadSettings")
    p.set_defaults(func=_cmd_r1_reads)

    p = sub.add_parser("r1-resume", help="R1: resume of 12k-token sessions from L2 (a local_disk tier run), then "
                       "the raw read time of their chunk files")
    p.add_argument("--run-dir", required=True)
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.tier_run.TierSettings")
    p.add_argument("--resume", default="{}", help="JSON of kvtier.runs.r1.ResumeSettings")
    p.set_defaults(func=_cmd_r1_resume)

    p = sub.add_parser("probe", help="record the platform (CPU, memory, NUMA, accelerators, the devices behind "
                       "each path, kernel, versions, model hash) as JSON validated by its schema (evidence R4)")
    p.add_argument("--out", required=True, help="JSON file to write, e.g. RUN_DIR/probes/platform.json")
    p.add_argument("--path", action="append", default=[], metavar="NAME=DIRECTORY",
                   help="a tier path whose mount and block device to record (repeatable)")
    p.add_argument("--model-dir", help="the served model's directory (its config hash is recorded)")
    p.add_argument("--lmcache-build", help="the LMCache build the servers run (its version and patch set)")
    p.set_defaults(func=_cmd_probe)

    p = sub.add_parser("lmcache-build", help="build LMCache from the pinned upstream wheel (sha256-checked) plus "
                       "patches, installed under OUT/site for the LMCache server")
    p.add_argument("--out", required=True, help="variant directory to build, e.g. build/lmcache/patched")
    p.add_argument("--patch", action="append", default=[], help="a patch to apply, in order (repeatable); none: "
                   "the upstream release as is")
    p.add_argument("--cache-dir", default="build/lmcache/upstream-wheel", help="where the upstream wheel is kept")
    p.add_argument("--upstream-wheel", help="use this upstream wheel file instead of downloading it")
    p.add_argument("--upstream-version", help="the upstream release (default: the pinned one)")
    p.add_argument("--upstream-filename", help="the upstream wheel's file name (default: the pinned one)")
    p.add_argument("--upstream-sha256", help="the upstream wheel's expected sha256 (default: the pinned one)")
    p.set_defaults(func=_cmd_lmcache_build)

    p = sub.add_parser("campaign", help="aggregate a campaign's tier runs: R2 readings, attribution, correctness")
    p.add_argument("campaign_dir")
    p.add_argument("--look", action="append", default=[], help="a look of its sequential rounds (kvtier "
                   "campaign-look; repeatable): kept in its conditions, and the pages' intervals are the plan's")
    p.set_defaults(func=_cmd_campaign)

    p = sub.add_parser("campaign-look", help="sequential rounds: judge a campaign's comparisons after K rounds and "
                       "choose the units the next round measures (kvtier.evidence.campaign_rounds)")
    p.add_argument("campaign_dir")
    p.add_argument("--after", type=int, required=True, help="the rounds measured so far (K)")
    p.add_argument("--settings", required=True, help="JSON: rounds, max_rounds, budget_s, units (the server "
                   "units, kvtier.core.tiers.server_units) and sequential_tiers (those whose comparisons drive "
                   "rounds; null: every one)")
    p.add_argument("--previous", help="the look after K - 1 rounds (where the budget's clock started)")
    p.add_argument("--out", required=True, help="where the look goes (JSON)")
    p.set_defaults(func=_cmd_campaign_look)

    p = sub.add_parser("boundary-run", help="evidence B's grid on real vLLM (+ LMCache): engine_only and offload "
                       "side by side, multi-turn cells of concurrency x context, in rounds")
    p.add_argument("--rounds", type=int, default=1, help="rounds of the whole grid, each in its own order")
    p.add_argument("--max-rounds", type=int, help="sequential: after --rounds, one more round at a time of each "
                   "cell still undecided, up to this many (kvtier.evidence.sequential); default: --rounds")
    p.add_argument("--cell-budget-s", type=float, help="sequential: no further round for a cell once its rounds "
                   "took this many seconds (both schemes)")
    p.add_argument("--sla", action="append", default=[], metavar="METRIC=SECONDS", help="sequential: a cell "
                   "where a scheme's verdict against this SLA is undecided gets more rounds too (repeatable)")
    p.add_argument("--boundary-dir", required=True, help="where the cells go (<dir>/cells/, new)")
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.boundary.BoundarySettings")
    p.set_defaults(func=_cmd_boundary_run)

    p = sub.add_parser("soak", help="G4's stability soak (R5): the offload stack under open-loop arrivals for a "
                       "duration, with scheduled faults, telemetry every few seconds; resumable")
    p.add_argument("--run-dir", required=True, help="the soak's run directory (new, or the one to resume)")
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.soak.SoakSettings")
    p.add_argument("--resume", action="store_true", help="continue the soak stopped in --run-dir")
    p.add_argument("--replace", action="store_true", help="remove what --run-dir holds and soak anew")
    p.set_defaults(func=_cmd_soak)

    p = sub.add_parser("boundary", help="aggregate a boundary run's rounds: B_rounds.csv, attribution, outputs")
    p.add_argument("boundary_dir")
    p.set_defaults(func=_cmd_boundary)

    p = sub.add_parser("workload", help="what a workload asks of the KV cache (document 000's first step)")
    workload = p.add_subparsers(dest="workload_command", required=True, metavar="SUBCOMMAND")
    q = workload.add_parser("profile", help="context lengths, concurrency peak, prefix reuse and session returns "
                            "of a request log (Mooncake JSONL, or a plain JSONL/CSV export)")
    q.add_argument("trace", help="the request log")
    q.add_argument("--format", choices=("mooncake", "jsonl", "csv"), default=None,
                   help="default: from the file (.csv; Mooncake's fields; start_s/input_tokens/output_tokens)")
    q.add_argument("--prefill-tok-s", type=float, default=None,
                   help="service-time model for a log without end times: this platform's prefill rate")
    q.add_argument("--time-per-output-token-s", type=float, default=None,
                   help="service-time model for a log without end times: this platform's time per output token")
    q.add_argument("--json", action="store_true", help="print the profile as JSON")
    q.add_argument("--out", default=None, help="also write the JSON profile to this file")
    q.set_defaults(func=_cmd_workload_profile)

    p = sub.add_parser("advise", help="which scheme (engine memory or offload) meets a TTFT SLA at a workload's "
                       "operating points, read off a measured boundary grid (--boundary); and, for storage you "
                       "describe (--tier, --g2), where each tier beats recompute, predicted by the bandwidth sweep's "
                       "model (--sweep); exit 0 when a scheme meets the SLA or a tier is predicted to (to beat "
                       "recompute, without an SLA) inside the validated range, 1 when none",
                       epilog="example: kvtier advise --profile profile.json --sla-ttft-p50 2 --sweep "
                       "raw_data/runs/<run>/S --tier nvme=7GB/s --tier pool=12.5GB/s --prefill-tok-s 40000")
    p.add_argument("--sla-ttft-p50", type=float, default=None, help="TTFT p50 SLA, seconds")
    p.add_argument("--sla-ttft-p99", type=float, default=None, help="TTFT p99 SLA, seconds (the measured map only: "
                   "the sweep's model predicts p50)")
    p.add_argument("--profile", required=True, help="a workload profile (kvtier workload profile --out)")
    p.add_argument("--boundary", default=None, help="a boundary run's directory (with B_rounds.csv): engine memory "
                   "against offload, measured here")
    p.add_argument("--sweep", default=None, help="a bandwidth sweep run's directory (kvtier sweep-run): its service "
                   "model predicts each described tier against recompute, with its held-out error")
    p.add_argument("--tier", action="append", default=[], metavar="NAME=BANDWIDTH",
                   help="a storage tier to predict for and its read bandwidth, e.g. nvme=7GB/s (repeatable)")
    p.add_argument("--g2", default=None, metavar="RECORD", help="another machine's G2 record (evidence/gates/"
                   "G2.json): each storage path's best sequential read becomes a tier")
    p.add_argument("--prefill-tok-s", type=float, default=None, help="the engine's prefill rate (tokens/s, "
                   "concurrency x context / recompute TTFT p50): recompute and the floor scaled from this machine's")
    p.add_argument("--kv-bytes-per-token", type=int, default=None, help="the served model's KV bytes a token "
                   "(default: the sweep's model's)")
    p.add_argument("--json", action="store_true", help="print the advice as JSON (with --sweep: {boundary, tiers})")
    p.set_defaults(func=_cmd_advise)

    p = sub.add_parser("gate-g1", help="G1 arrival acceptance: a platform record against a bill of materials; "
                       "exit 0 when every line passes, 1 when one fails")
    p.add_argument("--record", required=True, help="a platform record (probes/platform.json of a run, or "
                   "`kvtier probe --out`)")
    p.add_argument("--expect", default=None, help="the bill as JSON: [{field, op, value, why}, ...]")
    p.add_argument("--config", default=None, help="a config file whose gates.g1.expect is the bill (e.g. "
                   "config/examples/mi308x.yaml)")
    p.add_argument("--out", default=None, help="write the verdict record (JSON) here")
    p.add_argument("--note", action="append", default=[], help="a sentence the record and the gates page carry "
                   "(repeatable), e.g. whether the tiers are emulated here and why not")
    p.set_defaults(func=_cmd_gate_g1)

    p = sub.add_parser("r9-loads", help="R9: vLLM loading one model's weights from each tier path, cold and warm, "
                       "beside the raw read time of the weight files, repeated")
    p.add_argument("--run-dir", required=True, help="where the run goes (new)")
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.r9.LoadSettings")
    p.set_defaults(func=_cmd_r9_loads)

    p = sub.add_parser("sweep-run", help="the bandwidth sweep: cold-resume TTFT from the emulated local_disk tier "
                       "at each read cap, beside recompute and DRAM, per context, in rounds (needs the config's "
                       "emulation on)",
                       description="Example: kvtier sweep-run --run-dir raw_data/runs/local/sweep --settings "
                       "'{\"model_dir\": \"models/kvtier-model\"}' --sweep '{\"contexts\": [1024], "
                       "\"read_caps\": [\"20MB/s\", \"200MB/s\"]}'")
    p.add_argument("--run-dir", required=True, help="where the run goes (new)")
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.tier_run.TierSettings (the servers)")
    p.add_argument("--sweep", default="{}", help="JSON of kvtier.runs.sweep.SweepSettings (contexts, read_caps, "
                   "concurrency, sessions, rounds)")
    p.set_defaults(func=_cmd_sweep_run)

    p = sub.add_parser("emulate", help="emulated storage tiers: each tier path on a loop-mounted ext4 image whose "
                       "bandwidth a cgroup's block throttle caps (needs root)",
                       description="Example: kvtier emulate run --tiers '{\"shared_pool\": {\"path\": "
                       "\"pools/shared_pool\", \"size\": \"1GiB\", \"read\": \"100MB/s\", \"write\": "
                       "\"100MB/s\"}}' -- fio ...")
    emulate = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    state = argparse.ArgumentParser(add_help=False)
    state.add_argument("--state", default=emulated.DEFAULT_STATE, help="where the emulation records what it set up")
    tiers = argparse.ArgumentParser(add_help=False)
    tiers.add_argument("--tiers", required=True, help="JSON {tier: {path, size, read, write, read_iops?, "
                       "write_iops?}}, units as in config (2GiB, 200MB/s)")
    tiers.add_argument("--name", default="tiers", help="the cgroup's name (kvtier-emulated-NAME)")
    q = emulate.add_parser("check", help="can this machine emulate tiers; exit 1, saying why, where it cannot")
    q.set_defaults(func=_cmd_emulate)
    q = emulate.add_parser("up", parents=[state, tiers], help="set up the devices and the cgroup; print the caps "
                           "in force")
    q.set_defaults(func=_cmd_emulate)
    q = emulate.add_parser("down", parents=[state], help="free what --state records (after a killed run)")
    q.add_argument("--remove-images", action="store_true", help="also delete the image files")
    q.set_defaults(func=_cmd_emulate)
    q = emulate.add_parser("run", parents=[state, tiers], help="up, the command after -- inside the cgroup, down; "
                           "exit with the command's status")
    q.add_argument("argv", nargs=argparse.REMAINDER, help="-- the command to run inside the cgroup")
    q.set_defaults(func=_cmd_emulate)

    p = sub.add_parser("g2-storage", help="G2's storage baseline: fio's direct sequential write and read and 4 KiB "
                       "random read per tier path and queue depth, repeated")
    p.add_argument("--run-dir", required=True, help="where the run goes (new)")
    p.add_argument("--settings", required=True, help="JSON of kvtier.runs.g2_storage.StorageSettings")
    p.set_defaults(func=_cmd_g2_storage)

    p = sub.add_parser("gate-g2", help="G2 single-node baseline: every storage pass and baseline TTFT stable over "
                       "its repetitions and over its floor; exit 0 on PASS, 1 on FAIL")
    p.add_argument("--storage", required=True, help="a g2-storage run directory")
    p.add_argument("--r1-reads", default=None, help="an R1 reads run directory (its fio rounds on the pool path)")
    p.add_argument("--rounds", default=None, help="a campaign's R2_rounds.csv (recompute and engine TTFT)")
    p.add_argument("--settings", default="{}", help="JSON of kvtier.gates.g2.G2Settings")
    p.add_argument("--out", default=None, help="write the verdict record (JSON) here")
    p.set_defaults(func=_cmd_gate_g2)

    p = sub.add_parser("gate-g3", help="G3 main gate: a candidate tier against a baseline tier over a campaign's "
                       "rounds, by intervals; exit 0 on PASS, 1 on FAIL or UNDECIDED")
    p.add_argument("--rounds", required=True, help="a campaign's R2_rounds.csv")
    p.add_argument("--correctness", default=None, help="the campaign's correctness.csv: a line per tier compared, "
                   "its greedy outputs identical to recompute's")
    p.add_argument("--settings", required=True, help="JSON of kvtier.gates.g3.G3Settings")
    p.add_argument("--conditions", default=None, help="the campaign's conditions.json: under sequential rounds, "
                   "the intervals are those of its plan (kvtier.evidence.sequential)")
    p.add_argument("--why", default=None, help="why this candidate and baseline (kept in the record)")
    p.add_argument("--out", default=None, help="write the verdict record (JSON) here")
    p.set_defaults(func=_cmd_gate_g3)

    p = sub.add_parser("gate-g4", help="G4 stability soak: failures, drift, growth, the pool and every injected "
                       "fault of a finished soak; exit 0 on PASS, 1 on FAIL")
    p.add_argument("--soak-dir", required=True, help="a soak's run directory (kvtier soak)")
    p.add_argument("--settings", default="{}", help="JSON of kvtier.gates.g4.G4Settings")
    p.add_argument("--out", default=None, help="write the verdict record (JSON) here")
    p.set_defaults(func=_cmd_gate_g4)

    p = sub.add_parser("gate-proceed", help="let what comes after a gate start: write FLAG when RECORD passed; "
                       "on FAIL exit non-zero naming the failed lines (unless --stop-on-fail 0), on UNDECIDED too "
                       "with --stop-on-undecided 1")
    p.add_argument("record", help="a gate's verdict record")
    p.add_argument("--flag", required=True, help="the flag file the next stages need")
    p.add_argument("--stop-on-fail", type=int, choices=(0, 1), default=1, help="1: a FAIL stops (exit 2, no "
                   "flag); 0: the flag is written after a FAIL too, marked so (gates.stop_on_fail: false)")
    p.add_argument("--stop-on-undecided", type=int, choices=(0, 1), default=0, help="1: an UNDECIDED gate stops "
                   "as a FAIL does (gates.stop_on_undecided: true); 0: the flag is written, marked so")
    p.set_defaults(func=_cmd_gate_proceed)

    p = sub.add_parser("notebook-sync", help="regenerate NOTEBOOK.ipynb from its jupytext NOTEBOOK.py and "
                       "execute it, keeping the outputs that nbval checks (maintainers)")
    p.add_argument("py", nargs="+", help="notebooks/<item>.py")
    p.set_defaults(func=_cmd_notebook_sync)
    return parser


# The commands that measure: each holds the node's measurement lock while it runs (kvtier.core.node_lock), so
# that two never overlap on one machine, whichever processes or scheduler jobs started them.
MEASURING = ("tier-run", "r3-populate", "r3-resume", "r1-reads", "r1-resume", "boundary-run", "g2-storage", "r9-loads",
             "soak", "sweep-run")
# The commands that run inside the emulated tiers when the workflow asks for them (kvtier.stack.emulated, its
# ENV_PLAN): every measuring one but R1's, and the platform probe, which records the caps in force. R1 sets LMCache's
# read path against the device itself (the patch against upstream and fio): under a cap every build and fio would
# read at the cap, and nothing it asks could show.
NOT_EMULATED = ("r1-reads", "r1-resume")
EMULATED = (*(c for c in MEASURING if c not in NOT_EMULATED), "probe")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # SIGTERM (Snakemake cancelling a job, a scheduler's kill) unwinds like Ctrl-C, so that servers are stopped
    # and runs are marked incomplete instead of being left behind.
    interrupt.interrupt_on(signal.SIGTERM)
    try:
        if args.command in MEASURING and os.environ.get("KVTIER_NO_MEASURE"):
            # The pipeline with `measure: false` (a replay of a package's raw runs) reached a measurement anyway.
            target = next((getattr(args, a) for a in ("run_dir", "boundary_dir", "out") if getattr(args, a, None)),
                          "its run")
            target = ", ".join(map(str, target)) if isinstance(target, list) else target
            raise KvtierError(f"`kvtier {args.command}` would measure {target}, but this run only renders what "
                              "raw_data holds (measure: false, KVTIER_NO_MEASURE set): that run is missing or "
                              "incomplete. Measure it with measure: true, or render without it.")
        if args.command in MEASURING or (args.command in EMULATED and os.environ.get(emulated.ENV_PLAN)):
            what = f"kvtier {args.command}"
            with node_lock.hold(what), (emulated.around_command(what) if args.command in EMULATED
                                        else emulated.outside(what)):
                status = args.func(args)
        else:
            status = args.func(args)
    except KvtierError as exc:
        print(f"kvtier: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"kvtier: {args.command} interrupted", file=sys.stderr)
        return 130
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    sys.exit(main())
