"""What a console form sent: its fields, decoded strictly, and the content they carry.

A form is `application/x-www-form-urlencoded` UTF-8 text of at most the API's request
size (`MAX_BODY_BYTES`); bytes that are not UTF-8 are refused, not turned into U+FFFD as
Starlette's parser would, since a memory cannot hold them. A memory holding NUL cannot
be edited in a browser's text box (`UNEDITABLE`).
"""

from __future__ import annotations

from urllib.parse import parse_qsl

from starlette.requests import Request

from memfs.paths import MAX_CONTENT_BYTES
from memfs.server import errors
from memfs.server.gate import MAX_BODY_BYTES

_FIELDS = "memfs.console.form"  # where a request keeps its fields once read (CSRF, then the page)
UNEDITABLE = "\x00"
UNEDITABLE_REASON = (
    "this memory holds NUL characters, which a browser's text box cannot carry (it shows "
    "U+FFFD instead): edit it through a mount or the API; nothing was saved"
)


async def read_form(request: Request) -> dict[str, str]:
    """The form's fields, decoded strictly: bytes that are not UTF-8 are refused, not
    turned into U+FFFD (Starlette's parser would), since the API cannot hold them."""
    cached = request.scope.get(_FIELDS)
    if isinstance(cached, dict):
        return cached
    kind = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise errors.invalid("a console form is sent as application/x-www-form-urlencoded")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise errors.too_large(f"the form is larger than {MAX_BODY_BYTES} bytes")
    try:
        pairs = parse_qsl(
            body.decode("ascii"), keep_blank_values=True, encoding="utf-8", errors="strict"
        )
    except (UnicodeDecodeError, ValueError):
        raise errors.invalid(
            "the form is not UTF-8 text, which a memory must be: nothing was saved"
        ) from None
    fields = dict(pairs)
    request.scope[_FIELDS] = fields
    return fields


def checked(content: str) -> str:
    if len(content.encode("utf-8")) > MAX_CONTENT_BYTES:
        raise errors.invalid(f"content is larger than {MAX_CONTENT_BYTES} bytes")
    return content
