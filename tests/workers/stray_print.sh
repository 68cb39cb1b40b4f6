#!/bin/sh
# DELIBERATELY BROKEN T-worker (for conformance-checker tests): it echoes a stray
# diagnostic line to stdout at start-up - stdout is the protocol, diagnostics belong on
# stderr.  Otherwise a correct single-mode worker with the default markers (it passes
# each message through unchanged): 'a\n' -> 'a\n\0'.
echo "starting up, hello from stray_print.sh"
if awk -W version 2>/dev/null | grep -q mawk; then set -- -W interactive; else set --; fi
exec awk "$@" '{ printf "%s\n%c", $0, 0; fflush() }'
