#!/bin/sh
# upper.sh - an etlstage T-worker in POSIX sh + awk: uppercases every message (ASCII a-z).
#
# Modes: SINGLE ONLY.  Batch modes need to react to EOB, and EOB is not followed by
# EOM: awk only hands over a record once it sees the record separator (or EOF), so it
# would wait forever for the byte after EOB while the supervisor waits for EOP.  Write
# batch workers in a language that reads raw bytes (upper.c, upper.js, upper.py), or
# see upper_bytes.sh for the shell workaround (od turns every byte into a line).
#
# Markers come from ETLSTAGE_EOM/_EOP/_EOB/_BNC (two hex digits).  Printable markers
# such as EOP='#' (23) work.  Limits of awk, checked at start:
#  - EOM must be 0a (newline) with mawk, Debian's default awk: mawk reads a pipe in big
#    blocks unless run with -W interactive, and then its records are lines.  With gawk
#    or busybox awk any EOM except 00 works (it becomes awk's RS).
#  - awk strings cannot hold NUL in every awk, so the default EOP 0x00 is written with
#    printf "%c", 0 (the awk twin of the shell's printf '\000'), never inside a string;
#    messages containing NUL bytes are not supported.
# stdout carries protocol bytes only; errors go to stderr.  fflush() after every EOP:
# awk buffers stdout on a pipe, and an EOP stuck in a buffer deadlocks the pipeline.
set -eu

fail() { echo "upper.sh: $*" >&2; exit 2; }

# marker NAME DEFAULT -> decimal byte value
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
[ "${ETLSTAGE_MODE:-single}" = single ] ||
    fail "ETLSTAGE_MODE=${ETLSTAGE_MODE}: this worker supports single mode only (see the top of $0)"
[ "$eom" -ne 0 ] || fail "ETLSTAGE_EOM=00 is not supported: awk cannot use NUL as a record separator"

if awk -W version 2>/dev/null | grep -q mawk; then
    [ "$eom" -eq 10 ] || fail "ETLSTAGE_EOM=${ETLSTAGE_EOM}: with mawk the EOM must be 0a; install gawk for other EOMs"
    set -- -W interactive
else
    set --
fi

# LC_ALL=C: toupper() on bytes, ASCII only, whatever the user's locale.
LC_ALL=C exec awk "$@" -v eom="$eom" -v eop="$eop" -v eob="$eob" -v bnc="$bnc" '
BEGIN { RS = sprintf("%c", eom); EOM = RS; EOB = sprintf("%c", eob); BNC = sprintf("%c", bnc) }
index($0, EOB) || index($0, BNC) {
    printf "upper.sh: protocol error: EOB or BNC on stdin in single mode\n" > "/dev/stderr"
    exit 3
}
{
    printf "%s%s", toupper($0), EOM   # the result(s): zero or more, each ended by EOM
    printf "%c", eop                  # then EOP ends the reply
    fflush()
}'
