#!/usr/bin/env bash
# Build and test every worker SDK; each reads the shared protocol vectors (sdk/vectors).
# Any failure fails the script (and CI, which runs it from .ci/run).
set -euo pipefail
cd "$(dirname "$0")"

# node/go added by sdk1

echo "== sdk/rust: cargo test, release examples"
(cd rust && cargo test --quiet && cargo build --release --examples --quiet)

echo "== sdk/java: mvn test (JUnit 5 reads the vectors), classes for the examples"
(cd java && mvn -q -B test)
