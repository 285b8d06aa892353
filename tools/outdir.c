/*
 * tools/outdir.c - the output directory of a run, a comparison or a lab (tools/outdir.h): creating and locking
 * it, creating its files exclusively under temporary names and publishing them by rename, the checks made before
 * a run starts (a symbolic link in place of an output, free space), and the same for files named by path.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "engine/checkpoint.h"
#include "tools/cli.h"
#include "tools/outdir.h"

/* ---- the directory ------------------------------------------------------------------------------------------- */

/* mpt_outdir_mkdirs; *top (when not NULL) receives the length of the prefix of path that names the first directory
 * this call created (0: none). */
static mpt_status mkdirs_noting(const char *path, size_t *top) {
    char buf[MPT_CLI_PATH];
    if (top) *top = 0;
    if (strlen(path) >= sizeof buf) return mpt_errorf(MPT_ERR_ARG, "--out: path longer than %zu bytes", sizeof buf - 1);
    snprintf(buf, sizeof buf, "%s", path);
    for (char *p = buf + 1; ; p++) {
        if (*p == '/' || *p == '\0') {
            char c = *p;
            *p = '\0';
            if (mkdir(buf, 0755) == 0) {
                if (top && !*top) *top = (size_t)(p - buf);
            } else if (errno != EEXIST) {
                return mpt_errorf(MPT_ERR_IO, "--out %s: cannot create %s (%s)", path, buf, strerror(errno));
            }
            *p = c;
            if (c == '\0') break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return mpt_errorf(MPT_ERR_IO, "--out %s: not a directory", path);
    return MPT_OK;
}

mpt_status mpt_outdir_mkdirs(const char *path) { return mkdirs_noting(path, NULL); }

/* What kind of file st is, for messages. */
static const char *file_kind(const struct stat *st) {
    return S_ISLNK(st->st_mode) ? "a symbolic link" : S_ISDIR(st->st_mode) ? "a directory" :
           S_ISFIFO(st->st_mode) ? "a FIFO" : S_ISSOCK(st->st_mode) ? "a socket" :
           S_ISCHR(st->st_mode) || S_ISBLK(st->st_mode) ? "a device" : "not a regular file";
}

/* The kernel's protected_symlinks rule (Documentation/admin-guide/sysctl/fs.rst): in a sticky, world-writable
 * directory a symbolic link is followed only when its owner is the follower or the directory's owner. */
static mpt_status check_link(const char *path, const struct stat *link, mpt_outdir_links links) {
    char target[512] = "?";
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n >= 0) target[n] = '\0';
    char esc[600];
    mpt_escape(esc, sizeof esc, target);
    if (links == MPT_OUTDIR_NO_LINK)
        return mpt_errorf(MPT_ERR_IO, "%s: a symbolic link (to %s) where mptrain writes a run's directory: refusing to "
                                      "follow it; remove it or choose another --out", path, esc);
    char copy[MPT_CLI_PATH];
    snprintf(copy, sizeof copy, "%s", path);
    const char *parent = dirname(copy);
    struct stat dir;
    if (stat(parent, &dir) != 0) return mpt_errorf(MPT_ERR_IO, "--out %s: cannot stat %s (%s)", path, parent, strerror(errno));
    int sticky_shared = (dir.st_mode & S_ISVTX) && (dir.st_mode & S_IWOTH);
    if (sticky_shared && link->st_uid != geteuid() && link->st_uid != dir.st_uid)
        return mpt_errorf(MPT_ERR_IO, "--out %s: a symbolic link (to %s) owned by uid %u in the sticky, world-writable "
                                      "directory %s: refusing to follow it (its owner decides where this run's files "
                                      "would go; the kernel's protected_symlinks rule refuses the same)",
                          path, esc, (unsigned)link->st_uid, parent);
    return MPT_OK;
}

/* Removes the temporary files (".<name>.tmp-XXXXXX") that a killed run left in the directory: with the lock held,
 * no other mptrain is writing them. */
static void remove_stale_temps(int dir_fd) {
    int fd = dup(dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return;
    }
    for (struct dirent *e; (e = readdir(d));) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] != '.' || n < 12 || strncmp(e->d_name + n - 11, ".tmp-", 5) != 0) continue;
        struct stat st;
        if (fstatat(dir_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
            unlinkat(dir_fd, e->d_name, 0);
    }
    closedir(d);
}

/* The user name of uid, or its number. */
static const char *user_name(uid_t uid, char *buf, size_t cap) {
    struct passwd pw, *res = NULL;
    char tmp[1024];
    if (getpwuid_r(uid, &pw, tmp, sizeof tmp, &res) == 0 && res) snprintf(buf, cap, "%s", res->pw_name);
    else snprintf(buf, cap, "uid %u", (unsigned)uid);
    return buf;
}

