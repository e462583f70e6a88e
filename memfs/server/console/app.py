"""The console's routes: stores, a store's tree and search, a memory, its versions.

Pages are rendered on the server (Jinja2, autoescaped) and work without JavaScript;
`static/console.js` only adds confirmations and filtering as you type. Every read and
write goes through `Storage`, the same rules as the API: an edit carries the sha it was
made against as its precondition, so a concurrent change is shown, never overwritten.
A scoped token is held to `tokens.authorize` with the need of the API action each page
action stands for (memfs/server/actions.py). The search is in `search.py`, diffs and
line ends in `diff.py`, a form's strict decoding in `forms.py`.
"""

from __future__ import annotations

import importlib.resources
import logging
import secrets
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import jinja2
import trio
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from memfs.paths import MAX_CONTENT_BYTES
from memfs.server import actions, errors, tokens
from memfs.server.console.auth import COOKIE, LOGIN_COOKIE, SESSION_SECONDS, Session, Sessions
from memfs.server.console.diff import diff_lines, keep_line_ends
from memfs.server.console.forms import UNEDITABLE, UNEDITABLE_REASON, checked, read_form
from memfs.server.console.search import search
from memfs.server.db import Storage
from memfs.server.errors import ApiError

log = logging.getLogger("memfs.server")

PREFIX = "/console"
PAGE_SIZE = 200
"""Entries of a store's tree per page."""
SECURITY_HEADERS = {
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cache-control": "no-store",
}
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
_T = TypeVar("_T")
Handler = Callable[[Request, Session], Awaitable[Response]]

_templates = jinja2.Environment(
    loader=jinja2.PackageLoader("memfs.server.console", "templates"),
    autoescape=True,
    undefined=jinja2.StrictUndefined,
)


