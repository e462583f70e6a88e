"""Session specs: which stores a session attaches, where, and with what access.

A spec is a session object as the Sessions API returns it, or a bare
`{"resources": [...]}`. Everything that can be refused is refused here, before anything
is mounted, with one clear line each (the reference worker's wording where it has one).
"""

from __future__ import annotations

import json
import logging
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from memfs.config import ExitCode, StoreSpec
from memfs.control.recovery import is_dead_mount
from memfs.errors import (
    ConfigError,
    NotFound,
    StartError,
    StoreAuthError,
    StoreError,
    StoreUnavailable,
)
from memfs.mount.preflight import START_RETRY, lookup_store
from memfs.mount.storedir import (
    SessionRoot,
    already_there,
    lstat_at,
    open_root,
)
from memfs.paths import MAX_STORES_PER_SESSION, slugify
from memfs.store.client import StoreClient, StoreInfo
from memfs.store.connection import (
    INTERACTIVE_FIRST_BYTE,
    ClientConfig,
    is_loopback,
    make_http_client,
)

log = logging.getLogger("memfs.session")


def no_credentials(base_url: str) -> str:
    """The refusal without credentials, in the words of whoever runs that server: a
    local `memfs serve` user has no work item, only (maybe) a key."""
    if is_loopback(base_url):
        return (
            f"no credentials for the store server at {base_url}: set "
            "ANTHROPIC_API_KEY (a `memfs serve` started without --api-key accepts any "
            "value, e.g. ANTHROPIC_API_KEY=local)"
        )
    return (
        f"no credentials for the store server at {base_url}: set ANTHROPIC_API_KEY "
        "or ANTHROPIC_AUTH_TOKEN, or on an agent host forward the work item's secret "
        "as ANTHROPIC_WORK_SECRET (an environment key alone is not accepted)"
    )


@dataclass
class Attachment:
    """One `memory_store` resource of the spec, before the store is looked up."""

    store_id: str
    read_only: bool
    name: str | None
    mount_path: str | None
    instructions: str


def parse_spec(data: Any) -> list[Attachment]:
    """The memory-store attachments of a spec; other resource types are noted, not used."""
    if not isinstance(data, dict) or not isinstance(data.get("resources"), list):
        raise StartError('the session spec must be a JSON object with a "resources" list', 2)
    attachments: list[Attachment] = []
    for index, resource in enumerate(data["resources"]):
        if not isinstance(resource, dict):
            raise StartError(f"resource #{index} of the session spec is not an object", 2)
        kind = resource.get("type", "memory_store")
        if kind != "memory_store":
            log.info(
                "ignoring a session resource that is not a memory store type=%s id=%s",
                kind,
                resource.get("id") or resource.get("file_id") or "-",
            )
            continue
        store_id = resource.get("memory_store_id")
        if not isinstance(store_id, str) or not store_id:
            raise StartError(f"resource #{index} has no memory_store_id", 2)
        access = resource.get("access", "read_write")
        if access not in ("read_write", "read_only"):
            raise StartError(
                f"memory store {store_id} has an unknown access {access!r} "
                "(read_write or read_only)",
                2,
            )
        mount_path = resource.get("mount_path")
        if mount_path is not None and not isinstance(mount_path, str):
            raise StartError(f"memory store {store_id} has a mount_path that is not a string", 2)
        name = resource.get("name")
        attachments.append(
            Attachment(
                store_id,
                access == "read_only",
                name if isinstance(name, str) else None,
                mount_path,
                str(resource.get("instructions") or ""),
            )
        )
    if len(attachments) > MAX_STORES_PER_SESSION:
        raise StartError(
            f"a session can attach at most {MAX_STORES_PER_SESSION} memory "
            f"stores; this one attaches {len(attachments)}",
            2,
        )
    seen: set[str] = set()
    for a in attachments:
        if a.store_id in seen:
            raise StartError(f"memory store {a.store_id} is attached twice", 2)
        seen.add(a.store_id)
    return attachments


def load_spec(path: str) -> list[Attachment]:
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise StartError(f"cannot read the session spec {path}: {e.strerror}", 2) from None
    try:
        data = json.loads(text)
    except ValueError as e:
        raise StartError(f"the session spec {path} is not valid JSON: {e}", 2) from None
    return parse_spec(data)


def check_root(root: str) -> str:
    """Where the session root really is: an existing directory, not a symlink, that this
    user can write and other users cannot redirect (`memfs/mount/storedir.py`)."""
    if not os.path.isabs(root) or posixpath.normpath(root) != root.rstrip("/") or root == "/":
        raise StartError(f"the session root {root!r} is not a clean absolute path", 2)
    with open_root(root) as opened:
        return opened.path


def check_mount_path(mount_path: str, roots: tuple[str, ...], store_id: str) -> str:
    """The store's directory name, if `mount_path` is one clean level under the root.

    `roots` are the root as given and as resolved (they differ when it is a symlink);
    a mount path under either is accepted.
    """
    clean = posixpath.normpath(mount_path)
    name = posixpath.basename(clean)
    if (
        not mount_path.startswith("/")
        or clean != mount_path
        or posixpath.dirname(clean) not in roots
        or not name
        or len(name.encode("utf-8", "surrogatepass")) > 255
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name)
    ):
        raise StartError(
            f"memory store mount_path is not a clean absolute path: "
            f"'{mount_path}' (memory_store_id={store_id}); it must be "
            f"{roots[0]}/<name>",
            2,
        )
    return name


