"""A minimal HTTP/1.1 client connection for streaming POSTs, on asyncio streams.

Why not aiohttp: a load client must cost far less than the server it measures. One persistent connection per
in-flight request, requests pre-encoded to bytes, the response parsed from large reads (no per-line awaits), and
every read stamped with a monotonic nanosecond clock. Reads are buffered up to `read_limit` bytes, far above the
64 KB that made vLLM's own benchmark lose throughput at long contexts.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import AsyncIterator
from urllib.parse import urlsplit

READ_SIZE = 1 << 20
# A kept-alive connection idle longer than this is not reused: servers close idle ones (uvicorn, which vLLM runs,
# after 5 s), and a request written into a connection the server is closing dies unanswered, counted as failed
# though the server never saw it (an open-loop soak at one request a second hit this every few seconds).
MAX_IDLE_NS = 3_000_000_000


class HTTPError(Exception):
    """The response could not be read as HTTP (a protocol fault, not an error status)."""


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int
    base_path: str

    @classmethod
    def parse(cls, base_url: str) -> "Endpoint":
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"base URL {base_url!r}: expected http://HOST[:PORT][/PATH] (https is not supported)")
        return cls(parts.hostname, parts.port or 80, parts.path.rstrip("/"))

    def request_bytes(self, method: str, path: str, body: bytes = b"", content_type: str = "application/json") -> bytes:
        head = (f"{method} {self.base_path}{path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
                "Accept: text/event-stream, application/json\r\nConnection: keep-alive\r\n\r\n")
        return head.encode("ascii") + body


@dataclass
class Response:
    status: int
    headers: dict[str, str]
    first_byte_ns: int
    chunked: bool
    length: int | None
    keep_alive: bool = True
    body_parts: list[bytes] = field(default_factory=list)


class Connection:
    """One keep-alive connection. Not safe for concurrent use: one request at a time."""

    def __init__(self, endpoint: Endpoint, connect_timeout_s: float = 10.0, read_timeout_s: float = 600.0):
        self.endpoint = endpoint
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.buffer = bytearray()
        self.last_read_ns = 0  # arrival time of the newest bytes in the buffer

    async def _ensure_open(self) -> None:
        if self.writer is not None:
            idle = time.monotonic_ns() - self.last_read_ns
            if not self.writer.is_closing() and not self.reader.at_eof() and idle < MAX_IDLE_NS:
                return
            self.close()
        self.buffer.clear()
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(self.endpoint.host, self.endpoint.port, limit=READ_SIZE),
            self.connect_timeout_s)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None
        self.buffer.clear()

    async def _read(self) -> int:
        """Read what has arrived (at least one byte); return its arrival time."""
        data = await asyncio.wait_for(self.reader.read(READ_SIZE), self.read_timeout_s)
        now = time.monotonic_ns()
        if not data:
            raise ConnectionResetError("server closed the connection mid-response")
        self.buffer += data
        self.last_read_ns = now
        return now

    async def send(self, request: bytes) -> tuple[int, Response]:
        """Send a request; return (send time, response head). The body is read with `body_chunks`."""
        await self._ensure_open()
        sent_ns = time.monotonic_ns()
        self.writer.write(request)
        first_byte_ns = None
        while True:
            end = self.buffer.find(b"\r\n\r\n")
            if end >= 0:
                break
            stamp = await self._read()
            first_byte_ns = first_byte_ns or stamp
            if len(self.buffer) > 65536:
                raise HTTPError("response headers larger than 64 KiB")
        head = bytes(self.buffer[:end]).decode("latin-1").split("\r\n")
        del self.buffer[:end + 4]
        try:
            _, status, *_ = head[0].split(" ", 2)
            status = int(status)
        except ValueError:
            raise HTTPError(f"not an HTTP status line: {head[0][:80]!r}") from None
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        length = int(headers["content-length"]) if "content-length" in headers else None
        keep_alive = headers.get("connection", "").lower() != "close"
        return sent_ns, Response(status, headers, first_byte_ns or time.monotonic_ns(), chunked, length, keep_alive)

    async def body_chunks(self, response: Response) -> AsyncIterator[tuple[int, bytes]]:
        """Yield (arrival time, body bytes) as they arrive, de-chunked; the connection is ready for reuse after."""
        if response.chunked:
            async for item in self._dechunk():
                yield item
        elif response.length is not None:
            remaining = response.length
            stamp = self.last_read_ns
            while remaining > 0:
                if not self.buffer:
                    stamp = await self._read()
                take = bytes(self.buffer[:remaining])
                del self.buffer[:len(take)]
                remaining -= len(take)
                yield stamp, take
        else:  # read to close
            while True:
                try:
                    stamp = await self._read()
                except ConnectionResetError:
                    break
                yield stamp, bytes(self.buffer)
                self.buffer.clear()
            response.keep_alive = False
        if not response.keep_alive:
            self.close()

    async def _dechunk(self) -> AsyncIterator[tuple[int, bytes]]:
        stamp = self.last_read_ns
        while True:
            line_end = self.buffer.find(b"\r\n")
            while line_end < 0:
                stamp = await self._read()
                line_end = self.buffer.find(b"\r\n")
            size_text = bytes(self.buffer[:line_end]).split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise HTTPError(f"bad chunk size {size_text[:20]!r}") from None
            while len(self.buffer) < line_end + 2 + size + 2:
                stamp = await self._read()
            data = bytes(self.buffer[line_end + 2:line_end + 2 + size])
            del self.buffer[:line_end + 2 + size + 2]
            if size == 0:
                return
            yield stamp, data
