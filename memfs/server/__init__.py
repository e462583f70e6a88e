"""`memfs serve`: the Memory Stores API (spec §3–§6) on SQLite, for tests and self-hosting.

The package imports nothing itself: `memfs.server.run` (`run_server`) brings in the web
stack (starlette, hypercorn, h2, ...), and every `memfs` command builds its parser with
`memfs.server.admin`'s actions, so importing it here cost every mount and session
process ~8 MB it never uses.
"""
