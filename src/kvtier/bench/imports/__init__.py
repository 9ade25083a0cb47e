"""Other tools' results in kvtier's terms: one module per tool's format (a parser and nothing else), `common` for
the imported run they all write, and `metrics` for the comparable metrics of kvtier's own runs.

    vllm_bench   `vllm bench serve --save-result` (its result JSON)

Each maps what it can onto kvtier's summary metrics (ttft_s.p50, output_tok_s.aggregate, ...; seconds), keeps the
tool's own definition of each mapped metric beside it, and lists every field it could not map, with its value.
"""

from .common import FORMATS, import_file  # noqa: F401
