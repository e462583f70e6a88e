"""pyfloor: minimal in-memory FUSE fs with pyfuse3 + trio (same semantics as cfloor.c).

Counts requests per handler; dumps counts to $FLOOR_COUNTS on SIGUSR1 and at exit.
Run: FLOOR_COUNTS=/tmp/x.counts /work/main/.venv/bin/python pyfloor.py MNT
"""

import errno
import os
import signal
import stat
import sys
import time
from collections import Counter

import pyfuse3
import trio
from pyfuse3 import FUSEError

TMO = 1.0
C = Counter()


class Node:
    __slots__ = ("a", "children", "data", "nlookup")

    def __init__(self, ino, mode, uid, gid):
        a = self.a = pyfuse3.EntryAttributes()
        a.st_ino = ino
        a.st_mode = mode
        a.st_nlink = 2 if stat.S_ISDIR(mode) else 1
        a.st_uid, a.st_gid = uid, gid
        a.st_blksize = 4096
        a.st_atime_ns = a.st_mtime_ns = a.st_ctime_ns = time.time_ns()
        a.entry_timeout = a.attr_timeout = TMO
        self.data = bytearray()
        self.nlookup = 0
        self.children = {} if stat.S_ISDIR(mode) else None


class Floor(pyfuse3.Operations):
    enable_writeback_cache = False

    def __init__(self):
        super().__init__()
        self.nodes = {}
        self.next_ino = pyfuse3.ROOT_INODE
        root = self._new(stat.S_IFDIR | 0o755, os.getuid(), os.getgid())
        root.nlookup = 1

    def _new(self, mode, uid, gid):
        n = Node(self.next_ino, mode, uid, gid)
        self.nodes[self.next_ino] = n
        self.next_ino += 1
        return n

    def _maybe_free(self, ino):
        n = self.nodes.get(ino)
        if n is not None and n.nlookup == 0 and n.a.st_nlink == 0:
            del self.nodes[ino]

    def _touch(self, n):
        n.a.st_mtime_ns = n.a.st_ctime_ns = time.time_ns()

    def _entry(self, n):
        n.nlookup += 1
        return n.a

    async def lookup(self, parent_inode, name, ctx=None):
        C["lookup"] += 1
        ino = self.nodes[parent_inode].children.get(name)
        if ino is None:
            raise FUSEError(errno.ENOENT)
        return self._entry(self.nodes[ino])

    async def forget(self, inode_list):
        C["forget"] += 1
        for ino, nl in inode_list:
            self.nodes[ino].nlookup -= nl
            self._maybe_free(ino)

    async def getattr(self, inode, ctx=None):
        C["getattr"] += 1
        return self.nodes[inode].a

    async def setattr(self, inode, attr, fields, fh, ctx):
        C["setattr"] += 1
        n = self.nodes[inode]
        a = n.a
        t = time.time_ns()
        if fields.update_mode:
            a.st_mode = stat.S_IFMT(a.st_mode) | (attr.st_mode & 0o7777)
        if fields.update_uid:
            a.st_uid = attr.st_uid
        if fields.update_gid:
            a.st_gid = attr.st_gid
        if fields.update_size:
            self._resize(n, attr.st_size)
            a.st_mtime_ns = t
        if fields.update_atime:
            a.st_atime_ns = attr.st_atime_ns
        if fields.update_mtime:
            a.st_mtime_ns = attr.st_mtime_ns
        a.st_ctime_ns = t
        return a

    @staticmethod
    def _resize(n, size):
        d = n.data
        if size < len(d):
            del d[size:]
        else:
            d.extend(bytes(size - len(d)))
        n.a.st_size = size
        n.a.st_blocks = (size + 511) // 512

    def _mknode(self, parent_inode, name, mode, ctx):
        p = self.nodes[parent_inode]
        if name in p.children:
            raise FUSEError(errno.EEXIST)
        n = self._new(mode, ctx.uid, ctx.gid)
        p.children[name] = n.a.st_ino
        self._touch(p)
        if stat.S_ISDIR(mode):
            p.a.st_nlink += 1
        return n

    async def create(self, parent_inode, name, mode, flags, ctx):
        C["create"] += 1
        n = self._mknode(parent_inode, name, stat.S_IFREG | (mode & 0o7777), ctx)
        return pyfuse3.FileInfo(fh=n.a.st_ino), self._entry(n)

    async def mkdir(self, parent_inode, name, mode, ctx):
        C["mkdir"] += 1
        return self._entry(self._mknode(parent_inode, name, stat.S_IFDIR | (mode & 0o7777), ctx))

    async def open(self, inode, flags, ctx):
        C["open"] += 1
        if flags & os.O_TRUNC:  # FUSE_CAP_ATOMIC_O_TRUNC
            self._resize(self.nodes[inode], 0)
        return pyfuse3.FileInfo(fh=inode)

    async def read(self, fh, off, size):
        C["read"] += 1
        return bytes(self.nodes[fh].data[off : off + size])

    async def write(self, fh, off, buf):
        C["write"] += 1
        n = self.nodes[fh]
        end = off + len(buf)
        if end > len(n.data):
            self._resize(n, end)
        n.data[off:end] = buf
        self._touch(n)
        return len(buf)

    async def flush(self, fh):
        C["flush"] += 1

    async def release(self, fh):
        C["release"] += 1

    def _drop(self, p, name):
        ino = p.children.pop(name)
        n = self.nodes[ino]
        if stat.S_ISDIR(n.a.st_mode):
            n.a.st_nlink = 0
            p.a.st_nlink -= 1
        else:
            n.a.st_nlink -= 1
        n.a.st_ctime_ns = time.time_ns()
        self._touch(p)
        self._maybe_free(ino)

    async def unlink(self, parent_inode, name, ctx):
        C["unlink"] += 1
        p = self.nodes[parent_inode]
        ino = p.children.get(name)
        if ino is None:
            raise FUSEError(errno.ENOENT)
        if stat.S_ISDIR(self.nodes[ino].a.st_mode):
            raise FUSEError(errno.EISDIR)
        self._drop(p, name)

    async def rmdir(self, parent_inode, name, ctx):
        C["rmdir"] += 1
        p = self.nodes[parent_inode]
        ino = p.children.get(name)
        if ino is None:
            raise FUSEError(errno.ENOENT)
        n = self.nodes[ino]
        if not stat.S_ISDIR(n.a.st_mode):
            raise FUSEError(errno.ENOTDIR)
        if n.children:
            raise FUSEError(errno.ENOTEMPTY)
        self._drop(p, name)

    async def rename(self, parent_inode_old, name_old, parent_inode_new, name_new, flags, ctx):
        C["rename"] += 1
        if flags:
            raise FUSEError(errno.EINVAL)
        po, pn = self.nodes[parent_inode_old], self.nodes[parent_inode_new]
        ino = po.children.get(name_old)
        if ino is None:
            raise FUSEError(errno.ENOENT)
        n = self.nodes[ino]
        dino = pn.children.get(name_new)
        if dino == ino:
            return
        if dino is not None:
            d = self.nodes[dino]
            sdir, ddir = stat.S_ISDIR(n.a.st_mode), stat.S_ISDIR(d.a.st_mode)
            if ddir and not sdir:
                raise FUSEError(errno.EISDIR)
            if sdir and not ddir:
                raise FUSEError(errno.ENOTDIR)
            if ddir and d.children:
                raise FUSEError(errno.ENOTEMPTY)
            self._drop(pn, name_new)
        del po.children[name_old]
        pn.children[name_new] = ino
        if stat.S_ISDIR(n.a.st_mode) and po is not pn:
            po.a.st_nlink -= 1
            pn.a.st_nlink += 1
        self._touch(po)
        self._touch(pn)
        n.a.st_ctime_ns = po.a.st_ctime_ns

    async def opendir(self, inode, ctx):
        C["opendir"] += 1
        return inode

    async def readdir(self, fh, start_id, token):
        C["readdir"] += 1
        items = [(b".", fh), (b"..", fh), *list(self.nodes[fh].children.items())]
        for i in range(start_id, len(items)):
            name, ino = items[i]
            n = self.nodes[ino]
            if not pyfuse3.readdir_reply(token, name, n.a, i + 1):
                break
            if i >= 2:  # readdirplus: each entry but . and .. counts as a lookup
                n.nlookup += 1

    async def releasedir(self, fh):
        C["releasedir"] += 1

    async def getxattr(self, inode, name, ctx):
        C["getxattr"] += 1
        raise FUSEError(errno.ENODATA)

    async def listxattr(self, inode, ctx):
        C["listxattr"] += 1
        return []

    async def statfs(self, ctx):
        C["statfs"] += 1
        s = pyfuse3.StatvfsData()
        s.f_bsize = s.f_frsize = 4096
        s.f_blocks = s.f_bfree = s.f_bavail = 1 << 20
        s.f_files = s.f_ffree = s.f_favail = 1 << 20
        s.f_namemax = 255
        return s


def dump_counts(*_):
    path = os.environ.get("FLOOR_COUNTS")
    if not path:
        return
    with open(path + ".tmp", "w") as f:
        f.writelines(f"{k} {v}\n" for k, v in sorted(C.items()))
    os.rename(path + ".tmp", path)


def main():
    mnt = sys.argv[1]
    pyfuse3.init(Floor(), mnt, {"fsname=pyfloor", "default_permissions"})
    signal.signal(signal.SIGUSR1, dump_counts)
    try:
        trio.run(pyfuse3.main)
    except BaseException:
        pyfuse3.close(unmount=False)
        raise
    pyfuse3.close()
    dump_counts()


if __name__ == "__main__":
    main()
