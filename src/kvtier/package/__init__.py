"""R8, the package itself: its manifest and verifier (manifest) and its byte-reproducible archive (archive)."""
