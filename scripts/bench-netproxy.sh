#!/bin/sh
# Benchmark the managed network proxy (docs/network.md §5) against the reference
# `codex exec-server` 0.171.0, each proxy as a client gets it: started by process/start of a
# running server, for a child that prints its HTTP_PROXY and sleeps. BENCHMARKS.md, section
# "Managed network proxy", holds the figures and says how they are taken.
#
#   scripts/bench-netproxy.sh [bench netproxy flags...]   ours vs reference (-rounds 7 by default)
#   scripts/bench-netproxy.sh ours [flags...]              ours only
#   scripts/bench-netproxy.sh profile BENCH [SECS]         CPU profile of our server while
#                                                          BenchmarkNetProxyBENCH (HTTP, CONNECT
#                                                          or ConnectLatency) runs through its
#                                                          proxy, into .cache/prof/
#
# It builds ours stripped and static from the tree (EXEC_SERVER_BIN=path measures a prebuilt
# binary), the root package's test binary (which holds the benchmarks) and interop/cmd/bench,
# which launches the servers, starts the proxied processes, runs the test binary round by
# round with the servers alternating, and prints the table of ratios. The reference is
# .cache/ref/v171 (scripts/bench.sh fetches it); its CODEX_HOME is a fresh directory under
# .cache, not under /tmp (the reference wants that). Everything is removed at the end.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cache="$root/.cache"
ref="$cache/ref/v171/package/vendor/x86_64-unknown-linux-musl/bin/codex"
work=$(mktemp -d "${TMPDIR:-/tmp}/exec-bench-netproxy.XXXXXX")
home=""
holdpid=""
cleanup() {
	if [ -n "$holdpid" ]; then
		kill "$holdpid" 2>/dev/null || true
		wait "$holdpid" 2>/dev/null || true
	fi
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

machine() {
	echo "Machine: $(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), kernel $(uname -r), $(go version | cut -d' ' -f3-)"
	echo "Load at the start: $(uptime | sed 's/.*load average/load average/')"
	echo
}

# profile builds ours with net/http/pprof on a loopback side port (in a copy of the sources;
# the repository is not touched), holds it with its proxied process, and takes a CPU profile
# while the test binary downloads through that proxy over and over.
profile() {
	bench=$1
	secs=${2:-15}
	case $bench in
	HTTP | CONNECT) benchtime=1000x ;;
	ConnectLatency) benchtime=1000000x ;;
	*) echo "bench-netproxy.sh: profile HTTP|CONNECT|ConnectLatency [SECS]" >&2; exit 2 ;;
	esac
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
	)

	func init() {
		if addr := os.Getenv("EXEC_SERVER_PPROF"); addr != "" {
			go http.ListenAndServe(addr, nil)
		}
	}
	EOF
	(cd "$src" && CGO_ENABLED=0 go build -o "$work/exec-server-prof" .)
	(cd "$root" && go test -c -o "$work/exec-server.test" .)
	(cd "$root/interop" && go build -o "$work/bench" ./cmd/bench)
	pport=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	"$work/bench" netproxy -hold -a "env EXEC_SERVER_PPROF=127.0.0.1:$pport $work/exec-server-prof --listen ws://127.0.0.1:{PORT}" >"$work/hold" 2>"$work/hold.err" &
	holdpid=$!
	while ! [ -s "$work/hold" ]; do
		kill -0 "$holdpid" 2>/dev/null || { cat "$work/hold.err" >&2; exit 1; }
		sleep 0.1
	done
	proxy=$(awk '{print $2; exit}' "$work/hold")
	out="$cache/prof/$(date +%Y%m%d-%H%M%S)-netproxy-$bench"
	curl -s -o "$out.cpu.pprof" "http://127.0.0.1:$pport/debug/pprof/profile?seconds=$secs" &
	curlpid=$!
	(cd "$work" && EXEC_SERVER_PROXY_UNDER_TEST=$proxy timeout "$((secs + 2))" ./exec-server.test \
		-test.run '^$' -test.bench "^BenchmarkNetProxy$bench\$/^ours\$" -test.benchtime "$benchtime" >/dev/null 2>&1) || true
	wait $curlpid
	curl -s -o "$out.allocs.pprof" "http://127.0.0.1:$pport/debug/pprof/allocs"
	cp "$work/exec-server-prof" "$out.bin"
	echo "profiles: $out.{cpu,allocs}.pprof; read with: go tool pprof -top $out.bin $out.cpu.pprof"
	go tool pprof -top -nodecount=35 "$out.bin" "$out.cpu.pprof" 2>/dev/null | head -45
}

case "${1:-}" in
profile)
	shift
	[ $# -ge 1 ] || { echo "usage: bench-netproxy.sh profile HTTP|CONNECT|ConnectLatency [SECS]" >&2; exit 2; }
	profile "$@"
	;;
ours)
	shift
	build
	machine
	echo "Command: scripts/bench-netproxy.sh ours $*"
	echo
	"$work/bench" netproxy -test "$work/exec-server.test" -a "$work/exec-server --listen ws://127.0.0.1:{PORT}" -name-a ours "$@"
	;;
*)
	[ -x "$ref" ] || { echo "bench-netproxy.sh: $ref missing (scripts/bench.sh fetches it)" >&2; exit 1; }
	build
	home=$(mktemp -d "$cache/codex-home-netproxy.XXXXXX")
	machine
	echo "Command: scripts/bench-netproxy.sh $*"
	echo
	"$work/bench" netproxy -test "$work/exec-server.test" \
		-a "$work/exec-server --listen ws://127.0.0.1:{PORT}" -name-a ours \
		-b "env CODEX_HOME=$home $ref exec-server --listen ws://127.0.0.1:{PORT}" -name-b reference \
		"$@"
	;;
esac
