#!/bin/sh
# Fuzz every parser for a fixed number of executions, coverage-guided, one target after the
# other, and print one line per target. Not run in CI (.ci/run keeps a short smoke); this is
# the long campaign behind SECURITY.md's fuzzing figures.
#
#   scripts/fuzz.sh                       every target, 10^7 executions each
#   scripts/fuzz.sh -n 1000000 FuzzDispatch
#   scripts/fuzz.sh -j 2                  two workers per target
#
# Coverage counters go into package main only. `go test -fuzz` would instrument every
# dependency too (net/http, crypto/tls, encoding/json, …), and its workers stayed near 7,000 to
# 9,000 executions a second here whatever the target. Counting our own edges is what guides
# the mutator through our parsers, and faster (FuzzParsePath: 30,000 execs/s against 8,700).
#
# The corpus is kept between runs in .cache/fuzz/corpus/TARGET (git-ignored), seeded from
# testdata/fuzz/TARGET. A failing input is written to testdata/fuzz/TARGET, as by go test.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
execs=10000000
workers=1
while [ $# -gt 0 ]; do
	case $1 in
	-n) execs=$2; shift 2 ;;
	-j) workers=$2; shift 2 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	-*) echo "fuzz.sh: unknown flag $1" >&2; exit 2 ;;
	*) break ;;
	esac
done

cd "$root"
cache=$root/.cache/fuzz
mkdir -p "$cache/corpus"
bin=$cache/exec-server-fuzz.test
go test -c -gcflags='exec-server=-d=libfuzzer' -o "$bin" .
targets=${*:-$("$bin" -test.list '^Fuzz' | grep '^Fuzz')}

failed=0
for t in $targets; do
	log=$cache/$t.log
	start=$(date +%s)
	status=PASS
	"$bin" -test.run '^$' -test.fuzz "^$t\$" -test.parallel "$workers" -test.fuzztime "${execs}x" \
		-test.fuzzminimizetime 100x -test.fuzzcachedir "$cache/corpus/$t" >"$log" 2>&1 || status=FAIL
	last=$(grep '^fuzz: elapsed' "$log" | tail -1 | sed 's/^fuzz: //')
	echo "$status $t $(($(date +%s) - start))s: $last"
	if [ $status = FAIL ]; then
		failed=1
		grep -v '^fuzz: elapsed' "$log" | tail -15 | sed 's/^/    /'
	fi
done
exit $failed
