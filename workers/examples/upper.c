/*
 * upper.c - an etlstage T-worker in C: uppercases every message (ASCII a-z only).
 *
 * Modes: single, batch supervisor-driven, batch worker-driven (BNC).
 * Markers: ETLSTAGE_EOM / _EOP / _EOB / _BNC, two hex digits each (defaults 0a 00 17 11).
 *
 * Build:  cc -O2 -o upper upper.c        (or workers/examples/build.sh)
 * Try:    printf 'hello\n' | ETLSTAGE_TYPE=T ETLSTAGE_MODE=single ./upper | od -c
 *
 * How it works: read(2) stdin in 64 KiB chunks and walk the bytes once.  Results of the
 * batch being collected grow in `open`; a finished batch moves to `reply` with its EOP,
 * and a BNC goes to `reply` at once.  After each chunk `reply` goes out in a single
 * write(2), *before* the next read blocks - a worker that waits for input while holding
 * a reply would deadlock the pipeline.
 * stdout carries protocol bytes only; every diagnostic goes to stderr.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK 65536

static const char *me = "upper.c";

static void die(int code, const char *what, const char *detail) {
    fprintf(stderr, "%s: %s%s%s\n", me, what, detail ? ": " : "", detail ? detail : "");
    exit(code);
}

/* A marker from ETLSTAGE_<name>: two hex digits, or the default when unset. */
static int marker(const char *name, int fallback) {
    char var[32];
    snprintf(var, sizeof var, "ETLSTAGE_%s", name);
    const char *v = getenv(var);
    if (v == NULL || *v == '\0') return fallback;
    char *end;
    long n = strtol(v, &end, 16);
    if (strlen(v) != 2 || *end != '\0' || n < 0 || n > 255) {
        fprintf(stderr, "%s: %s=%s: expected two hex digits such as 0a\n", me, var, v);
        exit(2);
    }
    return (int)n;
}

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return (v == NULL || *v == '\0') ? fallback : v;
}

/* A growable byte buffer. */
struct buf { unsigned char *data; size_t len, cap; };

static void reserve(struct buf *b, size_t more) {
    if (b->len + more <= b->cap) return;
    size_t cap = b->cap ? b->cap : CHUNK;
    while (cap < b->len + more) cap *= 2;
    b->data = realloc(b->data, cap);
    if (b->data == NULL) die(1, "out of memory", NULL);
    b->cap = cap;
}

static void put(struct buf *b, unsigned char c) {
    if (b->len == b->cap) reserve(b, 1);
    b->data[b->len++] = c;
}

/* Move the open batch's results to the replies, closed by EOP. */
static void close_batch(struct buf *reply, struct buf *open, int eop) {
    reserve(reply, open->len + 1);
    memcpy(reply->data + reply->len, open->data, open->len);
    reply->len += open->len;
    reply->data[reply->len++] = (unsigned char)eop;
    open->len = 0;
}

/* Write the replies in one write(2) (looping only on short writes). */
static void flush_replies(struct buf *reply) {
    size_t done = 0;
    while (done < reply->len) {
        ssize_t n = write(1, reply->data + done, reply->len - done);
        if (n < 0) {
            if (errno == EINTR) continue;
            die(1, "cannot write to stdout (did the supervisor go away?)", strerror(errno));
        }
        done += (size_t)n;
    }
    reply->len = 0;
}

int main(void) {
    signal(SIGPIPE, SIG_IGN); /* a closed stdout becomes EPIPE, reported by flush_replies */

    int eom = marker("EOM", 0x0a), eop = marker("EOP", 0x00);
    int eob = marker("EOB", 0x17), bnc = marker("BNC", 0x11);
    if (eom == eop || eom == eob || eom == bnc || eop == eob || eop == bnc || eob == bnc)
        die(2, "the four ETLSTAGE_* markers must be distinct bytes", NULL);

    const char *mode = env_or("ETLSTAGE_MODE", "single");
    const char *driver = env_or("ETLSTAGE_BATCH_DRIVER", "supervisor");
    int batch = strcmp(mode, "batch") == 0;
    if (!batch && strcmp(mode, "single") != 0) die(2, "ETLSTAGE_MODE: expected single or batch, got", mode);
    int worker_driven = batch && strcmp(driver, "worker") == 0;
    if (batch && !worker_driven && strcmp(driver, "supervisor") != 0)
        die(2, "ETLSTAGE_BATCH_DRIVER: expected supervisor or worker, got", driver);
    long batch_size = strtol(env_or("ETLSTAGE_BATCH_SIZE", "1"), NULL, 10);
    if (batch_size < 1) die(2, "ETLSTAGE_BATCH_SIZE: expected an integer >= 1", getenv("ETLSTAGE_BATCH_SIZE"));

    static unsigned char in[CHUNK];
    struct buf reply = {0}; /* complete replies: results + EOP, or BNC; written after each chunk */
    struct buf open = {0};  /* results of the batch still being collected */
    long in_batch = 0;      /* complete messages in the open batch */
    int mid_message = 0;    /* bytes of an unfinished message were read */
    for (;;) {
        ssize_t n = read(0, in, sizeof in);
        if (n < 0) {
            if (errno == EINTR) continue;
            die(1, "cannot read stdin", strerror(errno));
        }
        if (n == 0) break; /* stdin closed: no more work */
        reserve(&open, (size_t)n);
        for (ssize_t i = 0; i < n; i++) {
            int c = in[i];
            if (c == eom) {
                put(&open, (unsigned char)c);
                mid_message = 0;
                in_batch++;
                if (!batch || in_batch >= batch_size) {
                    if (!batch || worker_driven) {  /* single, or a full worker-driven batch */
                        close_batch(&reply, &open, eop);
                        in_batch = 0;
                    }
                } else if (worker_driven) {
                    put(&reply, (unsigned char)bnc); /* short of BATCH_SIZE: ask for more */
                }
            } else if (c == eob) {
                if (!batch) die(3, "protocol error", "EOB received in single mode");
                if (mid_message) die(3, "protocol error", "EOB in the middle of a message");
                close_batch(&reply, &open, eop);      /* a batch, full or partial, is closed */
                in_batch = 0;
            } else if (c == eop || c == bnc) {
                die(3, "protocol error", c == eop ? "EOP on stdin (only a worker writes EOP)"
                                                  : "BNC on stdin (only a worker writes BNC)");
            } else {
                open.data[open.len++] = (unsigned char)(c >= 'a' && c <= 'z' ? c - 32 : c);
                mid_message = 1;
            }
        }
        flush_replies(&reply);
    }
    if (in_batch > 0 || mid_message)
        fprintf(stderr, "%s: stdin closed with an unfinished batch (%ld complete messages%s): not processed, "
                        "the supervisor sends it again\n", me, in_batch, mid_message ? " and a partial one" : "");
    return 0;
}
