"""The three-way merge of a memory changed on both sides (memfs/sync/merge.py)."""

from __future__ import annotations

from hypothesis import assume, given, settings
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


def _numbered(n: int) -> bytes:
    return "".join(f"line {i}\n" for i in range(1, n + 1)).encode()


def test_neighbouring_lines_edited_on_each_side_merge() -> None:
    """Issue 36 item 5: `sed -i` of lines 10 and 11 on two mounts used to be a conflict
    (diff3 sees one changed stretch); each side changed its own line, so both stay."""
    base = _numbered(20)
    local = base.replace(b"line 10\n", b"line 10 mine\n")
    remote = base.replace(b"line 11\n", b"line 11 theirs\n")
    want = base.replace(b"line 10\n", b"line 10 mine\n").replace(b"line 11\n", b"line 11 theirs\n")
    assert merge_text(base, local, remote) == want
    assert merge_text(base, remote, local) == want


def test_neighbouring_items_of_a_checklist_ticked_on_each_side() -> None:
    base = b"- [ ] a\n- [ ] b\n"
    assert merge_text(base, b"- [x] a\n- [ ] b\n", b"- [ ] a\n- [x] b\n") == (b"- [x] a\n- [x] b\n")


def test_one_item_ticked_on_both_sides_and_its_neighbour_on_one() -> None:
    base = b"- [ ] a\n- [ ] b\n- [ ] c\n"
    local = b"- [x] a\n- [x] b\n- [ ] c\n"
    remote = b"- [ ] a\n- [x] b\n- [x] c\n"
    assert merge_text(base, local, remote) == b"- [x] a\n- [x] b\n- [x] c\n"


def test_a_line_changed_differently_next_to_a_change_is_still_a_conflict() -> None:
    base = b"a\nb\nc\n"
    assert merge_text(base, b"A\nB\nc\n", b"a\nb2\nC\n") is None


def test_a_deletion_next_to_an_edit_merges() -> None:
    base = b"a\nb\nc\nd\n"
    assert merge_text(base, b"a\nc\nd\n", b"a\nb\nC\nd\n") == b"a\nC\nd\n"
    assert merge_text(base, b"a\nb\nC\nd\n", b"a\nc\nd\n") == b"a\nC\nd\n"


def test_a_deletion_of_an_edited_line_is_a_conflict() -> None:
    assert merge_text(b"a\nb\nc\n", b"a\nc\n", b"a\nB\nc\n") is None


def test_an_insertion_inside_lines_the_other_side_rewrote_is_a_conflict() -> None:
    base = b"a\nb\nc\n"
    assert merge_text(base, b"a\nb\nnew\nc\n", b"a\nrewritten\n") is None


def test_the_first_and_the_last_line_edited_on_each_side() -> None:
    assert merge_text(b"a\nb\n", b"A\nb\n", b"a\nB\n") == b"A\nB\n"


def test_appending_after_the_last_line_edited_on_the_other_side() -> None:
    base = b"a\nb\n"
    assert merge_text(base, b"a\nb\nmine\n", b"a\nB\n") == b"a\nB\nmine\n"
    assert merge_text(base, b"a\nB\n", b"a\nb\ntheirs\n") == b"a\nB\ntheirs\n"


def test_without_final_newline_an_append_and_an_edit_of_the_last_line_merge() -> None:
    """Appending after a last line without newline adds the newline to it: that alone
    does not make the edit of that line on the other side a conflict."""
    base = b"a\nb"
    assert merge_text(base, b"a\nb\nmine", b"a\nB") == b"a\nB\nmine"
    assert merge_text(base, b"a\nB", b"a\nb\ntheirs") == b"a\nB\ntheirs"
    assert merge_text(base, b"A\nb", b"a\nB") == b"A\nB"


def test_adding_or_dropping_only_the_final_newline_is_kept() -> None:
    assert merge_text(b"a\nb", b"A\nb", b"a\nb\n") == b"A\nb\n"
    assert merge_text(b"a\nb\n", b"A\nb\n", b"a\nb") == b"A\nb"


def test_crlf_lines_merge_and_keep_their_endings() -> None:
    base = b"a\r\nb\r\nc\r\n"
    assert merge_text(base, b"A\r\nb\r\nc\r\n", b"a\r\nB\r\nc\r\n") == (b"A\r\nB\r\nc\r\n")
    assert merge_text(b"a\r\nb", b"a\r\nb\r\nmine", b"a\r\nB") == b"a\r\nB\r\nmine"


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