/* Replaces the lock file by a new one of this process's own, locked: in a copy made with hard links (cp -al) the lock
 * file is the original directory's, and another user's lock file may not be writable. The name then points to the
 * new file, whose lock this process holds (take_lock checks that no other process replaced it meanwhile). 0 when it
 * cannot (a sticky directory, no write permission): the caller keeps the old file. */
static int replace_lock(mpt_outdir *od) {
    char tmp[300];
    int fd = mpt_checkpoint_create_temp(od->fd, MPT_OUTDIR_LOCK, tmp, sizeof tmp);
    if (fd < 0) return 0;
    if (flock(fd, LOCK_EX | LOCK_NB) != 0 || renameat(od->fd, tmp, od->fd, MPT_OUTDIR_LOCK) != 0) {
        close(fd);
        unlinkat(od->fd, tmp, 0);
        return 0;
    }
    close(od->lock_fd); /* releases the old file's lock: its name is ours now */
    od->lock_fd = fd;
    return 1;
}

/* Takes the directory's lock, or says who holds it. A lock file that no process holds is no obstacle, whoever wrote
 * it: it is taken (read-only when it is another user's and cannot be replaced), and one shared with another
 * directory (hard links) is replaced by a file of this directory's own. After the lock is taken, its name must still
 * lead to the locked file (another mptrain may have replaced it meanwhile): else it is taken again. */
static mpt_status take_lock(mpt_outdir *od, const char *command) {
    for (int attempt = 0;; attempt++) {
        int read_only = 0;
        od->lock_fd = openat(od->fd, MPT_OUTDIR_LOCK, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0644);
        if (od->lock_fd < 0 && errno == EACCES) { /* another user's file: flock works on a read-only descriptor */
            od->lock_fd = openat(od->fd, MPT_OUTDIR_LOCK, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
            read_only = od->lock_fd >= 0;
            if (!read_only && errno == ENOENT) errno = EACCES; /* no file to read: the directory refused its creation */
        }
        if (od->lock_fd < 0)
            return mpt_errorf(MPT_ERR_IO, "--out %s: cannot create its lock file %s (%s)", od->path, MPT_OUTDIR_LOCK,
                              errno == ELOOP ? "a symbolic link stands there" : strerror(errno));
        struct stat st;
        if (fstat(od->lock_fd, &st) != 0 || !S_ISREG(st.st_mode))
            return mpt_errorf(MPT_ERR_IO, "--out %s: its lock file %s is %s, expected a regular file", od->path,
                              MPT_OUTDIR_LOCK, file_kind(&st));
        int held = flock(od->lock_fd, LOCK_EX | LOCK_NB) == 0;
        if (!held && errno != EWOULDBLOCK)
            return mpt_errorf(MPT_ERR_IO, "--out %s: cannot lock %s (%s)", od->path, MPT_OUTDIR_LOCK, strerror(errno));
        /* A lock file shared with another directory (cp -al) and held: by a run in that directory, since an mptrain
         * here would have made the file its own before it used it. This directory gets a lock file of its own. */
        if (!held && st.st_nlink > 1 && replace_lock(od)) held = 1;
        if (!held) {
            char holder[200] = "", owner[64], esc[260];
            ssize_t n = pread(od->lock_fd, holder, sizeof holder - 1, 0);
            holder[n > 0 ? n : 0] = '\0';
            holder[strcspn(holder, "\n")] = '\0';
            mpt_escape(esc, sizeof esc, holder[0] ? holder : "a process that wrote no PID");
            return mpt_errorf(MPT_ERR_IO, "--out %s is in use by another mptrain (%s; its lock file belongs to %s%s): two "
                                          "runs in one directory would overwrite each other's files; wait for it to end "
                                          "or choose another --out",
                              od->path, esc, user_name(st.st_uid, owner, sizeof owner),
                              st.st_nlink > 1 ? ", and is shared with another directory by a hard link" : "");
        }
        /* held now. A file shared with another directory (cp -al), or another user's that this process cannot write:
         * replaced by this directory's own where the directory allows it */
        int replaced = (st.st_nlink > 1 || read_only) && replace_lock(od);
        struct stat now, named;
        if (fstat(od->lock_fd, &now) != 0 || fstatat(od->fd, MPT_OUTDIR_LOCK, &named, AT_SYMLINK_NOFOLLOW) != 0 ||
            now.st_ino != named.st_ino || now.st_dev != named.st_dev) {
            close(od->lock_fd); /* another mptrain replaced the file: the lock to take is the new one's */
            od->lock_fd = -1;
            if (attempt < 8) continue;
            return mpt_errorf(MPT_ERR_IO, "--out %s: its lock file %s keeps being replaced: another mptrain is starting "
                              "there; try again", od->path, MPT_OUTDIR_LOCK);
        }
        if (read_only && !replaced) return MPT_OK; /* another user's idle lock, held read-only: no PID written */
        break;
    }
    char text[200];
    time_t now = time(NULL);
    struct tm tm;
    char when[40] = "";
    if (localtime_r(&now, &tm)) strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", &tm);
    int len = snprintf(text, sizeof text, "PID %ld, mptrain %s, since %s\n", (long)getpid(), command, when);
    if (ftruncate(od->lock_fd, 0) != 0 || pwrite(od->lock_fd, text, (size_t)len, 0) != len)
        return mpt_errorf(MPT_ERR_IO, "--out %s: cannot write its lock file %s (%s)", od->path, MPT_OUTDIR_LOCK,
                          strerror(errno));
    return MPT_OK;
}

static mpt_status replay_journal(const mpt_outdir *od);

mpt_status mpt_outdir_open(mpt_outdir *od, const char *path, mpt_outdir_links links, const char *command) {
    od->fd = od->lock_fd = -1;
    od->created = 0;
    od->created_top = 0;
    if (!path[0]) return mpt_errorf(MPT_ERR_ARG, "--out: expected a directory, found an empty path");
    if (strlen(path) >= sizeof od->path) return mpt_errorf(MPT_ERR_ARG, "--out: path longer than %zu bytes", sizeof od->path - 1);
    snprintf(od->path, sizeof od->path, "%s", path);
    char parent[MPT_CLI_PATH];
    snprintf(parent, sizeof parent, "%s", path);
    const char *up = dirname(parent);
    size_t top = 0;
    if (strcmp(up, ".") != 0 && strcmp(up, "/") != 0) MPT_TRY(mkdirs_noting(up, &top));
    if (mkdir(path, 0755) == 0) {
        od->created = 1;
        od->created_top = top ? top : strlen(path);
    } else if (errno != EEXIST) {
        return mpt_errorf(MPT_ERR_IO, "--out %s: cannot create it (%s)", path, strerror(errno));
    }
    struct stat st;
    if (lstat(path, &st) != 0) return mpt_errorf(MPT_ERR_IO, "--out %s: %s", path, strerror(errno));
    if (S_ISLNK(st.st_mode)) MPT_TRY(check_link(path, &st, links));
    od->fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | (links == MPT_OUTDIR_NO_LINK ? O_NOFOLLOW : 0));
    if (od->fd < 0)
        return mpt_errorf(MPT_ERR_IO, "--out %s: %s", path, errno == ENOTDIR ? "not a directory" : strerror(errno));
    mpt_status s = take_lock(od, command);
    if (s == MPT_OK) s = replay_journal(od); /* before the temporary files go: a committed set's are among them */
    if (s != MPT_OK) {
        mpt_outdir_close(od);
        return s;
    }
    remove_stale_temps(od->fd);
    return MPT_OK;
}

