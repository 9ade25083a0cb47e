"""What every room shares and nothing else: config loading and validation, the user-facing error, atomic
writes, sha256 of files, the project's own paths, the git revision, tier names, and small HTTP JSON calls.
Imports nothing of kvtier outside core (and the version)."""
