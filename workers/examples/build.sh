#!/bin/sh
# Build the compiled example workers: workers/examples/build.sh [OUT_DIR]
# OUT_DIR defaults to this folder.  CI calls this; so do the tests (into a temp dir).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here}
mkdir -p "$out"
for name in upper append; do
    ${CC:-cc} -O2 -Wall -Wextra -o "$out/$name" "$here/$name.c"
    echo "built $out/$name" >&2
done