/* 1 when nothing but the lock file is in the directory. */
static int holds_only_lock(int dir_fd) {
    int fd = dup(dir_fd);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0) close(fd);
        return 0;
    }
    rewinddir(d); /* the descriptor's offset is shared with dir_fd's */
    int only = 1;
    for (struct dirent *e; only && (e = readdir(d));)
        only = strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0 || strcmp(e->d_name, MPT_OUTDIR_LOCK) == 0;
    closedir(d);
    return only;
}

/* Closes od; with remove_empty, first removes its lock file and the directory when nothing else is in it. The lock is
 * held across the unlink: another mptrain that opened the old file is refused as before, and one that opens the name
 * after the unlink creates a lock file of its own, so the rmdir fails (not empty) and its directory stays. */
static void close_dir(mpt_outdir *od, int remove_empty) {
    if (!od) return;
    if (remove_empty && od->fd >= 0 && od->lock_fd >= 0 && holds_only_lock(od->fd) &&
        unlinkat(od->fd, MPT_OUTDIR_LOCK, 0) == 0 && rmdir(od->path) == 0 && od->created) {
        /* and the parents this open created, deepest first, each only while empty */
        char cur[sizeof od->path];
        snprintf(cur, sizeof cur, "%s", od->path);
        for (;;) {
            size_t n = strlen(cur);
            while (n > 1 && cur[n - 1] == '/') cur[--n] = '\0';
            while (n > 0 && cur[n - 1] != '/') cur[--n] = '\0';
            while (n > 1 && cur[n - 1] == '/') cur[--n] = '\0';
            if (n == 0 || n < od->created_top || rmdir(cur) != 0) break;
        }
    }
    if (od->lock_fd >= 0) close(od->lock_fd); /* releases the flock */
    if (od->fd >= 0) close(od->fd);
    od->fd = od->lock_fd = -1;
    od->created = 0;
    od->created_top = 0;
}

void mpt_outdir_close(mpt_outdir *od) { close_dir(od, od && od->created); }