class Console:
    """The /console pages as one ASGI app; `Storage` calls run as the API's do."""

    def __init__(
        self, db: Storage, *, api_key: str | None, limiter: trio.CapacityLimiter | None
    ) -> None:
        self.db = db
        self.sessions = Sessions(db, api_key)
        self.limiter = limiter
        r = Route
        s = PREFIX + "/s/{store_id}"
        m = s + "/m/{memory_id}"
        self.app = Starlette(
            routes=[
                r(PREFIX, self._to_root),
                r(PREFIX + "/", self._page(self.stores)),
                r(PREFIX + "/login", self.login_form, methods=["GET"]),
                r(PREFIX + "/login", self.login, methods=["POST"]),
                r(PREFIX + "/logout", self._page(self.logout), methods=["POST"]),
                r(PREFIX + "/static/{name}", self.static),
                r(s, self._page(self.store)),
                r(s + "/audit", self._page(self.audit)),
                r(s + "/new", self._page(self.new_form), methods=["GET"]),
                r(s + "/new", self._page(self.create), methods=["POST"]),
                r(m, self._page(self.memory)),
                r(m + "/edit", self._page(self.edit), methods=["POST"]),
                r(m + "/rename", self._page(self.rename), methods=["POST"]),
                r(m + "/delete", self._page(self.delete_form), methods=["GET"]),
                r(m + "/delete", self._page(self.delete), methods=["POST"]),
                r(m + "/diff", self._page(self.diff)),
                r(s + "/v/{version_id}/redact", self._page(self.redact_form), methods=["GET"]),
                r(s + "/v/{version_id}/redact", self._page(self.redact), methods=["POST"]),
            ]
        )
        self.app.router.redirect_slashes = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                extra = [(k.encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_headers)

    # ------------------------------------------------------------ plumbing

    async def _run(self, fn: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Off the event loop, as the API's handlers run their database calls (inline
        when the app was made without threads, as `Handlers._run` does)."""
        if self.limiter is None:
            await trio.lowlevel.checkpoint()
            return fn(*args, **kwargs)
        return await trio.to_thread.run_sync(partial(fn, *args, **kwargs), limiter=self.limiter)

    def _render(
        self, request: Request, name: str, session: Session | None, status: int = 200, **ctx: Any
    ) -> HTMLResponse:
        html = _templates.get_template(name).render(
            session=session,
            base=PREFIX,
            open_console=self.sessions.open,
            path=request.url.path,
            q=quote,
            **ctx,
        )
        return HTMLResponse(html, status_code=status)

    def _page(self, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
        """Find the session (or send to the login page), check a form's CSRF token, and
        turn an API error into a page that says it."""

        async def endpoint(request: Request) -> Response:
            session = self.sessions.lookup(request.cookies.get(COOKIE))
            fresh = False
            if session is None and self.sessions.open:
                session, fresh = self.sessions.start(None, is_token=False), True
            if session is None:
                return RedirectResponse(
                    PREFIX + "/login?" + urlencode({"next": request.url.path}), status_code=303
                )
            try:
                if session.is_token and session.credential is not None:
                    await self._run(self.sessions.grant, session.credential)
                if request.method == "POST":
                    form = await read_form(request)
                    if not Sessions.csrf_ok(session, form.get("csrf")):
                        raise errors.forbidden("the form is stale or was not sent by this page")
                response = await handler(request, session)
            except ApiError as exc:
                if exc.status == 401:  # a revoked or expired token: log in again
                    self.sessions.end(session.sid)
                    return RedirectResponse(PREFIX + "/login", status_code=303)
                response = self._render(
                    request, "error.html", session, status=exc.status, error=exc
                )
            if fresh:
                _set_cookie(response, session)
            return response

        return endpoint

    def _authorize(self, session: Session, action: actions.Action, store_id: str) -> None:
        """A token's limits, asked for the API action this page's action stands for."""
        if session.is_token and session.credential is not None:
            tokens.authorize(self.sessions.grant(session.credential), action.need, store_id)

    def _may_write(self, session: Session, store_id: str) -> bool:
        try:
            self._authorize(session, actions.CREATE_MEMORY, store_id)
        except ApiError:
            return False
        return True

    async def _store(self, session: Session, store_id: str) -> dict[str, Any]:
        self._authorize(session, actions.GET_STORE, store_id)
        return await self._run(self.db.get_store, store_id)

    async def _unarchived(self, session: Session, store_id: str) -> dict[str, Any]:
        """The store, or 409 when it is archived: the API still deletes and redacts in an
        archived store, but the console keeps it read-only for everyone, as it says."""
        store = await self._store(session, store_id)
        if store["archived_at"] is not None:
            raise errors.conflict(
                f"memory store {store_id} is archived: the console keeps it read-only"
            )
        return store

    def _writable(self, session: Session, store: dict[str, Any]) -> bool:
        return store["archived_at"] is None and self._may_write(session, store["id"])

    # ------------------------------------------------------------ login

    async def _to_root(self, request: Request) -> Response:
        return RedirectResponse(PREFIX + "/", status_code=308)

    async def login_form(self, request: Request, error: str | None = None) -> Response:
        nonce = request.cookies.get(LOGIN_COOKIE) or secrets.token_urlsafe(32)
        response = self._render(
            request,
            "login.html",
            None,
            status=401 if error else 200,
            error=error,
            nonce=nonce,
            next=_safe_next(request.query_params.get("next")),
        )
        response.set_cookie(
            LOGIN_COOKIE, nonce, httponly=True, samesite="strict", path=PREFIX, max_age=600
        )
        return response

    async def login(self, request: Request) -> Response:
        try:
            form = await read_form(request)
        except ApiError as exc:
            return await self.login_form(request, str(exc))
        nonce = request.cookies.get(LOGIN_COOKIE)
        if not nonce or form.get("nonce") != nonce:
            return await self.login_form(request, "The login form was stale; try again.")
        try:
            session = await self._run(self.sessions.login, form.get("credential", ""))
        except ApiError as exc:
            log.info("console login refused reason=%s", exc)
            return await self.login_form(request, str(exc))
        response = RedirectResponse(_safe_next(form.get("next")), status_code=303)
        _set_cookie(response, session)
        response.delete_cookie(LOGIN_COOKIE, path=PREFIX)
        return response

    async def logout(self, request: Request, session: Session) -> Response:
        self.sessions.end(session.sid)
        response = RedirectResponse(PREFIX + "/login", status_code=303)
        response.delete_cookie(COOKIE, path=PREFIX)
        return response

    async def static(self, request: Request) -> Response:
        name = request.path_params["name"]
        kind = _STATIC_TYPES.get(name[name.rfind(".") :]) if "." in name else None
        folder = importlib.resources.files("memfs.server.console") / "static"
        if kind is None or "/" in name or not (folder / name).is_file():
            return Response("not found", status_code=404, media_type="text/plain")
        return Response((folder / name).read_bytes(), media_type=kind)

    # ------------------------------------------------------------ stores

    async def stores(self, request: Request, session: Session) -> Response:
        only = None
        if session.is_token and session.credential is not None:
            only = sorted(self.sessions.grant(session.credential).scopes)
        items, next_page = await self._run(
            self.db.list_stores,
            only=only,
            limit=100,
            page=request.query_params.get("page"),
            include_archived=True,
            created_gte=None,
            created_lte=None,
        )
        for item in items:
            item["memory_count"] = await self._run(self.db.memory_count, item["id"])
        return self._render(request, "stores.html", session, stores=items, next_page=next_page)

    async def store(self, request: Request, session: Session) -> Response:
        store_id = request.path_params["store_id"]
        store = await self._store(session, store_id)
        params = request.query_params
        prefix = params.get("prefix") or "/"
        if not prefix.startswith("/") or not prefix.endswith("/"):
            raise errors.invalid("prefix must start and end with '/'")
        query = (params.get("q") or "").strip()
        path_filter = (params.get("filter") or "").strip()
        if query or path_filter:
            matches, scanned = await self._run(
                search, self.db, store_id, prefix, query, path_filter
            )
            return self._render(
                request,
                "search.html",
                session,
                store=store,
                prefix=prefix,
                query=query,
                path_filter=path_filter,
                matches=matches,
                scanned=scanned,
                writable=self._writable(session, store),
            )
        items, next_page = await self._run(
            self.db.list_memories,
            store_id,
            path_prefix=prefix,
            depth=1,
            limit=PAGE_SIZE,
            page=params.get("page"),
            full=False,
        )
        count = await self._run(self.db.memory_count, store_id)
        return self._render(
            request,
            "store.html",
            session,
            store=store,
            prefix=prefix,
            items=items,
            next_page=next_page,
            count=count,
            writable=self._writable(session, store),
            crumbs=_crumbs(prefix),
        )

    async def audit(self, request: Request, session: Session) -> Response:
        store_id = request.path_params["store_id"]
        store = await self._store(session, store_id)
        versions, next_page = await self._run(
            self.db.list_versions,
            store_id,
            memory_id=request.query_params.get("memory_id"),
            operation=None,
            actor_filters=[],
            created_gte=None,
            created_lte=None,
            limit=100,
            page=request.query_params.get("page"),
            full=False,
        )
        return self._render(
            request, "audit.html", session, store=store, versions=versions, next_page=next_page
        )

    # ------------------------------------------------------------ one memory

    async def memory(self, request: Request, session: Session) -> Response:
        store_id, memory_id = request.path_params["store_id"], request.path_params["memory_id"]
        store = await self._store(session, store_id)
        memory = await self._run(self.db.get_memory, store_id, memory_id, full=True)
        versions = await self._versions(store_id, memory_id)
        return self._render(
            request,
            "memory.html",
            session,
            store=store,
            memory=memory,
            versions=versions,
            writable=self._writable(session, store),
            editable=UNEDITABLE not in memory["content"],
            max_bytes=MAX_CONTENT_BYTES,
        )

    async def _versions(self, store_id: str, memory_id: str) -> list[dict[str, Any]]:
        versions, _ = await self._run(
            self.db.list_versions,
            store_id,
            memory_id=memory_id,
            operation=None,
            actor_filters=[],
            created_gte=None,
            created_lte=None,
            limit=100,
            page=None,
            full=False,
        )
        return versions

    def _memory_url(self, store_id: str, memory_id: str) -> str:
        return f"{PREFIX}/s/{store_id}/m/{memory_id}"

    async def new_form(self, request: Request, session: Session) -> Response:
        store = await self._store(session, request.path_params["store_id"])
        self._authorize(session, actions.CREATE_MEMORY, store["id"])
        return self._render(
            request,
            "new.html",
            session,
            store=store,
            path_value=request.query_params.get("prefix", "/"),
            content="",
            error=None,
        )

    async def create(self, request: Request, session: Session) -> Response:
        store_id = request.path_params["store_id"]
        store = await self._store(session, store_id)
        self._authorize(session, actions.CREATE_MEMORY, store_id)
        form = await read_form(request)
        path = form.get("path", "")
        content = checked(keep_line_ends(form.get("content", ""), None))
        try:
            created = await self._run(
                self.db.create_memory, store_id, path, content, session.actor, full=False
            )
        except ApiError as exc:
            if exc.status >= 500:
                raise
            return self._render(
                request,
                "new.html",
                session,
                status=exc.status,
                store=store,
                path_value=path,
                content=content,
                error=str(exc),
            )
        return RedirectResponse(self._memory_url(store_id, created["id"]), status_code=303)

    async def edit(self, request: Request, session: Session) -> Response:
        store_id, memory_id = request.path_params["store_id"], request.path_params["memory_id"]
        self._authorize(session, actions.UPDATE_MEMORY, store_id)
        form = await read_form(request)
        sha = form.get("sha") or None
        current = await self._run(self.db.get_memory, store_id, memory_id, full=True)
        base = await self._shown(store_id, current, sha, form.get("version"))
        if base is not None and UNEDITABLE in base:
            raise errors.invalid(UNEDITABLE_REASON)
        content = checked(await self._run(keep_line_ends, form.get("content", ""), base))
        if content == current["content"]:  # a save without an edit writes no version
            return RedirectResponse(self._memory_url(store_id, memory_id), status_code=303)
        try:
            await self._run(
                self.db.update_memory,
                store_id,
                memory_id,
                content=content,
                path=None,
                precondition_sha=sha,
                actor=session.actor,
                full=False,
            )
        except ApiError as exc:
            if exc.error_type != "memory_precondition_failed_error":
                raise
            return await self._conflict(request, session, store_id, memory_id, content)
        return RedirectResponse(self._memory_url(store_id, memory_id), status_code=303)

    async def _shown(
        self, store_id: str, current: dict[str, Any], sha: str | None, version: str | None
    ) -> str | None:
        """The content the edit form was made from (the current one, or the version the
        form names when the memory changed since), or None when neither has its sha."""
        if sha is None or current["content_sha256"] == sha:
            return str(current["content"])
        if version:
            try:
                shown = await self._run(self.db.get_version, store_id, version, full=True)
            except ApiError:
                return None
            if shown.get("memory_id") == current["id"] and shown.get("content_sha256") == sha:
                return str(shown["content"])
        return None

    async def _conflict(
        self, request: Request, session: Session, store_id: str, memory_id: str, mine: str
    ) -> Response:
        """Someone changed the memory since the page was loaded: show both, save nothing."""
        store = await self._store(session, store_id)
        current = await self._run(self.db.get_memory, store_id, memory_id, full=True)
        return self._render(
            request,
            "conflict.html",
            session,
            status=409,
            store=store,
            memory=current,
            mine=mine,
            diff=diff_lines(current["content"], mine, "store", "yours"),
        )

    async def rename(self, request: Request, session: Session) -> Response:
        store_id, memory_id = request.path_params["store_id"], request.path_params["memory_id"]
        self._authorize(session, actions.UPDATE_MEMORY, store_id)
        form = await read_form(request)
        await self._run(
            self.db.update_memory,
            store_id,
            memory_id,
            content=None,
            path=form.get("path", ""),
            precondition_sha=form.get("sha") or None,
            actor=session.actor,
            full=False,
        )
        return RedirectResponse(self._memory_url(store_id, memory_id), status_code=303)

    async def delete_form(self, request: Request, session: Session) -> Response:
        store_id, memory_id = request.path_params["store_id"], request.path_params["memory_id"]
        store = await self._unarchived(session, store_id)
        memory = await self._run(self.db.get_memory, store_id, memory_id, full=False)
        return self._render(request, "delete.html", session, store=store, memory=memory)

    async def delete(self, request: Request, session: Session) -> Response:
        store_id, memory_id = request.path_params["store_id"], request.path_params["memory_id"]
        self._authorize(session, actions.DELETE_MEMORY, store_id)
        await self._unarchived(session, store_id)
        form = await read_form(request)
        await self._run(
            self.db.delete_memory,
            store_id,
            memory_id,
            expected_sha=form.get("sha") or None,
            actor=session.actor,
        )
        return RedirectResponse(f"{PREFIX}/s/{store_id}", status_code=303)

    # ------------------------------------------------------------ versions

    async def diff(self, request: Request, session: Session) -> Response:
        store_id, memory_id = request.path_params["store_id"], request.path_params["memory_id"]
        store = await self._store(session, store_id)
        versions = await self._versions(store_id, memory_id)
        if not versions:
            raise errors.not_found(f"memory {memory_id} has no versions")
        ids = [v["id"] for v in versions]
        a = request.query_params.get("a") or (ids[1] if len(ids) > 1 else ids[0])
        b = request.query_params.get("b") or ids[0]
        if a not in ids or b not in ids:
            raise errors.not_found("both versions must belong to this memory")
        old = await self._run(self.db.get_version, store_id, a, full=True)
        new = await self._run(self.db.get_version, store_id, b, full=True)
        return self._render(
            request,
            "diff.html",
            session,
            store=store,
            memory_id=memory_id,
            versions=versions,
            a=old,
            b=new,
            diff=diff_lines(old["content"], new["content"], a, b),
        )

    async def redact_form(self, request: Request, session: Session) -> Response:
        store_id, version_id = request.path_params["store_id"], request.path_params["version_id"]
        store = await self._unarchived(session, store_id)
        version = await self._run(self.db.get_version, store_id, version_id, full=False)
        return self._render(request, "redact.html", session, store=store, version=version)

    async def redact(self, request: Request, session: Session) -> Response:
        store_id, version_id = request.path_params["store_id"], request.path_params["version_id"]
        self._authorize(session, actions.REDACT_VERSION, store_id)
        await self._unarchived(session, store_id)
        version = await self._run(self.db.redact_version, store_id, version_id, session.actor)
        log.info(
            "version redacted through the console memory_store_id=%s version_id=%s",
            store_id,
            version_id,
        )
        return RedirectResponse(self._memory_url(store_id, version["memory_id"]), status_code=303)


def _crumbs(prefix: str) -> list[tuple[str, str]]:
    """('notes', '/notes/') … for a prefix's path segments."""
    parts = [p for p in prefix.split("/") if p]
    return [(name, "/" + "/".join(parts[: i + 1]) + "/") for i, name in enumerate(parts)]


def _safe_next(target: str | None) -> str:
    """Only a console page: never an open redirect."""
    if target and target.startswith(PREFIX + "/") and "//" not in target and "\\" not in target:
        return target
    return PREFIX + "/"


def _set_cookie(response: Response, session: Session) -> None:
    response.set_cookie(
        COOKIE,
        session.sid,
        max_age=SESSION_SECONDS,
        path=PREFIX,
        httponly=True,
        samesite="strict",
    )


def with_console(
    api: ASGIApp, db: Storage, *, api_key: str | None, limiter: trio.CapacityLimiter | None
) -> ASGIApp:
    """`api` with the console in front of it at /console (its own login, not the API's)."""
    console = Console(db, api_key=api_key, limiter=limiter)

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "") if scope["type"] == "http" else ""
        if path == PREFIX or path.startswith(PREFIX + "/"):
            await console(scope, receive, send)
        else:
            await api(scope, receive, send)

    return route
