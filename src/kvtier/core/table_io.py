"""Tables as CSV files in one fixed dialect, written atomically, so that reruns compare byte for byte (campaign
tables under raw_data/runs/ and evidence tables alike)."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from .atomic import write_text


def write_table(frame: pd.DataFrame, path: str | os.PathLike) -> Path:
    # repr-exact floats, empty cell for NaN (missing is never written as zero), '\n' line ends.
    return write_text(path, frame.to_csv(index=False, lineterminator="\n", na_rep=""))


def read_table(path: str | os.PathLike) -> pd.DataFrame:
    return pd.read_csv(path, keep_default_na=True)