void mpt_outdir_close_remove_empty(mpt_outdir *od) { close_dir(od, 1); }

/* MPT_OK when name in dir_fd is absent or a regular file; else the error naming it. */
static mpt_status check_name(int dir_fd, const char *dir, const char *name) {
    struct stat st;
    if (fstatat(dir_fd, name, &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno == ENOENT) return MPT_OK;
        return mpt_errorf(MPT_ERR_IO, "%s/%s: %s", dir, name, strerror(errno));
    }
    if (S_ISREG(st.st_mode)) return MPT_OK;
    if (S_ISLNK(st.st_mode)) {
        char target[512] = "?", esc[600];
        ssize_t n = readlinkat(dir_fd, name, target, sizeof target - 1);
        if (n >= 0) target[n] = '\0';
        return mpt_errorf(MPT_ERR_IO, "%s/%s: a symbolic link (to %s) in place of an output: refusing to write "
                                      "through it or replace it; remove it or choose another --out",
                          dir, name, mpt_escape(esc, sizeof esc, target));
    }
    return mpt_errorf(MPT_ERR_IO, "%s/%s: %s in place of an output, expected a regular file; remove it or choose "
                                  "another --out", dir, name, file_kind(&st));
}

mpt_status mpt_outdir_check_names(const mpt_outdir *od, const char *const *names) {
    for (int i = 0; names[i]; i++) MPT_TRY(check_name(od->fd, od->path, names[i]));
    return MPT_OK;
}

mpt_status mpt_outdir_check_space(const mpt_outdir *od, uint64_t bytes, const char *what) {
    struct statvfs v;
    if (fstatvfs(od->fd, &v) != 0) return mpt_errorf(MPT_ERR_IO, "--out %s: statvfs failed (%s)", od->path, strerror(errno));
    uint64_t avail = (uint64_t)v.f_bavail * (uint64_t)(v.f_frsize ? v.f_frsize : v.f_bsize);
    if (avail >= bytes) return MPT_OK;
    return mpt_errorf(MPT_ERR_IO, "--out %s: %.2f MiB free on its file system, and this run needs about %.2f MiB (%s): "
                                  "free some space or choose another --out (checked before training, so that no "
                                  "trained weights are lost)",
                      od->path, (double)avail / 1048576.0, (double)bytes / 1048576.0, what);
}

mpt_status mpt_outdir_remove(const mpt_outdir *od, const char *name) {
    MPT_TRY(check_name(od->fd, od->path, name)); /* a symbolic link in its place is refused, not removed */
    if (unlinkat(od->fd, name, 0) != 0 && errno != ENOENT)
        return mpt_errorf(MPT_ERR_IO, "%s/%s: cannot remove the result of an earlier run (%s)", od->path, name,
                          strerror(errno));
    return MPT_OK;
}

/* ---- files: a temporary name, published by rename ------------------------------------------------------------ */

/* Creates a temporary file for `name` in dir_fd; its stream in *f and its name in tmp. */
static mpt_status create_temp(int dir_fd, const char *dir, const char *name, char *tmp, size_t cap, FILE **f) {
    *f = NULL;
    int fd = mpt_checkpoint_create_temp(dir_fd, name, tmp, cap);
    if (fd < 0)
        return mpt_errorf(MPT_ERR_IO, "%s/%s: cannot create a temporary file beside it (%s)", dir, name, strerror(errno));
    *f = fdopen(fd, "w");
    if (!*f) {
        mpt_status s = mpt_errorf(MPT_ERR_IO, "%s/%s: cannot write (%s)", dir, name, strerror(errno));
        close(fd);
        unlinkat(dir_fd, tmp, 0);
        return s;
    }
    return MPT_OK;
}

/* Flushes and fsyncs f (not closed); the errno of the first failure, or -1 for a write that failed earlier
 * without one, 0 when every byte reached the file. */
static int flush_sync(FILE *f) {
    int bad = ferror(f);
    errno = 0;
    if (fflush(f) != 0) return errno ? errno : -1; /* after a failed write, fflush writes the rest again */
    if (fsync(fileno(f)) != 0) return errno;
    return bad ? -1 : 0;
}

/* Renames dir_fd/tmp over dir_fd/name unless something other than a regular file stands there. */
static mpt_status rename_over(int dir_fd, const char *dir, const char *tmp, const char *name) {
    mpt_status s = check_name(dir_fd, dir, name);
    if (s == MPT_OK && renameat(dir_fd, tmp, dir_fd, name) != 0)
        s = mpt_errorf(MPT_ERR_IO, "%s/%s: cannot write (rename: %s)", dir, name, strerror(errno));
    if (s != MPT_OK) unlinkat(dir_fd, tmp, 0);
    return s;
}

static mpt_status write_error(const char *path, int why) {
    return mpt_errorf(MPT_ERR_IO, "%s: cannot write (%s)", path,
                      why > 0 ? strerror(why) : "a write to it failed; stdio kept no reason");
}

