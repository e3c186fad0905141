#!/bin/sh
# Benchmark exec-server against the reference `codex exec-server` 0.171.0 (BENCH_REF_VERSION=0.169.0
# for the older one).
#
#   scripts/bench.sh [bench flags...]          ours vs reference, full run (≈5–8 min on 2 cores)
#   scripts/bench.sh -rounds 1 -small          a quick look
#   scripts/bench.sh ours [bench flags...]     ours only (no reference download)
#   scripts/bench.sh profile METRICS [SECS]    CPU, heap, mutex profiles and a 3 s execution
#                                              trace of ours while the bench runs METRICS
#                                              (e.g. pipe,pty) over and over, into .cache/prof/
#
# EXEC_SERVER_BIN=path measures a prebuilt binary of ours instead of building the tree.
#
# The reference is fetched once with `npm pack` into .cache/ref/ (git-ignored; never commit
# it). Ours is built stripped and static, as shipped. Everything listens on loopback only.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.cache"
version=${BENCH_REF_VERSION:-0.171.0}
case $version in
0.169.0) refdir="$cache/ref" ;;
0.171.0) refdir="$cache/ref/v171" ;;
*) echo "bench.sh: BENCH_REF_VERSION must be 0.171.0 or 0.169.0" >&2; exit 2 ;;
esac
ref="$refdir/package/vendor/x86_64-unknown-linux-musl/bin/codex"
work=$(mktemp -d "${TMPDIR:-/tmp}/exec-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

fetch_reference() {
	[ -x "$ref" ] && return
	mkdir -p "$refdir"
	(cd "$refdir" && npm pack --silent "@openai/codex@$version-linux-x64" >/dev/null &&
		tar xzf "openai-codex-$version-linux-x64.tgz")
	[ -x "$ref" ] || { echo "bench.sh: $ref not found after npm pack" >&2; exit 1; }
}

build_bench() {
	(cd "$root/interop" && go build -o "$work/bench" ./cmd/bench)
}

# build_ours builds the shipped binary: static, stripped, no build paths. EXEC_SERVER_BIN
# names a prebuilt binary to measure instead.
build_ours() {
	if [ -n "${EXEC_SERVER_BIN:-}" ]; then
		cp "$EXEC_SERVER_BIN" "$work/exec-server"
		return
	fi
	(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/exec-server" .)
}

machine() {
	echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), kernel $(uname -r), $(go version | cut -d' ' -f3-)"
	free -h | sed 's/^/    /'
	echo
}

# profile builds ours with net/http/pprof on a loopback side port (in a copy of the sources;
# the repository is not touched), serves it, and takes a CPU profile while the bench runs.
profile() {
	metrics=$1
	secs=${2:-20}
	src="$work/src"
	mkdir -p "$src" "$cache/prof"
	cp "$root"/go.mod "$root"/go.sum "$src"/
	for f in "$root"/*.go; do
		case $f in *_test.go) ;; *) cp "$f" "$src"/ ;; esac
	done
	cat >"$src/zz_benchpprof.go" <<-'EOF'
	package main

	import (
		"net/http"
		_ "net/http/pprof"
		"os"
		"runtime"
	)

	func init() {
		if addr := os.Getenv("EXEC_SERVER_PPROF"); addr != "" {
			runtime.SetMutexProfileFraction(5)
			runtime.SetBlockProfileRate(100000)
			go http.ListenAndServe(addr, nil)
		}
	}
	EOF
	(cd "$src" && CGO_ENABLED=0 go build -o "$work/exec-server-prof" .)
	build_bench
	pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	EXEC_SERVER_PPROF=127.0.0.1:$pport "$work/exec-server-prof" --listen ws://127.0.0.1:0 >"$work/url" 2>"$work/log" &
	pid=$!
	while ! grep -q '^ws://' "$work/url" 2>/dev/null; do sleep 0.1; done
	url=$(head -1 "$work/url")
	stamp=$(date +%Y%m%d-%H%M%S)
	out="$cache/prof/$stamp-$(echo "$metrics" | tr ',' '-')"
	curl -s -o "$out.cpu.pprof" "http://127.0.0.1:$pport/debug/pprof/profile?seconds=$secs" &
	curlpid=$!
	"$work/bench" -a "$url" -name-a ours -metrics "$metrics" -rounds 1000000 -limits=false -quiet 0 -timeout "${secs}s" >/dev/null 2>&1 &
	benchpid=$!
	wait $curlpid
	curl -s -o "$out.heap.pprof" "http://127.0.0.1:$pport/debug/pprof/heap"
	curl -s -o "$out.allocs.pprof" "http://127.0.0.1:$pport/debug/pprof/allocs"
	curl -s -o "$out.mutex.pprof" "http://127.0.0.1:$pport/debug/pprof/mutex"
	curl -s -o "$out.trace" "http://127.0.0.1:$pport/debug/pprof/trace?seconds=3"
	kill $benchpid 2>/dev/null || true
	wait $benchpid 2>/dev/null || true
	kill $pid
	wait $pid 2>/dev/null || true
	cp "$work/exec-server-prof" "$out.bin"
	echo "profiles: $out.{cpu,heap,allocs,mutex}.pprof, execution trace $out.trace"
	echo "read with: go tool pprof -top $out.bin $out.cpu.pprof"
	go tool pprof -top -nodecount=30 "$out.bin" "$out.cpu.pprof" 2>/dev/null | head -40
}

case "${1:-}" in
profile)
	shift
	[ $# -ge 1 ] || { echo "usage: bench.sh profile METRICS [SECONDS]" >&2; exit 2; }
	profile "$@"
	;;
ours)
	shift
	build_ours
	build_bench
	machine
	echo "Command: scripts/bench.sh ours $*"
	echo
	"$work/bench" -a "$work/exec-server --listen ws://127.0.0.1:{PORT}" -name-a ours "$@"
	;;
*)
	fetch_reference
	build_ours
	build_bench
	machine
	echo "Command: scripts/bench.sh $*"
	echo
	# The reference makes its sandbox helper links only when its CODEX_HOME is not under a
	# temporary directory; without them its sandboxed PTYs fail.
	mkdir -p "$cache/codex-home"
	"$work/bench" \
		-a "$work/exec-server --listen ws://127.0.0.1:{PORT}" -name-a ours \
		-b "env CODEX_HOME=$cache/codex-home $ref exec-server --listen ws://127.0.0.1:{PORT}" -name-b reference \
		"$@"
	;;
esac
