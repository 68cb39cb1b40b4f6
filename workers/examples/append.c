/*
 * append.c - an etlstage L-worker in C: appends each message, as a line, to a file.
 *
 * Usage:  append OUT_FILE
 * Modes: single, batch supervisor-driven, batch worker-driven (BNC).
 * Markers: ETLSTAGE_EOM / _EOP / _EOB / _BNC, two hex digits each (defaults 0a 00 17 11).
 *
 * Build:  cc -O2 -o append append.c        (or workers/examples/build.sh)
 *
 * An L-worker's EOP says "durably loaded": the supervisor commits offsets upstream on
 * it.  So the batches a chunk of input closes are appended with one write(2) and
 * fsync(2)'ed BEFORE their EOPs are written.  A replay after a crash may append a batch twice (at-least-once);
 * a stage with batch_id: true is refused (exit 2): append.py appends each batch once by its id.
 * stdout carries protocol bytes only; every diagnostic goes to stderr.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define CHUNK 65536

static void die(int code, const char *what, const char *detail) {
    fprintf(stderr, "append.c: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(code);
}

static int marker(const char *name, int fallback) {
    char var[32];
    snprintf(var, sizeof var, "ETLSTAGE_%s", name);
    const char *v = getenv(var);
    if (v == NULL || *v == '\0') return fallback;
    char *end;
    long n = strtol(v, &end, 16);
    if (strlen(v) != 2 || *end != '\0') {
        fprintf(stderr, "append.c: %s=%s: expected two hex digits such as 0a\n", var, v);
        exit(2);
    }
    return (int)n;
}

static const char *env_or(const char *name, const char *fallback) {
    const char *v = getenv(name);
    return (v == NULL || *v == '\0') ? fallback : v;
}

static void write_all(int fd, const unsigned char *data, size_t len, const char *what) {
    while (len > 0) {
        ssize_t n = write(fd, data, len);
        if (n < 0) {
            if (errno == EINTR) continue;
            die(1, what, strerror(errno));
        }
        data += n;
        len -= (size_t)n;
    }
}

/* The open batch: its messages as lines, ready to append. */
static unsigned char *lines;
static size_t lines_len, lines_cap;

static void put_line_byte(unsigned char c) {
    if (lines_len == lines_cap) {
        lines_cap = lines_cap ? lines_cap * 2 : CHUNK;
        lines = realloc(lines, lines_cap);
        if (lines == NULL) die(1, "out of memory", NULL);
    }
    lines[lines_len++] = c;
}

int main(int argc, char **argv) {
    if (argc != 2) die(2, "usage: append OUT_FILE", NULL);
    signal(SIGPIPE, SIG_IGN);

    int eom = marker("EOM", 0x0a), eop = marker("EOP", 0x00);
    int eob = marker("EOB", 0x17), bnc = marker("BNC", 0x11);
    if (eom == eop || eom == eob || eom == bnc || eop == eob || eop == bnc || eob == bnc)
        die(2, "the four ETLSTAGE_* markers must be distinct bytes", NULL);
    const char *mode = env_or("ETLSTAGE_MODE", "single");
    int batch = strcmp(mode, "batch") == 0;
    if (!batch && strcmp(mode, "single") != 0) die(2, "ETLSTAGE_MODE: expected single or batch, got", mode);
    const char *driver = env_or("ETLSTAGE_BATCH_DRIVER", "supervisor");
    int worker_driven = batch && strcmp(driver, "worker") == 0;
    if (batch && !worker_driven && strcmp(driver, "supervisor") != 0)
        die(2, "ETLSTAGE_BATCH_DRIVER: expected supervisor or worker, got", driver);
    /* A stage with batch_id: true opens each batch with a header message this loader would
       append as data: refused (append.py, or a FileSink in an SDK, commits by batch id). */
    if (strcmp(env_or("ETLSTAGE_BATCH_ID", "0"), "1") == 0)
        die(2, "ETLSTAGE_BATCH_ID=1", "append.c does not commit by batch id (it would append each batch's "
            "header as a line): use append.py, or give the stage batch_id: false");
    long batch_size = strtol(env_or("ETLSTAGE_BATCH_SIZE", "1"), NULL, 10);
    if (batch_size < 1) die(2, "ETLSTAGE_BATCH_SIZE: expected an integer >= 1", getenv("ETLSTAGE_BATCH_SIZE"));

    int out = open(argv[1], O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (out < 0) die(2, "cannot open the output file", strerror(errno));

    static unsigned char in[CHUNK], reply[CHUNK];
    size_t reply_len = 0;   /* EOPs and BNCs: at most one per input byte, so it fits in CHUNK */
    size_t closed_len = 0;  /* lines[0, closed_len) belong to batches closed in this chunk */
    long in_batch = 0;
    int mid_message = 0;
    for (;;) {
        ssize_t n = read(0, in, sizeof in);
        if (n < 0) {
            if (errno == EINTR) continue;
            die(1, "cannot read stdin", strerror(errno));
        }
        if (n == 0) break;
        for (ssize_t i = 0; i < n; i++) {
            int c = in[i];
            int close_batch = 0;
            if (c == eom) {
                put_line_byte('\n');
                mid_message = 0;
                in_batch++;
                if (!batch || (worker_driven && in_batch >= batch_size)) close_batch = 1;
                else if (worker_driven) reply[reply_len++] = (unsigned char)bnc;
            } else if (c == eob) {
                if (!batch) die(3, "protocol error", "EOB received in single mode");
                if (mid_message) die(3, "protocol error", "EOB in the middle of a message");
                close_batch = 1;
            } else if (c == eop || c == bnc) {
                die(3, "protocol error", "EOP or BNC on stdin (only a worker writes those)");
            } else {
                put_line_byte((unsigned char)c);
                mid_message = 1;
            }
            if (close_batch) {
                closed_len = lines_len;
                in_batch = 0;
                reply[reply_len++] = (unsigned char)eop;
            }
        }
        if (closed_len > 0) {
            /* load the batches this chunk closed durably (one write, one fsync), THEN acknowledge */
            write_all(out, lines, closed_len, "cannot append to the output file");
            if (fsync(out) != 0) die(1, "fsync of the output file failed", strerror(errno));
            memmove(lines, lines + closed_len, lines_len - closed_len);
            lines_len -= closed_len;
            closed_len = 0;
        }
        write_all(1, reply, reply_len, "cannot write to stdout (did the supervisor go away?)");
        reply_len = 0;
    }
    if (in_batch > 0 || mid_message)
        fprintf(stderr, "append.c: stdin closed with an unfinished batch (%ld complete messages): not loaded, "
                        "the supervisor sends it again\n", in_batch);
    close(out);
    return 0;
}
