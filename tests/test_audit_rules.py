"""The audit's building blocks: rounding, comparison rules, formulas."""

import math

import pytest

from kvtier.audit.formula import FormulaError, Ref, TableShape, Unpublished, evaluate, expand_refs, parse
from kvtier.audit.rules import compare, round_half_up

SHAPES = {"R2": TableShape(("ttft_p50_s", "output_tok_s"), ("tier", "concurrency"), True),
          "B": TableShape(("vram_ttft_s",), ("concurrency",), True),
          "R4": TableShape(("tensor_parallel",), (), False)}


@pytest.mark.parametrize("value, decimals, expected", [
    (2.5, 0, 3.0), (0.125, 2, 0.13), (25.9587, 0, 26.0), (19.8539, 0, 20.0), (8.6354, 1, 8.6), (-21.95, 0, -22.0),
    (1.96319, 1, 2.0), (149.48, 1, 149.5),
])
def test_round_half_up_is_the_paper_rule(value, decimals, expected):
    assert round_half_up(value, decimals) == expected


def test_range_rule_reports_how_the_range_covers_the_values():
    assert compare("range", [29, 40], [28.93, 39.74, 32.84], 0).covers == "exactly"
    loose = compare("range", [7, 26], [7.53, 11.85, 26.35], 0)
    assert not loose.matches and loose.covers == "loosely" and loose.text == "8–26"
    outside = compare("range", [8.6, 20], [19.85, 12.61, 5.673], [1, 0])
    assert outside.covers == "not" and outside.text == "5.7–20"


def test_other_rules():
    assert compare("round", 1.9, [6.40 / 3.26], 1).matches is False
    assert compare("exact", 7.53, [7.53]).matches and not compare("exact", 4.1, [7.53]).matches
    assert compare("exact", "7.2", ["7.2"]).matches
    assert compare("at_least", 25, [25.96, 31.5]).matches and not compare("at_least", 26, [25.96]).matches
    assert compare("set", [16], [16]).matches and not compare("set", [16], [8, 16]).matches


def lookup_from(table):
    def lookup(ref, c):
        if ref.table == "R4":
            raise Unpublished("R4")
        return table.get(ref.key, math.nan)
    return lookup


def test_formula_evaluates_per_concurrency_and_lists():
    readings = {("shared_pool", 8): 7.53, ("local_disk", 8): 10.17, ("shared_pool", 16): 11.85}
    f = parse("[R2.ttft_p50_s[local_disk, c] / R2.ttft_p50_s[shared_pool, c], R2.ttft_p50_s[shared_pool, c]]",
              SHAPES, set())
    values = evaluate(f, lookup_from(readings), None, [8, 16])
    assert values[0] == pytest.approx(10.17 / 7.53) and values[1] == 7.53
    assert math.isnan(values[2]) and values[3] == 11.85
    assert expand_refs(f, [8, 16]) == {Ref("R2", "ttft_p50_s", (t, c)) for t in ("local_disk", "shared_pool")
                                       for c in (8, 16)}


def test_aggregates():
    readings = {(8,): 3.2, (16,): 8.7}
    vram = {(8,): 4.1, (16,): 6.2}

    def lookup(ref, c):
        return (readings if ref.column == "vram_ttft_s" else vram).get(ref.key, math.nan)
    shapes = dict(SHAPES, B=TableShape(("vram_ttft_s", "offload_ttft_s"), ("concurrency",), True))
    assert evaluate(parse("min_c(B.offload_ttft_s[c] < B.vram_ttft_s[c])", shapes, set()), lookup, None,
                    [8, 16, 32]) == [16]
    assert evaluate(parse("measured_at(B.vram_ttft_s[c])", shapes, set()), lookup, None, [8, 16, 32]) == [8, 16]


def test_unpublished_tables_raise_on_evaluation():
    with pytest.raises(Unpublished):
        evaluate(parse("R4.tensor_parallel", SHAPES, set()), lookup_from({}), None, None)


@pytest.mark.parametrize("text, message", [
    ("R2.ttft_p90_s[shared_pool, 8]", "unknown column 'ttft_p90_s' of table R2"),
    ("R2.ttft_p50_s[fx100, 8]", "unknown tier 'fx100'"),
    ("R3.ttft_p50_s[shared_pool, 8]", "unknown table 'R3'"),
    ("R2.ttft_p50_s[shared_pool]", "takes 2 key(s)"),
    ("__import__('os')", "is not allowed"),
    ("R2.ttft_p50_s[shared_pool, 8] ** 2", "is not allowed"),
    ('claim["nope"]', "no claim has that id"),
    ("R2.ttft_p50_s[shared_pool, 8] <", "not a valid expression"),
])
def test_formula_refuses_what_does_not_exist(text, message):
    with pytest.raises(FormulaError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse(text, SHAPES, {"known"})
