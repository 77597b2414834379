/* out.c -- buffered output to a file descriptor (oc_out): the recorder's recording and the renderer's
 * trace go through it.  Bytes collect in a 1 MiB buffer and go out with write(2), never stdio, so a
 * forked child's exit cannot flush half of it a second time.  A write error is kept in o->err (and
 * later writes dropped) for the caller to report.
 *
 * Two things make the renderer's output cheaper:
 * - Blocks allocated ahead of the writes (oc_out_preallocate): writing into blocks allocated beforehand
 *   costs the kernel less than allocating them write by write (ext4: 110 MB of JSON in 1 MiB writes,
 *   22 ms of system time against 16 ms with fallocate first).  The output allocates ahead in steps,
 *   4 MiB, then half of what is written, at most 64 MiB, without growing the file
 *   (FALLOC_FL_KEEP_SIZE): the file holds only what was written, and oc_out_trim gives the rest back.
 *   Where fallocate is not supported, or fails (a full disk), writes go on as before and report their
 *   own errors.  (The recorder does not: its 16 bytes an event, written while the program runs,
 *   measured no faster.)
 * - A writer thread (oc_out_async_start): the buffer is handed to it when full, and filling goes on in
 *   a second buffer while it is written, so a CPU that would be idle does the system calls.  The
 *   renderer uses it for JSON (~45 bytes an event; not for .pftrace's ~1.5, measured 1% slower) where
 *   it has a CPU to itself and another one free: at stop, after the program, and in `convert`.  Only
 *   the writer thread then touches total, reserved and the file; a write error reaches o->err at the
 *   next hand-over (or at oc_out_async_end).
 */
#include "render.h"
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct oc_writer {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    char *pending;      /* a full buffer handed over, being written or waiting; NULL: none */
    size_t pending_len;
    char *spare;        /* the buffer not in use (NULL while it is pending) */
    int quit;
    int err;            /* a failed write: later buffers are dropped; the filling thread takes it over */
};

void oc_out_preallocate(oc_out *o) {
    o->prealloc = 1;
    o->reserved = o->total;
}

static void reserve_ahead(oc_out *o, size_t len) {
    uint64_t need = o->total + len, step = o->total / 2;
    step = step < (4u << 20) ? (4u << 20) : step > (64u << 20) ? (64u << 20) : step;
    if (fallocate(o->fd, FALLOC_FL_KEEP_SIZE, (off_t)o->reserved, (off_t)(need + step - o->reserved)) != 0) {
        o->prealloc = 0;
        return;
    }
    o->reserved = need + step;
}

int oc_out_trim(oc_out *o) {
    if (o->fd < 0 || o->reserved <= o->total || !oc_out_is_ours(o))
        return 0;
    o->reserved = o->total;
    o->prealloc = 0;
    return ftruncate(o->fd, (off_t)o->total) == 0 ? 0 : errno;
}

int oc_fd_above_std(int fd) {
    if (fd < 0 || fd > 2)
        return fd;
    int high = fcntl(fd, F_DUPFD_CLOEXEC, 3);
    int err = errno;
    close(fd);
    errno = err;
    return high;
}

void oc_out_own(oc_out *o, const char *path) {
    struct stat st;
    o->owned = o->fd >= 0 && fstat(o->fd, &st) == 0;
    if (o->owned) {
        o->dev = st.st_dev;
        o->ino = st.st_ino;
    }
    o->path = path;
}

int oc_out_is_ours(oc_out *o) {
    struct stat st;
    return !o->owned || (fstat(o->fd, &st) == 0 && st.st_dev == o->dev && st.st_ino == o->ino);
}

/* o->fd is no longer our file: open it again by its path (the same file, at the offset written up to);
 * the old number is the program's now and is left alone.  0, or -1: the file cannot be had again. */
static int reclaim(oc_out *o) {
    o->fd = -1;
    if (!o->path)
        return -1;
    int fd = oc_fd_above_std(open(o->path, O_WRONLY | O_CLOEXEC));
    struct stat st;
    if (fd < 0)
        return -1;
    if (fstat(fd, &st) != 0 || st.st_dev != o->dev || st.st_ino != o->ino ||
        lseek(fd, (off_t)o->total, SEEK_SET) < 0) {
        close(fd);
        return -1;
    }
    o->fd = fd;
    return 0;
}

int oc_out_close(oc_out *o) {
    int err = 0;
    if (o->fd >= 0 && oc_out_is_ours(o) && close(o->fd) != 0)
        err = errno;
    o->fd = -1;
    o->owned = 0;
    return err;
}