mpt_status mpt_outfile_open(mpt_outfile *of, const mpt_outdir *od, const char *name) {
    memset(of, 0, sizeof *of);
    of->dir_fd = od->fd;
    snprintf(of->name, sizeof of->name, "%s", name);
    snprintf(of->path, sizeof of->path, "%s/%s", od->path, name);
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", od->path);
    return create_temp(od->fd, dir, name, of->tmp, sizeof of->tmp, &of->f);
}

mpt_status mpt_outfile_publish(mpt_outfile *of) {
    if (!of->f) return MPT_OK;
    int why = flush_sync(of->f);
    if (fclose(of->f) != 0 && !why) why = errno ? errno : -1;
    of->f = NULL;
    if (why) {
        unlinkat(of->dir_fd, of->tmp, 0);
        return write_error(of->path, why);
    }
    char dir[4400];
    snprintf(dir, sizeof dir, "%.*s", (int)(strlen(of->path) - strlen(of->name) - 1), of->path);
    return rename_over(of->dir_fd, dir, of->tmp, of->name);
}

void mpt_outfile_discard(mpt_outfile *of) {
    if (!of || !of->f) return;
    fclose(of->f);
    of->f = NULL;
    unlinkat(of->dir_fd, of->tmp, 0);
}

/* ---- publish sets ---------------------------------------------------------------------------------------------- */

void mpt_outdir_publish_point(const char *what) {
    static long reached, kill_at = -1;
    static int trace;
    if (kill_at < 0) {
        const char *k = getenv("MPT_TEST_PUBLISH_KILL"), *t = getenv("MPT_TEST_PUBLISH_TRACE");
        kill_at = k ? strtol(k, NULL, 10) : 0;
        trace = t && strcmp(t, "1") == 0;
    }
    reached++;
    if (trace) fprintf(stderr, "publish point %ld: %s\n", reached, what);
    if (kill_at > 0 && reached == kill_at) raise(SIGKILL);
}

void mpt_outdir_txn_begin(mpt_outdir_txn *tx, const mpt_outdir *od) {
    tx->od = od;
    tx->n = 0;
}

mpt_status mpt_outdir_txn_add(mpt_outdir_txn *tx, const char *tmp, const char *name) {
    if (tx->n == MPT_OUTDIR_TXN_MAX || strlen(tmp) >= sizeof tx->op[0].tmp || strlen(name) >= sizeof tx->op[0].name) {
        unlinkat(tx->od->fd, tmp, 0);
        return mpt_errorf(MPT_ERR_ARG, "%s/%s: cannot join the publish set (%d files at most)", tx->od->path, name,
                          MPT_OUTDIR_TXN_MAX);
    }
    snprintf(tx->op[tx->n].tmp, sizeof tx->op[0].tmp, "%s", tmp);
    snprintf(tx->op[tx->n].name, sizeof tx->op[0].name, "%s", name);
    tx->n++;
    return MPT_OK;
}

mpt_status mpt_outdir_txn_remove(mpt_outdir_txn *tx, const char *name) {
    if (tx->n == MPT_OUTDIR_TXN_MAX || strlen(name) >= sizeof tx->op[0].name)
        return mpt_errorf(MPT_ERR_ARG, "%s/%s: cannot join the publish set (%d files at most)", tx->od->path, name,
                          MPT_OUTDIR_TXN_MAX);
    tx->op[tx->n].tmp[0] = '\0';
    snprintf(tx->op[tx->n].name, sizeof tx->op[0].name, "%s", name);
    tx->n++;
    return MPT_OK;
}

void mpt_outdir_txn_abort(mpt_outdir_txn *tx) {
    for (int i = 0; i < tx->n; i++)
        if (tx->op[i].tmp[0]) unlinkat(tx->od->fd, tx->op[i].tmp, 0);
    tx->n = 0;
}

mpt_status mpt_outfile_stage(mpt_outfile *of, mpt_outdir_txn *tx) {
    if (!of->f) return MPT_OK;
    int why = flush_sync(of->f);
    if (fclose(of->f) != 0 && !why) why = errno ? errno : -1;
    of->f = NULL;
    if (why) {
        unlinkat(of->dir_fd, of->tmp, 0);
        return write_error(of->path, why);
    }
    return mpt_outdir_txn_add(tx, of->tmp, of->name);
}