async def fetch_stores(attachments: list[Attachment], config: ClientConfig) -> dict[str, StoreInfo]:
    """Look every attached store up; a missing or unreachable one refuses the session."""
    infos: dict[str, StoreInfo] = {}
    async with make_http_client(config) as http:
        # Someone waits for the session to start: a hung server is reported in seconds.
        client = StoreClient(http, retry=START_RETRY, first_byte_timeout=INTERACTIVE_FIRST_BYTE)
        for a in attachments:
            infos[a.store_id] = await lookup_store(client, a.store_id)
    return infos


def build_specs(
    attachments: list[Attachment],
    infos: dict[str, StoreInfo],
    root: str,
    given_root: str | None = None,
) -> list[StoreSpec]:
    """Decide each store's directory and access; refuse clashes before anything mounts."""
    with open_root(root) as opened:
        return _build_specs(attachments, infos, opened, given_root)


def _build_specs(
    attachments: list[Attachment],
    infos: dict[str, StoreInfo],
    opened: SessionRoot,
    given_root: str | None,
) -> list[StoreSpec]:
    root = opened.path
    roots = tuple(dict.fromkeys([posixpath.normpath(given_root or root), root]))
    specs: list[StoreSpec] = []
    by_dir: dict[str, str] = {}
    for a in attachments:
        info = infos[a.store_id]
        mount_path = a.mount_path or posixpath.join(roots[0], slugify(a.name or info.name))
        dir_name = check_mount_path(mount_path, roots, a.store_id)
        other = by_dir.get(dir_name.lower())
        if other is not None:
            raise StartError(
                f"memory stores {other} and {a.store_id} would share the "
                f"mount path {mount_path} (paths may not differ only in "
                "case)",
                2,
            )
        by_dir[dir_name.lower()] = a.store_id
        # A killed session's dead mount stays: the store's daemon mounts over it, so the
        # path is never a bare directory writes could land in (overmount.py). A mount
        # point cannot be renamed, so it cannot be swapped for a link either.
        dead = is_dead_mount(os.path.join(root, dir_name))
        if not dead and lstat_at(opened, dir_name) is not None:
            raise already_there(f"{root}/{dir_name}", a.store_id)
        read_only = a.read_only
        if info.archived_at is not None and not read_only:
            log.warning(
                "memory store is archived; mounting it read-only memory_store_id=%s", a.store_id
            )
            read_only = True
        specs.append(
            StoreSpec(
                a.store_id,
                read_only=read_only,
                dir_name=dir_name,
                name=info.name,
                instructions=a.instructions,
            )
        )
    return specs


async def fetch_session(session_id: str, config: ClientConfig) -> Any:
    """The session object from the Sessions API, or the start-up error a user can act on."""
    async with make_http_client(config) as http:
        client = StoreClient(http, retry=START_RETRY, first_byte_timeout=INTERACTIVE_FIRST_BYTE)
        try:
            return await client.retrieve_session(session_id)
        except NotFound:
            raise StartError(
                f"session {session_id} does not exist (GET /v1/sessions/"
                f"{session_id} answered 404 at {config.base_url})",
                ExitCode.USAGE,
            ) from None
        except StoreUnavailable as e:
            raise StartError(
                f"{e} (is the server running? check --api-url or ANTHROPIC_BASE_URL)",
                ExitCode.UNREACHABLE,
            ) from None
        except StoreAuthError as e:
            raise StartError(
                f"the sessions API refused the credentials: {e}", ExitCode.USAGE
            ) from None
        except StoreError as e:
            raise StartError(f"cannot read session {session_id}: {e}") from None


def prepare(
    spec_path: str | None,
    root: str,
    api_url: str | None,
    environ: dict[str, str],
    session_id: str | None = None,
) -> tuple[str, list[StoreSpec]]:
    """Validate everything a session needs; returns the real root and the store specs.

    The attachments come from the spec file, or, with `session_id`, from the session
    object itself (what a worker's `--on-work` script has in `$ANTHROPIC_SESSION_ID`).
    A relative `root` is taken from the current directory, as `memfs mount` takes its
    mount point.
    """
    if spec_path is None and not session_id:
        raise StartError(
            "no session to mount: give SPEC.json, --session-id ID, or set ANTHROPIC_SESSION_ID",
            ExitCode.USAGE,
        )
    root = os.path.abspath(root)
    attachments = load_spec(spec_path) if spec_path is not None else None
    real_root = check_root(root)
    try:
        config = ClientConfig.from_env(api_url, environ)
    except ConfigError as e:
        raise StartError(str(e), 2) from None
    if attachments is not None and not attachments:
        raise StartError("the session attaches no memory stores; nothing to mount", 2)
    if config.auth_header is None:
        raise StartError(no_credentials(config.base_url), 2)
    if attachments is None:
        assert session_id
        attachments = parse_spec(trio.run(fetch_session, session_id, config))
        if not attachments:
            raise StartError(f"session {session_id} attaches no memory stores; nothing to mount", 2)
    infos = trio.run(fetch_stores, attachments, config)
    return real_root, build_specs(attachments, infos, real_root, root)
