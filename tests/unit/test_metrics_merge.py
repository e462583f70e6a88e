"""A session's metrics endpoint: its store daemons' expositions merged into one."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from memfs.metrics import merge

STORE_A = """\
# HELP memfs_fuse_operations_total FUSE requests answered
# TYPE memfs_fuse_operations_total counter
memfs_fuse_operations_total{op="read",result="ok"} 3.0
memfs_fuse_operations_total{op="create",result="ok"} 1.0
# HELP memfs_memories Memories in the store
# TYPE memfs_memories gauge
memfs_memories{store="memstore_a"} 10.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 200.0
"""

STORE_B = """\
# HELP memfs_fuse_operations_total FUSE requests answered
# TYPE memfs_fuse_operations_total counter
memfs_fuse_operations_total{op="read",result="ok"} 4.0
# HELP memfs_memories Memories in the store
# TYPE memfs_memories gauge
memfs_memories{store="memstore_b"} 7.0
# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.
# TYPE process_start_time_seconds gauge
process_start_time_seconds 100.0
"""


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_same_series_are_summed_a_store_s_stay_apart_the_start_is_the_earliest() -> None:
    got = samples(merge([STORE_A, STORE_B]).decode())
    assert got == {
        ("memfs_fuse_operations_total", frozenset({("op", "read"), ("result", "ok")})): 7.0,
        ("memfs_fuse_operations_total", frozenset({("op", "create"), ("result", "ok")})): 1.0,
        ("memfs_memories", frozenset({("store", "memstore_a")})): 10.0,
        ("memfs_memories", frozenset({("store", "memstore_b")})): 7.0,
        ("process_start_time_seconds", frozenset()): 100.0,
    }


def test_one_exposition_passes_through_and_none_is_empty() -> None:
    assert samples(merge([STORE_A]).decode()) == samples(STORE_A)
    assert merge([]) == b""
