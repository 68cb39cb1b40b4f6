/* Bench L-worker in C, batch mode (supervisor-driven): answers each EOB with EOP and
 * discards the data, so a benchmark measures the supervisor, not the loader.
 * Build: cc -O2 -o null_loader null_loader.c */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int marker(const char *name, int fallback) {
    const char *v = getenv(name);
    return v && *v ? (int)strtol(v, NULL, 16) : fallback;
}

int main(void) {
    int eob = marker("ETLSTAGE_EOB", 0x17);
    char eop = (char)marker("ETLSTAGE_EOP", 0x00);
    static char buf[1 << 20];
    char answers[4096];
    ssize_t n;
    while ((n = read(0, buf, sizeof buf)) > 0) {
        size_t k = 0;
        for (char *p = buf, *end = buf + n; (p = memchr(p, eob, (size_t)(end - p))) != NULL; p++)
            answers[k++] = eop;
        if (k && write(1, answers, k) != (ssize_t)k)
            return 1;
    }
    return n < 0;
}
