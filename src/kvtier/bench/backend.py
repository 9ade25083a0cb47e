"""OpenAI-compatible requests (/v1/completions, /v1/chat/completions) and the parsing of their SSE streams."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass

from .http import Connection, Endpoint, HTTPError

try:
    import msgspec

    _decode = msgspec.json.decode
    _DecodeError = msgspec.DecodeError
except ImportError:  # pragma: no cover
    _decode, _DecodeError = json.loads, ValueError

ERROR_BODY_LIMIT = 2000
ENDPOINTS = {"completions": "/v1/completions", "chat": "/v1/chat/completions"}


@dataclass(frozen=True)
class Prepared:
    """A request ready to send: its HTTP bytes are built once, before the clock starts."""
    request_id: str
    phase: str
    payload: bytes
    labels: dict


def body(endpoint: str, model: str, prompt, max_tokens: int, ignore_eos: bool = True,
         temperature: float = 0.0) -> dict:
    """Greedy, streaming, with usage in the last chunk. `prompt` is token ids (completions) or text."""
    common = {"model": model, "max_tokens": max_tokens, "temperature": temperature, "stream": True,
              "stream_options": {"include_usage": True}, "ignore_eos": ignore_eos}
    if endpoint == "completions":
        return {**common, "prompt": prompt}
    if endpoint == "chat":
        if not isinstance(prompt, str):
            raise ValueError("the chat endpoint takes text prompts")
        return {**common, "messages": [{"role": "user", "content": prompt}]}
    raise ValueError(f"unknown endpoint {endpoint!r} (one of: {', '.join(ENDPOINTS)})")


def prepare(server: Endpoint, endpoint: str, request_id: str, phase: str, payload: dict, labels: dict) -> Prepared:
    data = json.dumps(payload, separators=(",", ":")).encode()
    return Prepared(request_id, phase, server.request_bytes("POST", ENDPOINTS[endpoint], data), labels)


class MalformedStream(Exception):
    """The server's event stream is not what the OpenAI API promises."""


def _error(record: dict, kind: str, message: str) -> dict:
    record["error"] = {"class": kind, "message": message[:ERROR_BODY_LIMIT]}
    return record


def _token_text(event: dict) -> str:
    choices = event.get("choices") or []
    if not choices:
        return ""
    choice = choices[0]
    if "text" in choice:
        return choice["text"] or ""
    delta = choice.get("delta") or {}
    return delta.get("content") or ""


async def execute(conn: Connection, prepared: Prepared, record: dict, timeout_s: float) -> dict:
    """Send one request and fill `record`. Never raises for a failed request: the failure is recorded."""
    try:
        await asyncio.wait_for(_exchange(conn, prepared, record), timeout_s)
    except asyncio.TimeoutError:
        conn.close()
        _error(record, "Timeout", f"no complete response within {timeout_s:g} s")
    except (ConnectionRefusedError, ConnectionResetError, BrokenPipeError, OSError) as exc:
        conn.close()
        _error(record, type(exc).__name__, str(exc) or type(exc).__name__)
    except (HTTPError, MalformedStream) as exc:
        conn.close()
        _error(record, type(exc).__name__, str(exc))
    if record["end_ns"] is None:
        record["end_ns"] = time.monotonic_ns()
    return record


async def _exchange(conn: Connection, prepared: Prepared, record: dict) -> None:
    record["wall_send_s"] = time.time()
    record["send_ns"], response = await conn.send(prepared.payload)
    record["first_byte_ns"] = response.first_byte_ns
    record["status"] = response.status
    if response.status != 200:
        parts = [chunk async for _, chunk in conn.body_chunks(response)]
        record["end_ns"] = time.monotonic_ns()
        text = b"".join(parts).decode("utf-8", "replace")
        _error(record, "HTTPStatus", f"HTTP {response.status}: {text}")
        return
    send_ns, tokens, pieces, pending, done = record["send_ns"], record["token_ns"], [], bytearray(), False
    async for stamp, chunk in conn.body_chunks(response):
        pending += chunk
        while True:
            cut = pending.find(b"\n\n")
            if cut < 0:
                break
            event, pending = bytes(pending[:cut]), pending[cut + 2:]
            for line in event.split(b"\n"):
                line = line.rstrip(b"\r")
                if not line.startswith(b"data:"):
                    continue  # comments, event names, retry hints
                data = line[5:].strip()
                if data == b"[DONE]":
                    done = True
                    continue
                try:
                    message = _decode(data)
                except (_DecodeError, ValueError):
                    raise MalformedStream(f"event is not JSON: {data[:200]!r}") from None
                if not isinstance(message, dict):
                    raise MalformedStream(f"event is not a JSON object: {data[:200]!r}")
                if "error" in message:
                    raise MalformedStream(f"server error in stream: {json.dumps(message['error'])[:500]}")
                text = _token_text(message)
                if text:
                    tokens.append(stamp - send_ns)
                    pieces.append(text)
                usage = message.get("usage")
                if usage:
                    record["prompt_tokens"] = usage.get("prompt_tokens")
                    record["completion_tokens"] = usage.get("completion_tokens")
                    details = usage.get("prompt_tokens_details") or {}
                    record["cached_tokens"] = details.get("cached_tokens")
    record["end_ns"] = time.monotonic_ns()
    if not done:
        raise MalformedStream("stream ended without data: [DONE]")
    if tokens:
        record["first_token_ns"] = send_ns + tokens[0]
        record["last_token_ns"] = send_ns + tokens[-1]
    record["output_text"] = "".join(pieces)
