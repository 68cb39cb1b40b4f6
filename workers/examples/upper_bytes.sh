#!/bin/sh
# upper_bytes.sh - an etlstage T-worker in sh + awk that speaks EVERY T mode: single,
# batch supervisor-driven and batch worker-driven (BNC), with any markers (NUL included).
#
# The trick: awk cannot see an EOB that no EOM follows (see upper.sh), and awk strings
# cannot always hold NUL.  So `od` turns each input byte into a line holding its decimal
# value, awk runs the protocol on numbers, and writes bytes back with printf "%c", n.
# `stdbuf -o0` stops od from holding bytes in its stdout buffer.  Needs GNU coreutils
# (od -w1, stdbuf) and any awk.  About 0.3 MB/s: a teaching example, not a fast one -
# see upper.c, upper.js or upper.py for real work.
#
# Markers: ETLSTAGE_EOM / _EOP / _EOB / _BNC, two hex digits each (defaults 0a 00 17 11).
# stdout carries protocol bytes only; errors go to stderr.
set -eu

fail() { echo "upper_bytes.sh: $*" >&2; exit 2; }

marker() {
    eval "value=\${ETLSTAGE_$1:-$2}"
    case $value in
        [0-9a-fA-F][0-9a-fA-F]) echo $((0x$value)) ;;
        *) fail "ETLSTAGE_$1=$value: expected two hex digits such as 0a" ;;
    esac
}

eom=$(marker EOM 0a)
eop=$(marker EOP 00)
eob=$(marker EOB 17)
bnc=$(marker BNC 11)
mode=${ETLSTAGE_MODE:-single}
driver=${ETLSTAGE_BATCH_DRIVER:-supervisor}
size=${ETLSTAGE_BATCH_SIZE:-1}
case $mode in single | batch) ;; *) fail "ETLSTAGE_MODE=$mode: expected single or batch" ;; esac
case $driver in supervisor | worker) ;; *) fail "ETLSTAGE_BATCH_DRIVER=$driver: expected supervisor or worker" ;; esac
case $size in '' | *[!0-9]* | 0) fail "ETLSTAGE_BATCH_SIZE=$size: expected an integer >= 1" ;; esac

# mawk reads pipes in big blocks unless -W interactive (its records are then lines: fine here)
if awk -W version 2>/dev/null | grep -q mawk; then set -- -W interactive; else set --; fi

stdbuf -o0 od -An -v -tu1 -w1 | LC_ALL=C awk "$@" \
    -v eom="$eom" -v eop="$eop" -v eob="$eob" -v bnc="$bnc" \
    -v mode="$mode" -v driver="$driver" -v size="$size" '
# r[1..k]: the results of the open batch, as byte values; n: its complete messages
function reply(    i) {                 # the batch results, then EOP
    for (i = 1; i <= k; i++) printf "%c", r[i]
    printf "%c", eop
    fflush()
    k = 0; n = 0; mid = 0
}
function protocol_error(text) {
    printf "upper_bytes.sh: protocol error: %s\n", text > "/dev/stderr"
    bad = 1
    exit 3
}
{
    c = $1 + 0
    if (c == eom) {
        r[++k] = c; n++; mid = 0
        if (mode == "single") reply()
        else if (driver == "worker") {
            if (n >= size + 0) reply()               # the filling message: no BNC
            else { printf "%c", bnc; fflush() }      # short of BATCH_SIZE: ask for more
        }
    } else if (c == eob) {
        if (mode != "batch") protocol_error("EOB received in single mode")
        if (mid) protocol_error("EOB in the middle of a message")
        reply()                                      # a batch, full or partial, is closed
    } else if (c == eop || c == bnc) {
        protocol_error("EOP or BNC on stdin (only a worker writes those)")
    } else {
        if (c >= 97 && c <= 122) c -= 32             # the transformation: ASCII a-z -> A-Z
        r[++k] = c; mid = 1
    }
}
END {
    if (!bad && (n || mid))
        printf "upper_bytes.sh: stdin closed with an unfinished batch (%d messages): not processed\n", n > "/dev/stderr"
}'
