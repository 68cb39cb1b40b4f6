#!/bin/sh
# count.sh - an etlstage E-worker in plain POSIX sh: emits the numbers 1..N.
#
# Usage: count.sh N [PER_CYCLE]
# Modes:
#  - plain:  prints 1 .. N, one message each, and exits 0.
#  - cyclic, worker-managed offsets (ETLSTAGE_OFFSETS=worker, requests are empty
#    messages): answers each request with the next PER_CYCLE numbers (default 3) and
#    EOP, then with empty cycles (EOP alone) once N is reached.  The offset is committed
#    to $ETLSTAGE_STATE_DIR/count-<instance>.offset when the NEXT request arrives (the
#    supervisor's word that the previous window was loaded), never on stdin EOF.
#  - cyclic, supervisor-managed offsets (requests {"start":S,"end":E}): emits S+1 .. E,
#    capped at N.
# Markers from ETLSTAGE_EOM/_EOP/_EOB/_BNC; EOM must be 0a, because `read` reads lines.
# A shell variable cannot hold a NUL byte, so EOP (default 0x00) is written with printf
# and an octal escape - printf '\000' - never stored in a variable.  Each printf is a
# write(2) of its own: nothing waits in a buffer.  Diagnostics go to stderr.
set -eu

fail() { echo "count.sh: $*" >&2; exit 2; }

hex() {
    eval "value=\${ETLSTAGE_$1:-$2}"
    case $value in
        [0-9a-fA-F][0-9a-fA-F]) echo $((0x$value)) ;;
        *) fail "ETLSTAGE_$1=$value: expected two hex digits such as 0a" ;;
    esac
}

case ${1:-} in '' | *[!0-9]*) fail "usage: count.sh N [PER_CYCLE] (N a non-negative integer, got '${1:-}')" ;; esac
total=$1
per_cycle=${2:-3}
case $per_cycle in '' | *[!0-9]* | 0) fail "PER_CYCLE: expected a positive integer, got '$per_cycle'" ;; esac
[ "$(hex EOM 0a)" -eq 10 ] || fail "ETLSTAGE_EOM=$ETLSTAGE_EOM: this worker reads lines, EOM must be 0a"
eop_escape=\\$(printf '%03o' "$(hex EOP 00)") # e.g. \000: a printf format, not the byte itself

# emit FIRST LAST: the numbers FIRST..LAST, each followed by EOM (newline)
emit() {
    n=$1
    while [ "$n" -le "$2" ]; do
        echo "$n"
        n=$((n + 1))
    done
}

mode=${ETLSTAGE_MODE:-plain}
if [ "$mode" = plain ]; then
    emit 1 "$total"
    exit 0
fi
[ "$mode" = cyclic ] || fail "ETLSTAGE_MODE=$mode: an E-worker runs plain or cyclic"

offset_file=${ETLSTAGE_STATE_DIR:-.}/count-${ETLSTAGE_INSTANCE:-0}.offset
committed=0
[ ! -s "$offset_file" ] || committed=$(cat "$offset_file")
emitted=$committed
cycle=0
echo "count.sh: total=$total, resuming after $committed" >&2

while IFS= read -r request; do
    if [ "${ETLSTAGE_OFFSETS:-worker}" = supervisor ]; then
        start=$(printf '%s\n' "$request" | sed -n 's/.*"start" *: *\([0-9]*\).*/\1/p')
        end=$(printf '%s\n' "$request" | sed -n 's/.*"end" *: *\([0-9]*\).*/\1/p')
        [ -n "$start" ] && [ -n "$end" ] || { echo "count.sh: bad request '$request'" >&2; exit 3; }
        [ "$end" -le "$total" ] || end=$total
        emit $((start + 1)) "$end"
    else
        if [ "$cycle" -gt 0 ] && [ "$emitted" -ne "$committed" ]; then
            # the previous window is done: commit it (temp file + rename: all or nothing)
            echo "$emitted" >"$offset_file.tmp"
            sync "$offset_file.tmp" 2>/dev/null || sync
            mv "$offset_file.tmp" "$offset_file"
            committed=$emitted
        fi
        last=$((emitted + per_cycle))
        [ "$last" -le "$total" ] || last=$total
        emit $((emitted + 1)) "$last"
        [ "$last" -le "$emitted" ] || emitted=$last
    fi
    # shellcheck disable=SC2059 # the format is the EOP escape on purpose
    printf "$eop_escape"
    cycle=$((cycle + 1))
done
exit 0
