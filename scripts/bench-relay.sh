#!/bin/sh
# Benchmark `exec-server relay` (docs/remote.md §12): ours and the reference `codex
# exec-server` 0.171.0 behind the same relay, each also reached directly on its websocket, in
# one run; and the relay's own cost (forwarding rate, CPU per GB, echo round trip, memory with
# 1,000 streams open). BENCHMARKS.md, section "Self-hosted relay", holds the figures.
#
#   scripts/bench-relay.sh [bench relay flags...]   ours and the reference (-rounds 5 by default)
#   scripts/bench-relay.sh ours [flags...]          ours only
#   scripts/bench-relay.sh profile [SECS]           CPU profile of the relay while it forwards
#                                                   raw frames (BenchmarkRelaydForward), into
#                                                   .cache/prof/
#
# It builds ours stripped and static from the tree (EXEC_SERVER_BIN=path measures a prebuilt
# binary), the root package's test binary (which holds BenchmarkRelayd*, the harness side)
# and interop/cmd/bench, which starts the relay and the executors and prints the table. The
# reference is .cache/ref/v171 (scripts/bench.sh fetches it); its CODEX_HOMEs go in a fresh
# directory under RELAY_BENCH_HOME (default .cache; the reference wants one not under /tmp).
# Everything is removed at the end.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.cache"
ref="$cache/ref/v171/package/vendor/x86_64-unknown-linux-musl/bin/codex"
work=$(mktemp -d "${TMPDIR:-/tmp}/exec-bench-relay.XXXXXX")
home=""
cleanup() {
	rm -rf "$work"
	[ -z "$home" ] || rm -rf "$home"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

build() {
	if [ -n "${EXEC_SERVER_BIN:-}" ]; then
		cp "$EXEC_SERVER_BIN" "$work/exec-server"
	else
		(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags='-s -w' -o "$work/exec-server" .)
	fi
	(cd "$root" && go test -c -o "$work/exec-server.test" .)
	(cd "$root/interop" && go build -o "$work/bench" ./cmd/bench)
}

# profile builds ours with net/http/pprof on a loopback side port (in a copy of the sources;
# the repository is not touched), runs it as a relay, and takes a CPU profile while the test
# binary forwards raw frames through it.
profile() {
	secs=${1:-10}
	src="$work/src"
	mkdir -p "$src" "$cache/prof" "$work/cfg"
	cp "$root"/go.mod "$root"/go.sum "$src"/
	for f in "$root"/*.go; do
		case $f in *_test.go) ;; *) cp "$f" "$src"/ ;; esac
	done
	cat >"$src/zz_benchpprof.go" <<-'GO'
	package main

	import (
		"net/http"
		_ "net/http/pprof"
		"os"
	)

	func init() {
		if addr := os.Getenv("EXEC_SERVER_PPROF"); addr != "" {
			go http.ListenAndServe(addr, nil)
		}
	}
	GO
	(cd "$src" && CGO_ENABLED=0 go build -o "$work/exec-server-prof" .)
	(cd "$root" && go test -c -o "$work/exec-server.test" .)
	(umask 077
	 echo bench-register-token-0123456789 >"$work/cfg/register.token"
	 echo bench-connect-token-0123456789 >"$work/cfg/connect.token"
	 echo '{"tokens":[{"name":"e","file":"register.token","register":["*"]},{"name":"h","file":"connect.token","connect":["*"]}]}' >"$work/cfg/relay.json")
	pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	EXEC_SERVER_PPROF=127.0.0.1:$pport "$work/exec-server-prof" relay --config "$work/cfg/relay.json" --listen 127.0.0.1:0 >"$work/relay.url" 2>"$work/relay.err" &
	relaypid=$!
	while ! [ -s "$work/relay.url" ]; do
		kill -0 "$relaypid" 2>/dev/null || { cat "$work/relay.err" >&2; exit 1; }
		sleep 0.1
	done
	out="$cache/prof/$(date +%Y%m%d-%H%M%S)-relay-forward"
	curl -s -o "$out.cpu.pprof" "http://127.0.0.1:$pport/debug/pprof/profile?seconds=$secs" &
	curlpid=$!
	(cd "$work" && EXEC_SERVER_BENCH_RELAY=$(cat "$work/relay.url") EXEC_SERVER_BENCH_REGISTER_TOKEN=bench-register-token-0123456789 \
		EXEC_SERVER_BENCH_CONNECT_TOKEN=bench-connect-token-0123456789 timeout "$((secs + 5))" ./exec-server.test \
		-test.run '^$' -test.bench '^BenchmarkRelaydForward$' -test.benchtime 1000000x >/dev/null 2>&1) || true
	wait $curlpid
	kill "$relaypid"
	wait "$relaypid" 2>/dev/null || true
	cp "$work/exec-server-prof" "$out.bin"
	echo "profile: $out.cpu.pprof; read with: go tool pprof -top $out.bin $out.cpu.pprof"
	go tool pprof -top -nodecount=35 "$out.bin" "$out.cpu.pprof" 2>/dev/null | head -45
}

case "${1:-}" in
profile)
	shift
	profile "$@"
	;;
ours)
	shift
	build
	echo "Command: scripts/bench-relay.sh ours $*"
	echo
	"$work/bench" relay -test "$work/exec-server.test" -exec "$work/exec-server" "$@"
	;;
*)
	[ -x "$ref" ] || { echo "bench-relay.sh: $ref missing (scripts/bench.sh fetches it)" >&2; exit 1; }
	build
	home=$(mktemp -d "${RELAY_BENCH_HOME:-$cache}/codex-home-relay.XXXXXX")
	echo "Command: scripts/bench-relay.sh $*"
	echo
	"$work/bench" relay -test "$work/exec-server.test" -exec "$work/exec-server" -ref "$ref" -home "$home" "$@"
	;;
esac
