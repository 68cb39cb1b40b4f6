#!/usr/bin/env bash
# Build and test every worker SDK against the shared vectors (sdk/vectors/); any failure
# fails the script. Run from anywhere: bash sdk/test-all.sh
# The Python SDK is the reference: tests/sdk/test_vectors.py (in the pytest suite).
set -euo pipefail
cd "$(dirname "$0")"

step() { echo "== sdk: $*" >&2; }

step "node: npm ci (sql.js, the SqlSink tests' SQLite), node --test"
(cd node && npm ci --no-audit --no-fund --silent && node --test test/)

step "go: vet, test, build the examples into go/bin"
(cd go && go vet ./... && go test ./... && go test -tags purego ./... && go build -o bin/ ./examples/...)

step "go: the SQLSink example's own module (a real SQLite database through a pure-Go driver)"
(cd go/examples/sqlsink && go vet ./... && go test ./... && go build -o ../../bin/ .)

step "rust: cargo test, the examples built in release mode"
(cd rust && cargo test --quiet && cargo build --release --examples --quiet)

step "rust: SqlSink's tests on a real SQLite database (a crate of its own: rusqlite compiles SQLite's C source)"
(cd rust/sqlsink && cargo test --quiet)

step "java: mvn test (JUnit 5 reads the vectors), the classes the examples run from"
(cd java && mvn -q -B test)

# Further SDKs add their build-and-test lines here.
