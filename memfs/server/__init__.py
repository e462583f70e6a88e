"""`memfs serve`: the Memory Stores API (spec §3–§6) on SQLite, for tests and self-hosting."""

from memfs.server.run import run_server

__all__ = ["run_server"]
