"""Small HTTP calls with JSON or text bodies (urllib, no dependency): readiness checks, /v1/models, /tokenize,
/metrics, /reset_prefix_cache. The measuring client's streaming requests have their own connection code
(kvtier.bench.http); this is for everything else.

Errors are urllib's: `urllib.error.HTTPError` for a status >= 400, `URLError`/`OSError` for a server that cannot
be reached, `ValueError` for a body that is not JSON. Callers name what failed in their own terms.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

# What a call can raise besides a bug: catch these to turn a failed call into a message.
ERRORS = (urllib.error.URLError, OSError, ValueError)


def request(url: str, payload: Any = None, method: str | None = None, timeout_s: float = 10.0) -> bytes:
    """The response body of `url`: GET, or POST with `payload` as a JSON body (or `method` as given)."""
    data = None if payload is None else json.dumps(payload).encode()
    headers = {"Content-Type": "application/json"} if data is not None else {}
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    with urllib.request.urlopen(req, timeout=timeout_s) as response:
        return response.read()


def get_json(url: str, timeout_s: float = 10.0) -> Any:
    return json.loads(request(url, timeout_s=timeout_s))


def post_json(url: str, payload: Any, timeout_s: float = 10.0) -> Any:
    return json.loads(request(url, payload, timeout_s=timeout_s))


def get_text(url: str, timeout_s: float = 10.0) -> str:
    return request(url, timeout_s=timeout_s).decode("utf-8", "replace")


def answers(url: str, timeout_s: float = 2.0) -> bool:
    """Whether `url` answers a GET with a success status (a readiness check: never raises)."""
    try:
        request(url, timeout_s=timeout_s)
        return True
    except ERRORS:
        return False