Hunk = tuple[int, int, str, list[str]]  # base lines [start, end) -> lines, by one side


@st.composite
def disjoint_edits(draw: st.DrawFn) -> tuple[int, list[Hunk]]:
    """A base of n distinct lines and changes by two sides to distinct runs of it
    (neighbouring runs included), each replacing a run (maybe empty) by new lines."""
    n = draw(st.integers(0, 10))
    hunks: list[Hunk] = []
    at = 0
    while True:
        kinds = ["keep", "change"] if at < n else ["stop"]
        if not hunks or hunks[-1][:2] != (at, at):
            kinds.append("insert")  # one insertion at one place
        kind = draw(st.sampled_from(kinds))
        if kind == "stop":
            break
        if kind == "keep":
            at += 1
            continue
        side = draw(st.sampled_from(["theirs", "ours"]))
        length = 0 if kind == "insert" else draw(st.integers(1, min(3, n - at)))
        count = draw(st.integers(1 if kind == "insert" else 0, 2))
        hunks.append((at, at + length, side, [f"{side} {len(hunks)}.{k}" for k in range(count)]))
        at += length
    for start, end, side, _ in hunks:
        # An insertion where the other side changed the lines on both sides of it sits
        # inside one change of the other side: which of its lines it follows is unknown.
        others = [h for h in hunks if h[2] != side]
        assume(
            start != end
            or not any(h[1] == start for h in others)
            or not any(h[0] == start for h in others)
        )
    return n, hunks


def _applied(base: list[str], hunks: list[Hunk], eol: str) -> bytes:
    out: list[str] = []
    at = 0
    for start, end, _, lines in hunks:
        out += base[at:start] + lines
        at = end
    out += base[at:]
    return "".join(x + eol for x in out).encode()


@settings(max_examples=300, deadline=None)
@given(disjoint_edits(), st.sampled_from(["\n", "\r\n"]))
def test_changes_to_different_lines_all_merge(edits: tuple[int, list[Hunk]], eol: str) -> None:
    """Each side's changes touch base lines the other did not (they may be neighbours):
    the merge is the base with every change applied, whichever side is local."""
    n, hunks = edits
    base = [f"base {i}" for i in range(n)]
    theirs = _applied(base, [h for h in hunks if h[2] == "theirs"], eol)
    ours = _applied(base, [h for h in hunks if h[2] == "ours"], eol)
    want = _applied(base, hunks, eol)
    b = _applied(base, [], eol)
    assert merge_text(b, ours, theirs) == want
    assert merge_text(b, theirs, ours) == want


texts = st.lists(
    st.tuples(st.sampled_from(["a", "b", "c", "d", "e", ""]), st.sampled_from(["\n", "\r\n"])),
    max_size=8,
).map(lambda lines: "".join(body + end for body, end in lines))
documents = st.tuples(texts, st.booleans()).map(
    lambda t: (t[0].rstrip("\r\n") if t[1] else t[0]).encode()
)


def _bodies(data: bytes) -> set[str]:
    """The lines with text (an empty line may lose its newline to the other side's end
    without one: b"a\\n" to b"\\na" against b"" merges as b"")."""
    return set(data.decode().splitlines()) - {""}


@settings(max_examples=300, deadline=None)
@given(documents, documents, documents)
def test_a_merge_keeps_each_sides_changes(base: bytes, local: bytes, remote: bytes) -> None:
    """Whatever the inputs: a side that did not change gives the other side's bytes, two
    equal sides give those bytes, and a merge holds each line either side added and no
    line that neither side has. Whether it is a conflict does not depend on which side
    is local."""
    assert merge_text(base, local, local) == local
    assert merge_text(base, base, remote) == remote
    assert merge_text(base, local, base) == local
    merged = merge_text(base, local, remote)
    assert (merged is None) == (merge_text(base, remote, local) is None)
    if merged is not None:
        got = _bodies(merged)
        assert _bodies(local) - _bodies(base) <= got
        assert _bodies(remote) - _bodies(base) <= got
        assert got <= _bodies(local) | _bodies(remote)
