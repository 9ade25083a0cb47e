"""A minimal OpenAI-compatible streaming server that answers at once: a measuring instrument, never a stand-in
for vLLM. It measures what the client itself costs (the server has nothing to compute), and it injects the
faults a real server cannot be made to produce on demand (malformed events, a dropped stream, a hang).

    python -m kvtier.bench.instrument --port 8999 --tokens 4 [--mode ok|malformed|status500|drop|hang|no-done|idle-close]

idle-close answers like ok, then closes a kept-alive connection 0.2 s after each response, as servers close
idle ones (uvicorn after 5 s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import zlib

MODES = ("ok", "malformed", "status500", "drop", "hang", "no-done", "idle-close")
MODEL = "instrument"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _event(payload: dict | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload, separators=(",", ":"))
    return _chunk(b"data: " + text.encode() + b"\n\n")


STREAM_HEAD = (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n"
               b"connection: keep-alive\r\n\r\n")


def stream_response(tokens: int, mode: str = "ok") -> bytes:
    """The whole response to a streaming completion, built once."""
    if mode == "status500":
        body = b'{"error":{"message":"injected failure","code":500}}'
        return b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
            len(body), body)
    parts = [STREAM_HEAD]
    for i in range(tokens):
        parts.append(_event({"id": "x", "object": "text_completion", "choices": [{"index": 0, "text": f"t{i}"}]}))
        if mode == "malformed" and i == 1:
            parts.append(_chunk(b"data: {not json\n\n"))
    parts.append(_event({"id": "x", "choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": tokens,
                                                             "total_tokens": 8 + tokens}}))
    if mode != "no-done":
        parts.append(_event("[DONE]"))
    parts.append(b"0\r\n\r\n")
    return b"".join(parts)


def _json_response(payload: dict) -> bytes:
    body = json.dumps(payload).encode()
    return b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)


class _Protocol(asyncio.Protocol):
    def __init__(self, server: "InstrumentServer"):
        self.server, self.buffer, self.transport = server, bytearray(), None

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(self.buffer[:end])
            length = 0
            lower = head.lower()
            at = lower.find(b"content-length:")
            if at >= 0:
                length = int(lower[at + 15:].split(b"\r\n", 1)[0])
            if len(self.buffer) < end + 4 + length:
                return
            body = bytes(self.buffer[end + 4:end + 4 + length])
            del self.buffer[:end + 4 + length]
            self._answer(head.split(b" ", 2)[1], body)

    def _answer(self, path: bytes, body: bytes) -> None:
        server = self.server
        if path.endswith(b"/v1/models"):
            self.transport.write(_json_response({"object": "list", "data": [
                {"id": MODEL, "object": "model", "max_model_len": 1 << 20}]}))
        elif path.endswith(b"/tokenize"):
            words = json.loads(body).get("prompt", "").split()
            self.transport.write(_json_response({"tokens": [10 + zlib.crc32(w.encode()) % 1000 for w in words],
                                                 "count": len(words)}))
        elif path.endswith(b"/detokenize"):
            self.transport.write(_json_response({"prompt": " ".join(f"w{t}" for t in json.loads(body)["tokens"])}))
        elif path.endswith(b"/reset_prefix_cache"):
            self.transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        elif server.mode == "hang":
            self.transport.write(STREAM_HEAD)
        elif server.mode == "drop":
            response = server.response
            self.transport.write(response[:len(response) // 2])
            self.transport.close()
        else:
            self.transport.write(server.response)
            if server.mode == "idle-close":
                asyncio.get_running_loop().call_later(0.2, self.transport.close)
        server.requests += 1


class InstrumentServer:
    def __init__(self, port: int, tokens: int = 4, mode: str = "ok", host: str = "127.0.0.1"):
        if mode not in MODES:
            raise ValueError(f"mode {mode!r}: one of {', '.join(MODES)}")
        self.host, self.port, self.mode, self.requests = host, port, mode, 0
        self.response = stream_response(tokens, mode)
        self._server = None

    async def start(self) -> "InstrumentServer":
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Protocol(self), self.host, self.port, backlog=4096)
        return self

    async def serve_forever(self) -> None:
        await self.start()
        async with self._server:
            await self._server.serve_forever()

    def close(self) -> None:
        if self._server is not None:
            self._server.close()


def spawn(port: int, tokens: int = 4, mode: str = "ok", core: int | None = None,
          ready_timeout_s: float = 20.0) -> subprocess.Popen:
    """Start the instrument in its own process (pinned to `core` if given) and wait until it accepts."""
    preexec = (lambda: os.sched_setaffinity(0, {core})) if core is not None else None
    proc = subprocess.Popen([sys.executable, "-m", "kvtier.bench.instrument", "--port", str(port), "--mode", mode,
                             "--tokens", str(tokens)], preexec_fn=preexec)
    deadline = time.monotonic() + ready_timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"instrument server on port {port} did not start")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tokens", type=int, default=4)
    parser.add_argument("--mode", choices=MODES, default="ok")
    args = parser.parse_args()
    try:
        import uvloop
        uvloop.run(InstrumentServer(args.port, args.tokens, args.mode).serve_forever())
    except ImportError:  # pragma: no cover
        asyncio.run(InstrumentServer(args.port, args.tokens, args.mode).serve_forever())


if __name__ == "__main__":
    main()