/* A copy of what of holds so far, flushed and fsync'ed under a new temporary name (in tmp, cap bytes). */
static mpt_status copy_so_far(mpt_outfile *of, char *tmp, size_t cap) {
    int why = flush_sync(of->f);
    if (why) return write_error(of->path, why);
    char dir[4400];
    snprintf(dir, sizeof dir, "%.*s", (int)(strlen(of->path) - strlen(of->name) - 1), of->path);
    FILE *copy;
    MPT_TRY(create_temp(of->dir_fd, dir, of->name, tmp, cap, &copy));
    char buf[65536];
    off_t at = 0;
    for (;;) {
        ssize_t n = pread(fileno(of->f), buf, sizeof buf, at);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            why = errno;
            break;
        }
        if (n == 0) break;
        if (fwrite(buf, 1, (size_t)n, copy) != (size_t)n) {
            why = errno ? errno : -1;
            break;
        }
        at += n;
    }
    if (!why) why = flush_sync(copy);
    if (fclose(copy) != 0 && !why) why = errno ? errno : -1;
    if (why) {
        unlinkat(of->dir_fd, tmp, 0);
        return write_error(of->path, why);
    }
    return MPT_OK;
}

mpt_status mpt_outfile_stage_copy(mpt_outfile *of, mpt_outdir_txn *tx) {
    if (!of->f) return MPT_OK;
    char tmp[300];
    MPT_TRY(copy_so_far(of, tmp, sizeof tmp));
    return mpt_outdir_txn_add(tx, tmp, of->name);
}

/* Whether name is a plain name of this directory (no '/', no tab or newline: one field of a journal line), and tmp,
 * when given, a temporary name of it (".<name>.tmp-XXXXXX", mpt_checkpoint_create_temp). */
static int journal_names_ok(const char *tmp, const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n >= 256 || strcmp(name, ".") == 0 || strcmp(name, "..") == 0 || strpbrk(name, "/\t\n")) return 0;
    if (!tmp) return 1;
    return strlen(tmp) == n + 12 && tmp[0] == '.' && strncmp(tmp + 1, name, n) == 0 &&
           strncmp(tmp + 1 + n, ".tmp-", 5) == 0 && !strpbrk(tmp + n + 6, "/\t\n");
}

/* Applies operation (tmp, name) of a committed set: the rename (unless it was done: tmp gone) or the removal. */
static mpt_status journal_apply(int dir_fd, const char *dir, const char *tmp, const char *name) {
    MPT_TRY(check_name(dir_fd, dir, name));
    struct stat st;
    if (tmp && tmp[0]) {
        if (fstatat(dir_fd, tmp, &st, AT_SYMLINK_NOFOLLOW) != 0) return MPT_OK; /* renamed before the stop */
        if (renameat(dir_fd, tmp, dir_fd, name) != 0)
            return mpt_errorf(MPT_ERR_IO, "%s/%s: cannot publish it (rename: %s); the next mptrain on the directory "
                              "completes it (%s)", dir, name, strerror(errno), MPT_OUTDIR_JOURNAL);
    } else if (unlinkat(dir_fd, name, 0) != 0 && errno != ENOENT) {
        return mpt_errorf(MPT_ERR_IO, "%s/%s: cannot remove the result of an earlier run (%s)", dir, name,
                          strerror(errno));
    }
    return MPT_OK;
}

/* The end of a set: the directory's entries on disk, then the journal gone. */
static void journal_finish(int dir_fd) {
    fsync(dir_fd);
    unlinkat(dir_fd, MPT_OUTDIR_JOURNAL, 0);
    fsync(dir_fd);
}

mpt_status mpt_outdir_txn_commit(mpt_outdir_txn *tx) {
    const mpt_outdir *od = tx->od;
    mpt_status s = MPT_OK;
    for (int i = 0; i < tx->n && s == MPT_OK; i++) s = check_name(od->fd, od->path, tx->op[i].name);
    if (s != MPT_OK) {
        mpt_outdir_txn_abort(tx);
        return s;
    }
    mpt_outdir_publish_point("staged: every file written under its temporary name");
    char jtmp[300], jpath[4400];
    snprintf(jpath, sizeof jpath, "%s/%s", od->path, MPT_OUTDIR_JOURNAL);
    FILE *f;
    s = create_temp(od->fd, od->path, MPT_OUTDIR_JOURNAL, jtmp, sizeof jtmp, &f);
    if (s != MPT_OK) {
        mpt_outdir_txn_abort(tx);
        return s;
    }
    fprintf(f, "mptrain publish set 1\n");
    for (int i = 0; i < tx->n; i++)
        if (tx->op[i].tmp[0]) fprintf(f, "R\t%s\t%s\n", tx->op[i].tmp, tx->op[i].name);
        else fprintf(f, "D\t%s\n", tx->op[i].name);
    fprintf(f, "end\n");
    int why = flush_sync(f);
    if (fclose(f) != 0 && !why) why = errno ? errno : -1;
    if (!why) mpt_outdir_publish_point("journal written under its temporary name");
    if (!why && renameat(od->fd, jtmp, od->fd, MPT_OUTDIR_JOURNAL) != 0) why = errno;
    if (why) {
        unlinkat(od->fd, jtmp, 0);
        mpt_outdir_txn_abort(tx);
        return write_error(jpath, why);
    }
    fsync(od->fd);
    mpt_outdir_publish_point(tx->op[0].tmp[0] ? "journal in place (not yet committed: its first rename is the commit)"
                                              : "committed: the journal in place (its first operation is a removal)");
    for (int i = 0; i < tx->n; i++) {
        mpt_status a = journal_apply(od->fd, od->path, tx->op[i].tmp, tx->op[i].name);
        if (a != MPT_OK && s == MPT_OK) s = a;
        if (i == 0) fsync(od->fd); /* the commit on disk */
        char what[320];
        snprintf(what, sizeof what, "%s %s%s", tx->op[i].tmp[0] ? "renamed into place:" : "removed:", tx->op[i].name,
                 i == 0 && tx->op[i].tmp[0] ? " (committed)" : "");
        mpt_outdir_publish_point(what);
    }
    tx->n = 0;
    if (s != MPT_OK) return s; /* the journal stays: the next open completes the set */
    journal_finish(od->fd);
    mpt_outdir_publish_point("done: the journal removed");
    return MPT_OK;
}

