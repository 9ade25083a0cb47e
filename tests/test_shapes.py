"""Document 000's boundary statements checked by shape (kvtier.audit.shapes) on synthetic grids with known answers."""

import pandas as pd
import pytest

from kvtier.audit import shapes
from kvtier.core.errors import KvtierError

NOISE = (0.98, 1.0, 1.02)


def grid(engine: dict, offload: dict) -> pd.DataFrame:
    """{(context, concurrency): TTFT p50 s} per scheme, three rounds; throughput is its inverse."""
    return pd.DataFrame([{"scheme": s, "context_tokens": ctx, "concurrency": c, "round": r + 1,
                          "ttft_p50_s": v * n, "output_tok_s": 1 / (v * n)}
                         for s, cells in (("engine_only", engine), ("offload", offload))
                         for (ctx, c), v in cells.items() for r, n in enumerate(NOISE)])


def statement(check: str, metric: str = "ttft_p50_s") -> dict:
    return {"id": "s", "check": check, "metric": metric, "low_end": "engine_only", "claims": ["c"], "quote": "q"}


ENGINE_LOW = ({(1024, 1): 0.2, (1024, 8): 3.0, (4096, 1): 0.5, (4096, 8): 6.0},
              {(1024, 1): 0.4, (1024, 8): 1.0, (4096, 1): 0.4, (4096, 8): 2.0})


def test_the_document_shape_agrees_along_concurrency_and_context():
    g = grid(*ENGINE_LOW)
    along_c = shapes.evaluate(statement("along_concurrency"), g)
    assert along_c["verdict"] == shapes.AGREES
    assert along_c["reasons"][0].startswith("AGREES: context 1024: engine_only wins up to concurrency 1")
    assert "context 4096: no crossover (offload wins or ties" in along_c["reasons"][1]
    assert shapes.evaluate(statement("along_context"), g)["verdict"] == shapes.AGREES
    assert shapes.evaluate(statement("low_corner"), g)["verdict"] == shapes.AGREES


def test_the_mirror_image_contradicts():
    engine, offload = ENGINE_LOW
    g = grid(offload, engine)  # the schemes swapped: offload wins low, the engine high
    assert shapes.evaluate(statement("along_concurrency"), g)["verdict"] == shapes.CONTRADICTS
    assert shapes.evaluate(statement("low_corner"), g)["verdict"] == shapes.CONTRADICTS


def test_lines_that_disagree_are_mixed_and_no_change_is_not_shown():
    g = grid({(1024, 1): 0.2, (1024, 8): 3.0, (4096, 1): 0.5, (4096, 8): 1.0},
             {(1024, 1): 0.4, (1024, 8): 1.0, (4096, 1): 0.25, (4096, 8): 2.0})
    assert shapes.evaluate(statement("along_concurrency"), g)["verdict"] == shapes.MIXED
    flat = grid({(1024, 1): 1.0, (1024, 8): 2.0}, {(1024, 1): 0.5, (1024, 8): 1.0})
    result = shapes.evaluate(statement("along_concurrency"), flat)
    assert result["verdict"] == shapes.NOT_SHOWN
    assert result["reasons"] == ["context 1024: no crossover (offload wins or ties at every measured concurrency)"]


def test_a_tie_at_the_low_corner_agrees_and_throughput_is_read_the_other_way():
    tie = grid({(1024, 1): 0.4, (1024, 8): 3.0}, {(1024, 1): 0.4, (1024, 8): 1.0})
    corner = shapes.evaluate(statement("low_corner"), tie)
    assert corner["verdict"] == shapes.AGREES and "tie" in corner["reasons"][0]
    # By throughput (higher wins) the same grid agrees too: the engine serves more at 1, offload at 8.
    assert shapes.evaluate(statement("along_concurrency", "output_tok_s"), grid(*ENGINE_LOW))["verdict"] == \
        shapes.AGREES


def test_bad_statements_and_grids_are_refused():
    with pytest.raises(KvtierError, match="unknown check 'diagonal'"):
        shapes.evaluate(statement("diagonal"), grid(*ENGINE_LOW))
    one_scheme = grid(*ENGINE_LOW)
    one_scheme = one_scheme[one_scheme["scheme"] == "engine_only"]
    with pytest.raises(KvtierError, match="no cell measured for both schemes"):
        shapes.evaluate(statement("low_corner"), one_scheme)
    table = shapes.table([shapes.evaluate(statement("low_corner"), grid(*ENGINE_LOW))])
    assert list(table.columns[:2]) == ["id", "verdict"]
