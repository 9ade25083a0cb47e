"""The OS page cache of a pool's files: drop them from it (so the next read comes from the device) and check how
much of them is still resident (mincore), so a cold-read figure can show that it was cold."""

from __future__ import annotations

import ctypes
import mmap
import os
from pathlib import Path

_PAGE = os.sysconf("SC_PAGE_SIZE")


def files_under(target: str | os.PathLike) -> list[Path]:
    target = Path(target)
    return [target] if target.is_file() else sorted(p for p in target.rglob("*") if p.is_file())


def takes_odirect(directory: str | os.PathLike) -> bool:
    """Whether a file in `directory` can be written and read back with O_DIRECT (one aligned page each way; some
    file systems refuse the flag, others the I/O)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    probe = directory / f".kvtier-odirect-{os.getpid()}"
    page = mmap.mmap(-1, _PAGE)  # page-aligned memory, as O_DIRECT needs
    try:
        fd = os.open(probe, os.O_CREAT | os.O_RDWR | getattr(os, "O_DIRECT", 0), 0o600)
        try:
            return os.pwritev(fd, [page], 0) == _PAGE and os.preadv(fd, [page], 0) == _PAGE
        finally:
            os.close(fd)
    except OSError:
        return False
    finally:
        page.close()
        probe.unlink(missing_ok=True)


def require_odirect(*directories: str | os.PathLike) -> None:
    """Refuse, naming the path, a pool whose file system does not take O_DIRECT."""
    from ..core.errors import KvtierError
    for directory in directories:
        if not takes_odirect(directory):
            raise KvtierError(f"{directory}: its file system does not take O_DIRECT, which lmcache.use_odirect "
                              "asks of the fs L2 adapter; put the pool elsewhere or set lmcache.use_odirect: false")


def drop(target: str | os.PathLike) -> int:
    """Evict a file, or every file under a directory, from the page cache (posix_fadvise DONTNEED, no privileges
    needed). Returns the number of files."""
    files = files_under(target)
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return len(files)


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
_MAP_FAILED = ctypes.c_void_p(-1).value


def _resident_pages(path: Path, size: int) -> int:
    fd = os.open(path, os.O_RDONLY)
    try:
        address = _libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, _MAP_FAILED):
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of {path} failed: {os.strerror(err)}")
        try:
            vec = (ctypes.c_ubyte * ((size + _PAGE - 1) // _PAGE))()
            if _libc.mincore(address, size, vec) != 0:
                err = ctypes.get_errno()
                raise OSError(err, f"mincore of {path} failed: {os.strerror(err)}")
            return sum(b & 1 for b in vec)
        finally:
            _libc.munmap(address, size)
    finally:
        os.close(fd)


def resident_bytes(target: str | os.PathLike) -> int:
    """Bytes of a file, or of every file under a directory, now in the page cache (mincore over a mapping;
    counted in whole pages, so at most one page per file above the file sizes)."""
    return sum(_resident_pages(p, size) * _PAGE
               for p in files_under(target) if (size := p.stat().st_size))
