#!/bin/sh
# Soak exec-server: the real binary under 1000 connections, 10,000 processes, 100 abrupt
# disconnect/resume cycles, a reply flood and kill -9 with grandchildren, measured from
# outside by interop/cmd/soak. Loopback only; one line per check, exit 1 if a figure is out
# of bounds.
#
#   scripts/soak.sh                 the full soak (about a minute on 2 cores)
#   scripts/soak.sh -small          every check scaled down (CI: well under a minute)
#   scripts/soak.sh -checks flood   some checks only; `soak -h` lists every flag
#
# EXEC_SERVER_BIN=path soaks a prebuilt binary instead of building the tree.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/exec-soak.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

if [ -n "${EXEC_SERVER_BIN:-}" ]; then
	cp "$EXEC_SERVER_BIN" "$work/exec-server"
else
	(cd "$root" && CGO_ENABLED=0 go build -o "$work/exec-server" .)
fi
(cd "$root/interop" && go build -o "$work/soak" ./cmd/soak)

# 1000 connections cost the driver a socket each and the server five descriptors each. Go
# raises a process's soft limit to the hard one by itself, so the hard limit is what must be
# high enough; raise the soft one too, for anything else, and say so if it cannot be.
want=8192
soft=$(ulimit -n)
hard=$(ulimit -Hn)
if [ "$soft" != unlimited ] && [ "$soft" -lt "$want" ]; then
	if [ "$hard" = unlimited ] || [ "$hard" -ge "$want" ]; then
		ulimit -n "$want"
	else
		ulimit -n "$hard"
		echo "soak.sh: ulimit -n is capped at $hard; the full conns check needs about $want" >&2
	fi
fi

"$work/soak" -bin "$work/exec-server" "$@"
