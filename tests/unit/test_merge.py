"""The three-way merge of a memory changed on both sides (memfs/sync/merge.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from memfs.sync.merge import merge_text


def test_two_appenders_keep_both_lines_store_first() -> None:
    base = b"# notes\n- one\n"
    assert merge_text(base, base + b"- mine\n", base + b"- theirs\n") == (
        base + b"- theirs\n- mine\n"
    )


def test_changes_in_different_places_merge() -> None:
    base = b"a\nb\nc\nd\ne\n"
    local = b"A\nb\nc\nd\ne\n"
    remote = b"a\nb\nc\nd\nE\n"
    assert merge_text(base, local, remote) == b"A\nb\nc\nd\nE\n"


def test_the_same_line_changed_both_ways_is_a_conflict() -> None:
    assert merge_text(b"x\ny\n", b"x\nmine\n", b"x\ntheirs\n") is None


def test_appending_to_a_last_line_without_newline() -> None:
    assert merge_text(b"a", b"a\nmine", b"a\ntheirs") == b"a\ntheirs\nmine"


def test_a_side_without_final_newline_is_not_glued_to_the_other() -> None:
    assert merge_text(b"a\n", b"a\nmine\n", b"a\ntheirs") == b"a\ntheirs\nmine\n"


def test_not_utf8_is_never_merged() -> None:
    assert merge_text(b"a\n", b"a\n\xff\n", b"a\nb\n") is None


lines = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=6)


@given(lines, lines, lines)
def test_appends_on_both_sides_lose_no_line(
    base: list[str], mine: list[str], theirs: list[str]
) -> None:
    """Two sessions appending different lines (each tags its own) keep every one of them."""
    b = "".join(f"{x}\n" for x in base).encode()
    ours = [f"mine {x}" for x in mine]
    others = [f"theirs {x}" for x in theirs]
    merged = merge_text(
        b,
        b + "".join(f"{x}\n" for x in ours).encode(),
        b + "".join(f"{x}\n" for x in others).encode(),
    )
    assert merged is not None
    assert merged.startswith(b)
    rest = merged[len(b) :].decode().splitlines()
    assert rest == others + ours