/* Ends the set whose journal a stopped process left: committed (its first rename done, or its first operation a
 * removal), it is completed (every rename not yet done, every removal); not committed (the first rename's temporary
 * file still there), it is dropped (its temporary files are removed with the other stale ones). Then the journal
 * goes. A journal that is not one mptrain wrote is refused, naming it. */
static mpt_status replay_journal(const mpt_outdir *od) {
    int fd = openat(od->fd, MPT_OUTDIR_JOURNAL, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT) return MPT_OK;
    char jpath[4400];
    snprintf(jpath, sizeof jpath, "%s/%s", od->path, MPT_OUTDIR_JOURNAL);
    if (fd < 0) return mpt_errorf(MPT_ERR_IO, "%s: cannot read it (%s)", jpath, errno == ELOOP ? "a symbolic link" : strerror(errno));
    struct stat st;
    static char buf[65536];
    ssize_t n = -1;
    if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size < (off_t)sizeof buf) n = read(fd, buf, sizeof buf - 1);
    close(fd);
    const char *bad = NULL;
    if (n < 0) bad = "not a regular file of at most 64 KiB";
    else buf[n] = '\0';
    char *line = buf, *next;
    if (!bad && strncmp(buf, "mptrain publish set 1\n", 22) != 0) bad = "no header";
    int ops = 0, ended = 0, committed = 1;
    /* first pass: validate every line, and whether the set was committed; second: complete it */
    for (int pass = 0; pass < 2 && !bad && committed; pass++) {
        line = buf + 22;
        for (; *line && !bad; line = next) {
            next = strchr(line, '\n');
            if (!next) {
                bad = "a line without its end";
                break;
            }
            *next++ = '\0';
            if (strcmp(line, "end") == 0) {
                ended = 1;
                next[-1] = '\n';
                break;
            }
            char *f1 = strchr(line, '\t'), *f2 = f1 ? strchr(f1 + 1, '\t') : NULL;
            if (f1) *f1 = '\0';
            if (f2) *f2 = '\0';
            const char *tmp = line[0] == 'R' && f2 ? f1 + 1 : NULL, *name = line[0] == 'R' ? (f2 ? f2 + 1 : NULL)
                                                                                           : (f1 ? f1 + 1 : NULL);
            int ok = (line[1] == '\0') && name && (line[0] == 'D' ? !f2 && journal_names_ok(NULL, name)
                                                                  : line[0] == 'R' && journal_names_ok(tmp, name));
            struct stat tst;
            if (!ok) bad = "a line that is not an operation of mptrain";
            else if (pass == 0 && ops == 0 && tmp && fstatat(od->fd, tmp, &tst, AT_SYMLINK_NOFOLLOW) == 0)
                committed = 0; /* the first rename, the commit, never happened */
            else if (pass == 1) {
                mpt_status s = journal_apply(od->fd, od->path, tmp, name);
                if (s != MPT_OK) return s;
            }
            ops += pass == 0;
            if (f1) *f1 = '\t';
            if (f2) *f2 = '\t';
            next[-1] = '\n';
        }
        if (!bad && !ended && committed) bad = "no end line";
    }
    if (bad)
        return mpt_errorf(MPT_ERR_IO, "%s: not a journal of mptrain (%s): move it away; a set it names was not "
                          "completed", jpath, bad);
    journal_finish(od->fd);
    if (committed)
        printf("note: %s: completed the publish of %d file(s) that a stopped mptrain had committed (%s)\n", od->path,
               ops, MPT_OUTDIR_JOURNAL);
    return MPT_OK;
}

/* ---- files by path ------------------------------------------------------------------------------------------- */

