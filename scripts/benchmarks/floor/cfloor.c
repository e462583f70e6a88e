/* cfloor: minimal in-memory FUSE fs, libfuse3 low-level API, single-threaded.
 * Counts requests per handler; dumps counts to $FLOOR_COUNTS on SIGUSR1 and at exit.
 * Build: gcc -O2 -Wall -o cfloor cfloor.c $(pkg-config --cflags --libs fuse3)
 * Run:   FLOOR_COUNTS=/tmp/x.counts ./cfloor -f -o default_permissions,fsname=cfloor MNT */
#define FUSE_USE_VERSION 312
#include <fuse_lowlevel.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <fcntl.h>

#define OPS X(lookup) X(forget) X(batch_forget) X(getattr) X(setattr) X(create) X(open) \
    X(read) X(write) X(flush) X(release) X(unlink) X(rename) X(mkdir) X(rmdir) \
    X(opendir) X(readdir) X(releasedir) X(getxattr) X(listxattr) X(statfs)
#define X(o) OP_##o,
enum { OPS NOPS };
#undef X
#define X(o) #o,
static const char *opname[] = { OPS };
#undef X
static unsigned long cnt[NOPS];
#define COUNT(o) (cnt[OP_##o]++)
static const char *counts_path;

typedef struct node { struct stat st; char *data; size_t cap; uint64_t nlookup; size_t nchild; } node;
typedef struct dent { fuse_ino_t parent, ino; struct dent *next; char name[]; } dent;
#define NB 65536
static dent *tab[NB];
static node **nodes;
static size_t nodes_cap, next_ino = 1;
static const double TMO = 1.0;

static unsigned hsh(fuse_ino_t p, const char *s) {
    uint32_t h = 2166136261u ^ (uint32_t)p;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 16777619u;
    return h % NB;
}
static dent **dfind(fuse_ino_t p, const char *name) {
    dent **d = &tab[hsh(p, name)];
    for (; *d; d = &(*d)->next)
        if ((*d)->parent == p && !strcmp((*d)->name, name)) return d;
    return d; /* points at terminating NULL link */
}
static void dadd(fuse_ino_t p, const char *name, fuse_ino_t ino) {
    size_t l = strlen(name) + 1;
    dent *d = malloc(sizeof *d + l);
    d->parent = p; d->ino = ino; memcpy(d->name, name, l);
    unsigned h = hsh(p, name);
    d->next = tab[h]; tab[h] = d;
    nodes[p]->nchild++;
}
static void ddel(dent **link) {
    dent *d = *link;
    nodes[d->parent]->nchild--;
    *link = d->next; free(d);
}
static void now(struct timespec *t) { clock_gettime(CLOCK_REALTIME, t); }
static node *newnode(mode_t mode, const struct fuse_ctx *c) {
    if (next_ino >= nodes_cap) {
        nodes_cap = nodes_cap ? 2 * nodes_cap : 1024;
        nodes = realloc(nodes, nodes_cap * sizeof *nodes);
    }
    node *n = calloc(1, sizeof *n);
    n->st.st_ino = next_ino; nodes[next_ino++] = n;
    n->st.st_mode = mode; n->st.st_nlink = S_ISDIR(mode) ? 2 : 1;
    n->st.st_uid = c ? c->uid : getuid(); n->st.st_gid = c ? c->gid : getgid();
    n->st.st_blksize = 4096;
    now(&n->st.st_atim); n->st.st_mtim = n->st.st_ctim = n->st.st_atim;
    return n;
}
static void maybe_free(fuse_ino_t ino) {
    node *n = nodes[ino];
    if (n && n->nlookup == 0 && n->st.st_nlink == 0) { free(n->data); free(n); nodes[ino] = NULL; }
}
static void reply_entry(fuse_req_t req, node *n) {
    struct fuse_entry_param e = { .ino = n->st.st_ino, .attr = n->st,
                                  .attr_timeout = TMO, .entry_timeout = TMO };
    n->nlookup++;
    fuse_reply_entry(req, &e);
}
static void dump_counts(void) { /* tmp + rename so readers see a complete file */
    if (!counts_path) return;
    char tmp[4096], buf[4096]; int len = 0;
    snprintf(tmp, sizeof tmp, "%s.tmp", counts_path);
    for (int i = 0; i < NOPS; i++)
        len += snprintf(buf + len, sizeof buf - len, "%s %lu\n", opname[i], cnt[i]);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return;
    if (write(fd, buf, len) < 0) {}
    close(fd); rename(tmp, counts_path);
}
static void on_usr1(int sig) { (void)sig; dump_counts(); }

