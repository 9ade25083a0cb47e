"""The one exception type the CLI turns into a clear message and a non-zero exit."""


class KvtierError(Exception):
    """A user-facing error: the message names the file, key or value that is wrong."""