/* The files of mpt_outdir_create_file not yet published: their temporary and final paths. */
#define MAX_CREATED 32
static struct created {
    FILE *f;
    char tmp[MPT_CLI_PATH + 320];
    char path[MPT_CLI_PATH + 64];
} created[MAX_CREATED];

static struct created *created_find(const FILE *f) {
    for (int i = 0; i < MAX_CREATED; i++)
        if (created[i].f && created[i].f == f) return &created[i];
    return NULL;
}

/* Opens the directory of path; *name points at its last component. */
static int open_parent(const char *path, char *dir, size_t cap, const char **name) {
    const char *slash = strrchr(path, '/');
    *name = slash ? slash + 1 : path;
    if (!slash) snprintf(dir, cap, ".");
    else if (slash == path) snprintf(dir, cap, "/");
    else snprintf(dir, cap, "%.*s", (int)(slash - path), path);
    return open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
}

FILE *mpt_outdir_create_file(const char *path) {
    struct created *c = NULL;
    for (int i = 0; i < MAX_CREATED && !c; i++)
        if (!created[i].f) c = &created[i];
    if (!c) {
        mpt_errorf(MPT_ERR_ARG, "%s: more than %d files open for writing", path, MAX_CREATED);
        return NULL;
    }
    char dir[MPT_CLI_PATH], tmp[300];
    const char *name;
    if (strlen(path) >= sizeof c->path || !*path) {
        mpt_errorf(MPT_ERR_ARG, "%s: path too long", path);
        return NULL;
    }
    int dfd = open_parent(path, dir, sizeof dir, &name);
    if (dfd < 0) {
        mpt_errorf(MPT_ERR_IO, "%s: cannot write (its directory: %s)", path, strerror(errno));
        return NULL;
    }
    FILE *f = NULL;
    mpt_status s = check_name(dfd, dir, name);
    if (s == MPT_OK) s = create_temp(dfd, dir, name, tmp, sizeof tmp, &f);
    close(dfd);
    if (s != MPT_OK) return NULL;
    c->f = f;
    snprintf(c->tmp, sizeof c->tmp, "%s/%s", dir, tmp);
    snprintf(c->path, sizeof c->path, "%s", path);
    return f;
}

void mpt_outdir_discard(FILE *f) {
    struct created *c = created_find(f);
    fclose(f);
    if (!c) return;
    unlink(c->tmp);
    c->f = NULL;
}

mpt_status mpt_outdir_close_written(FILE *f, const char *path) {
    struct created *c = created_find(f);
    int why = c ? flush_sync(f) : 0;
    if (!c) {
        int bad = ferror(f);
        errno = 0;
        why = fflush(f) != 0 ? (errno ? errno : -1) : 0; /* after a failed write, fflush writes the rest again */
        if (!why && bad) why = -1;
    }
    if (fclose(f) != 0 && !why) why = errno ? errno : -1;
    if (!c) return why ? write_error(path, why) : MPT_OK;
    c->f = NULL;
    if (why) {
        unlink(c->tmp);
        return write_error(path, why);
    }
    char dir[MPT_CLI_PATH];
    const char *name, *tmp_name = strrchr(c->tmp, '/') ? strrchr(c->tmp, '/') + 1 : c->tmp;
    int dfd = open_parent(c->path, dir, sizeof dir, &name);
    if (dfd < 0) {
        mpt_status s = mpt_errorf(MPT_ERR_IO, "%s: cannot write (its directory: %s)", path, strerror(errno));
        unlink(c->tmp);
        return s;
    }
    mpt_status s = rename_over(dfd, dir, tmp_name, name);
    close(dfd);
    return s;
}

mpt_status mpt_outdir_remove_result(const char *dir, const char *file) {
    char path[MPT_CLI_PATH + 64];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    struct stat st;
    if (lstat(path, &st) == 0 && !S_ISREG(st.st_mode)) { /* a symbolic link in its place is refused, not removed */
        int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        mpt_status s = dfd >= 0 ? check_name(dfd, dir, file) : mpt_errorf(MPT_ERR_IO, "%s: %s", dir, strerror(errno));
        if (dfd >= 0) close(dfd);
        if (s != MPT_OK) return s;
    }
    if (unlink(path) != 0 && errno != ENOENT)
        return mpt_errorf(MPT_ERR_IO, "%s: cannot remove the result of an earlier job (%s)", path, strerror(errno));
    return MPT_OK;
}

FILE *mpt_outdir_open_atomic(const char *path, char *tmp, size_t n) {
    FILE *f = mpt_outdir_create_file(path);
    if (f) snprintf(tmp, n, "%s", created_find(f)->tmp);
    return f;
}

mpt_status mpt_outdir_commit_atomic(FILE *f, const char *tmp, const char *path) {
    (void)tmp;
    return mpt_outdir_close_written(f, path);
}