static void op_lookup(fuse_req_t req, fuse_ino_t p, const char *name) {
    COUNT(lookup);
    dent *d = *dfind(p, name);
    if (!d) fuse_reply_err(req, ENOENT); else reply_entry(req, nodes[d->ino]);
}
static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nl) {
    COUNT(forget);
    nodes[ino]->nlookup -= nl; maybe_free(ino);
    fuse_reply_none(req);
}
static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *f) {
    COUNT(batch_forget);
    for (size_t i = 0; i < count; i++) { nodes[f[i].ino]->nlookup -= f[i].nlookup; maybe_free(f[i].ino); }
    fuse_reply_none(req);
}
static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    (void)fi; COUNT(getattr);
    fuse_reply_attr(req, &nodes[ino]->st, TMO);
}
static void resize(node *n, size_t sz) {
    if (sz > n->cap) {
        size_t c = n->cap ? n->cap : 4096;
        while (c < sz) c *= 2;
        n->data = realloc(n->data, c); n->cap = c;
    }
    if (sz > (size_t)n->st.st_size) memset(n->data + n->st.st_size, 0, sz - n->st.st_size);
    n->st.st_size = sz; n->st.st_blocks = (sz + 511) / 512;
}
static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *a, int to_set, struct fuse_file_info *fi) {
    (void)fi; COUNT(setattr);
    node *n = nodes[ino]; struct timespec t; now(&t);
    if (to_set & FUSE_SET_ATTR_MODE) n->st.st_mode = (n->st.st_mode & S_IFMT) | (a->st_mode & 07777);
    if (to_set & FUSE_SET_ATTR_UID) n->st.st_uid = a->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) n->st.st_gid = a->st_gid;
    if (to_set & FUSE_SET_ATTR_SIZE) { resize(n, a->st_size); n->st.st_mtim = t; }
    if (to_set & FUSE_SET_ATTR_ATIME) n->st.st_atim = a->st_atim;
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) n->st.st_atim = t;
    if (to_set & FUSE_SET_ATTR_MTIME) n->st.st_mtim = a->st_mtim;
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) n->st.st_mtim = t;
    n->st.st_ctim = t;
    fuse_reply_attr(req, &n->st, TMO);
}
static node *mknode(fuse_req_t req, fuse_ino_t p, const char *name, mode_t mode) {
    if (*dfind(p, name)) { fuse_reply_err(req, EEXIST); return NULL; }
    node *n = newnode(mode, fuse_req_ctx(req));
    dadd(p, name, n->st.st_ino);
    node *pn = nodes[p]; now(&pn->st.st_mtim); pn->st.st_ctim = pn->st.st_mtim;
    if (S_ISDIR(mode)) pn->st.st_nlink++;
    return n;
}
static void op_create(fuse_req_t req, fuse_ino_t p, const char *name, mode_t mode, struct fuse_file_info *fi) {
    COUNT(create);
    node *n = mknode(req, p, name, S_IFREG | (mode & 07777));
    if (!n) return;
    struct fuse_entry_param e = { .ino = n->st.st_ino, .attr = n->st, .attr_timeout = TMO, .entry_timeout = TMO };
    n->nlookup++;
    fuse_reply_create(req, &e, fi);
}
static void op_mkdir(fuse_req_t req, fuse_ino_t p, const char *name, mode_t mode) {
    COUNT(mkdir);
    node *n = mknode(req, p, name, S_IFDIR | (mode & 07777));
    if (n) reply_entry(req, n);
}
static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) {
    COUNT(open);
    if (fi->flags & O_TRUNC) resize(nodes[ino], 0); /* FUSE_CAP_ATOMIC_O_TRUNC */
    fuse_reply_open(req, fi);
}
static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)fi; COUNT(read);
    node *n = nodes[ino];
    if (off >= n->st.st_size) { fuse_reply_buf(req, NULL, 0); return; }
    if ((off_t)size > n->st.st_size - off) size = n->st.st_size - off;
    fuse_reply_buf(req, n->data + off, size);
}
static void op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)fi; COUNT(write);
    node *n = nodes[ino];
    if ((off_t)(off + size) > n->st.st_size) resize(n, off + size);
    memcpy(n->data + off, buf, size);
    now(&n->st.st_mtim); n->st.st_ctim = n->st.st_mtim;
    fuse_reply_write(req, size);
}
static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { (void)ino; (void)fi; COUNT(flush); fuse_reply_err(req, 0); }
static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { (void)ino; (void)fi; COUNT(release); fuse_reply_err(req, 0); }
static void drop_dent(dent **link) { /* unlink entry and the node's link count */
    fuse_ino_t ino = (*link)->ino, p = (*link)->parent;
    node *n = nodes[ino], *pn = nodes[p];
    ddel(link);
    if (S_ISDIR(n->st.st_mode)) { n->st.st_nlink = 0; pn->st.st_nlink--; } else n->st.st_nlink--;
    now(&n->st.st_ctim); pn->st.st_mtim = pn->st.st_ctim = n->st.st_ctim;
    maybe_free(ino);
}
static void op_unlink(fuse_req_t req, fuse_ino_t p, const char *name) {
    COUNT(unlink);
    dent **d = dfind(p, name);
    if (!*d) { fuse_reply_err(req, ENOENT); return; }
    if (S_ISDIR(nodes[(*d)->ino]->st.st_mode)) { fuse_reply_err(req, EISDIR); return; }
    drop_dent(d); fuse_reply_err(req, 0);
}
static void op_rmdir(fuse_req_t req, fuse_ino_t p, const char *name) {
    COUNT(rmdir);
    dent **d = dfind(p, name);
    if (!*d) { fuse_reply_err(req, ENOENT); return; }
    node *n = nodes[(*d)->ino];
    if (!S_ISDIR(n->st.st_mode)) { fuse_reply_err(req, ENOTDIR); return; }
    if (n->nchild) { fuse_reply_err(req, ENOTEMPTY); return; }
    drop_dent(d); fuse_reply_err(req, 0);
}
static void op_rename(fuse_req_t req, fuse_ino_t p, const char *name, fuse_ino_t np, const char *nname, unsigned flags) {
    COUNT(rename);
    if (flags) { fuse_reply_err(req, EINVAL); return; }
    dent **s = dfind(p, name);
    if (!*s) { fuse_reply_err(req, ENOENT); return; }
    fuse_ino_t ino = (*s)->ino;
    dent **d = dfind(np, nname);
    if (*d) {
        if ((*d)->ino == ino) { fuse_reply_err(req, 0); return; }
        node *dn = nodes[(*d)->ino];
        int sdir = S_ISDIR(nodes[ino]->st.st_mode), ddir = S_ISDIR(dn->st.st_mode);
        if (ddir && !sdir) { fuse_reply_err(req, EISDIR); return; }
        if (!ddir && sdir) { fuse_reply_err(req, ENOTDIR); return; }
        if (ddir && dn->nchild) { fuse_reply_err(req, ENOTEMPTY); return; }
        drop_dent(d);
    }
    ddel(dfind(p, name));
    dadd(np, nname, ino);
    node *n = nodes[ino];
    if (S_ISDIR(n->st.st_mode) && p != np) { nodes[p]->st.st_nlink--; nodes[np]->st.st_nlink++; }
    struct timespec t; now(&t);
    n->st.st_ctim = nodes[p]->st.st_mtim = nodes[p]->st.st_ctim = nodes[np]->st.st_mtim = nodes[np]->st.st_ctim = t;
    fuse_reply_err(req, 0);
}
static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { (void)ino; COUNT(opendir); fuse_reply_open(req, fi); }
static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi) { (void)ino; (void)fi; COUNT(releasedir); fuse_reply_err(req, 0); }
static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi) {
    (void)fi; COUNT(readdir);
    char *buf = malloc(size); size_t len = 0; off_t i = 0;
    struct stat st = { 0 };
#define ADD(nm, in, md) do { if (i++ >= off) { st.st_ino = (in); st.st_mode = (md); \
        size_t l = fuse_add_direntry(req, buf + len, size - len, (nm), &st, i); \
        if (l > size - len) goto done; \
        len += l; } } while (0)
    ADD(".", ino, S_IFDIR);
    ADD("..", ino, S_IFDIR); /* parent not tracked; kernel ignores d_ino of ".." */
    for (size_t b = 0; b < NB; b++)
        for (dent *d = tab[b]; d; d = d->next)
            if (d->parent == ino) ADD(d->name, d->ino, nodes[d->ino]->st.st_mode);
