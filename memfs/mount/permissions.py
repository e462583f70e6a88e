"""Owner/group/other checks memfs makes itself on a session mount.

A session mount holds read-only and writable stores under one superblock, so it cannot be
mounted `ro`, and with the kernel's `default_permissions` a non-root writer into a
read-only store is refused by the modes shown (0444/0555, EACCES) before memfs is asked.
Session mounts therefore mount without `default_permissions`: every handler first lets
the store answer EROFS, then asks here with the rules the kernel's `generic_permission`
applies (root passes except for executing a file with no x bit; otherwise the owner,
group or other bits, supplementary groups included). See docs/reliability.md.

Search permission is checked on every ancestor of the node a request names, because the
kernel resolves cached names without asking us.
"""

from __future__ import annotations

import errno
from collections.abc import Callable

import pyfuse3

from memfs.errors import FsError
from memfs.state.node import Node

READ, WRITE, EXEC = 4, 2, 1


def supplementary_groups(pid: int) -> frozenset[int]:
    """The caller's groups from /proc; empty if it has already gone."""
    try:
        return frozenset(pyfuse3.get_sup_groups(pid))
    except (OSError, RuntimeError, ValueError):
        return frozenset()


class Permissions:
    """Decides EACCES/EPERM for one mount; every node is owned by the mounting user."""

    def __init__(self, uid: int, gid: int, mode_of: Callable[[Node], int]) -> None:
        self.uid = uid
        self.gid = gid
        self.mode_of = mode_of  # the mode the mount shows (read-only stores lose w)

    def owns(self, ctx: pyfuse3.RequestContext) -> bool:
        return ctx.uid == 0 or ctx.uid == self.uid

    def allowed(self, node: Node, ctx: pyfuse3.RequestContext, mask: int) -> bool:
        """`mask` (READ|WRITE|EXEC) on `node` itself, ancestors not considered."""
        mode = self.mode_of(node)
        if ctx.uid == 0:
            return not (mask & EXEC) or node.is_dir or bool(mode & 0o111)
        if ctx.uid == self.uid:
            bits = mode >> 6
        elif ctx.gid == self.gid or self.gid in supplementary_groups(ctx.pid):
            bits = mode >> 3
        else:
            bits = mode
        return (bits & mask & 7) == mask

    def require(self, node: Node, ctx: pyfuse3.RequestContext, mask: int = 0) -> None:
        """Search permission on every ancestor, then `mask` on `node`, or EACCES."""
        if ctx.uid == 0 and not (mask & EXEC):
            return
        parent = node.parent
        while parent is not None:
            if not self.allowed(parent, ctx, EXEC):
                raise FsError(errno.EACCES)
            parent = parent.parent
        if mask and not self.allowed(node, ctx, mask):
            raise FsError(errno.EACCES)

    def require_owner(self, ctx: pyfuse3.RequestContext, what: str) -> None:
        if not self.owns(ctx):
            raise FsError(errno.EPERM, f"only the owner may {what}")