/* buf[0..len) to the file; 0 or errno */
static int write_all(oc_out *o, const char *buf, size_t len) {
    size_t off = 0;
    if (o->owned && !oc_out_is_ours(o) && reclaim(o) < 0)
        return EBADF; /* (the program closed it, and it cannot be opened again) */
    if (o->prealloc && o->total + len > o->reserved)
        reserve_ahead(o, len);
    while (off < len) {
        ssize_t w = write(o->fd, buf + off, len - off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return errno;
        }
        if (w == 0)
            return EIO;
        off += (size_t)w;
        o->total += (uint64_t)w;
    }
    return 0;
}

static void *writer_main(void *arg) {
    oc_out *o = arg;
    struct oc_writer *w = o->async;
    pthread_mutex_lock(&w->lock);
    for (;;) {
        while (!w->pending && !w->quit)
            pthread_cond_wait(&w->cond, &w->lock);
        if (!w->pending)
            break;
        char *buf = w->pending;
        size_t len = w->pending_len;
        int err = w->err;
        pthread_mutex_unlock(&w->lock);
        if (!err)
            err = write_all(o, buf, len);
        pthread_mutex_lock(&w->lock);
        w->err = err;
        w->spare = buf;
        w->pending = NULL;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

void oc_out_async_start(oc_out *o) {
    if (o->async || o->fd < 0 || !o->buf)
        return;
    struct oc_writer *w = calloc(1, sizeof *w);
    if (!w || !(w->spare = malloc(o->cap))) {
        free(w);
        return; /* writes stay synchronous */
    }
    pthread_mutex_init(&w->lock, NULL);
    pthread_cond_init(&w->cond, NULL);
    o->async = w;
    if (oc_thread_create(&w->thread, NULL, writer_main, o, OC_RENDER_THREAD_NAME) != 0) {
        o->async = NULL;
        free(w->spare);
        free(w);
    }
}

/* Hand the filled buffer to the writer thread and take the other one (waiting while it is written). */
static void hand_over(oc_out *o) {
    struct oc_writer *w = o->async;
    pthread_mutex_lock(&w->lock);
    while (w->pending)
        pthread_cond_wait(&w->cond, &w->lock);
    if (w->err) {
        o->err = w->err;
    } else {
        w->pending = o->buf;
        w->pending_len = o->len;
        o->buf = w->spare;
        w->spare = NULL;
        pthread_cond_broadcast(&w->cond);
    }
    pthread_mutex_unlock(&w->lock);
    o->len = 0;
}

void oc_out_async_end(oc_out *o) {
    struct oc_writer *w = o->async;
    if (!w)
        return;
    oc_out_flush(o);
    pthread_mutex_lock(&w->lock);
    w->quit = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    if (w->err && !o->err)
        o->err = w->err;
    free(w->spare);
    pthread_mutex_destroy(&w->lock);
    pthread_cond_destroy(&w->cond);
    free(w);
    o->async = NULL;
}

void oc_out_flush(oc_out *o) {
    if (o->fd < 0 || o->err) {
        o->len = 0;
        return;
    }
    if (o->async) {
        hand_over(o);
        return;
    }
    int err = write_all(o, o->buf, o->len);
    if (err)
        o->err = err;
    o->len = 0;
}

void oc_out_write(oc_out *o, const char *s, size_t n) {
    if (LIKELY(o->len + n <= o->cap)) {
        memcpy(o->buf + o->len, s, n);
        o->len += n;
        return;
    }
    if (o->fd < 0) {
        o->len = 0;
        return;
    }
    while (n) {
        if (o->len + 1 > o->cap)
            oc_out_flush(o);
        size_t room = o->cap - o->len;
        size_t k = n < room ? n : room;
        memcpy(o->buf + o->len, s, k);
        o->len += k;
        s += k;
        n -= k;
    }
}

void oc_out_printf(oc_out *o, const char *fmt, ...) {
    char tmp[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0)
        oc_out_write(o, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* a JSON string body: " and \ escaped, control characters as \u00XX (malloc'd; NULL: no memory) */
char *oc_json_escape(const char *s, size_t n) {
    char *out = malloc(n * 6 + 1), *o = out;
    if (!out)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') {
            *o++ = '\\';
            *o++ = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            static const char hex[] = "0123456789abcdef";
            memcpy(o, "\\u00", 4);
            o[4] = hex[c >> 4];
            o[5] = hex[c & 15];
            o += 6;
        } else {
            *o++ = (char)c;
        }
    }
    *o = 0;
    return out;
}