#undef ADD
done:
    fuse_reply_buf(req, buf, len); free(buf);
}
static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size) {
    (void)ino; (void)name; (void)size; COUNT(getxattr); fuse_reply_err(req, ENODATA);
}
static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
    (void)ino; COUNT(listxattr);
    if (size == 0) fuse_reply_xattr(req, 0); else fuse_reply_buf(req, NULL, 0);
}
static void op_statfs(fuse_req_t req, fuse_ino_t ino) {
    (void)ino; COUNT(statfs);
    struct statvfs s = { .f_bsize = 4096, .f_frsize = 4096, .f_blocks = 1 << 20, .f_bfree = 1 << 20,
                         .f_bavail = 1 << 20, .f_files = 1 << 20, .f_ffree = 1 << 20, .f_favail = 1 << 20, .f_namemax = 255 };
    fuse_reply_statfs(req, &s);
}

static const struct fuse_lowlevel_ops ops = {
    .lookup = op_lookup, .forget = op_forget, .forget_multi = op_forget_multi, .getattr = op_getattr,
    .setattr = op_setattr, .create = op_create, .open = op_open, .read = op_read, .write = op_write,
    .flush = op_flush, .release = op_release, .unlink = op_unlink, .rename = op_rename,
    .mkdir = op_mkdir, .rmdir = op_rmdir, .opendir = op_opendir, .readdir = op_readdir,
    .releasedir = op_releasedir, .getxattr = op_getxattr, .listxattr = op_listxattr, .statfs = op_statfs,
};

int main(int argc, char *argv[]) {
    struct fuse_args args = FUSE_ARGS_INIT(argc, argv);
    struct fuse_cmdline_opts o;
    if (fuse_parse_cmdline(&args, &o) != 0 || !o.mountpoint) {
        fprintf(stderr, "usage: %s [-f] [-o opts] MOUNTPOINT\n", argv[0]); return 1;
    }
    counts_path = getenv("FLOOR_COUNTS");
    node *root = newnode(S_IFDIR | 0755, NULL);
    root->nlookup = 1;
    struct fuse_session *se = fuse_session_new(&args, &ops, sizeof ops, NULL);
    if (!se || fuse_set_signal_handlers(se) || fuse_session_mount(se, o.mountpoint)) return 1;
    struct sigaction sa = { .sa_handler = on_usr1, .sa_flags = SA_RESTART };
    sigaction(SIGUSR1, &sa, NULL);
    fuse_daemonize(o.foreground);
    int ret = fuse_session_loop(se); /* single-threaded */
    dump_counts();
    fuse_session_unmount(se);
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    free(o.mountpoint); fuse_opt_free_args(&args);
    return ret ? 1 : 0;
}
