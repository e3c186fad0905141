#!/usr/bin/env bash
# Interop of our exec-server with the real Codex 0.169 harness, locally and through a loopback
# registry + rendezvous. Not run in CI: it downloads the reference binary (once, into the
# git-ignored .cache/) with npm.
#
#   interop/realcodex/run.sh [realcodex flags]     e.g. -checks remote-ours -v, -s all
#
# Environment: EXEC_SERVER=path skips building ours; REALCODEX_WORKDIR=dir keeps logs there
# (default: a new directory under ~/.cache/realcodex, never /tmp: see README, -s).
# Prints one PASS/FAIL/SKIP line per check; exit status 1 if any check failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=0.169.0
cache=$repo/.cache/ref
codex=$cache/package/vendor/x86_64-unknown-linux-musl/bin/codex
want_sha_head=b452ca20f838a885 # sha256 b452ca20…8d13f2b of the linux-x64 codex binary
want_sha_tail=8d13f2b

if [ "$(uname -s)/$(uname -m)" != "Linux/x86_64" ]; then
	echo "SKIP realcodex: the reference binary is linux-x64 only" >&2
	exit 0
fi

if [ ! -x "$codex" ]; then
	echo "realcodex: fetching @openai/codex@$version-linux-x64 into $cache" >&2
	mkdir -p "$cache"
	(cd "$cache" && npm pack --silent "@openai/codex@$version-linux-x64" >/dev/null &&
		tar xzf "openai-codex-$version-linux-x64.tgz")
fi
sha=$(sha256sum "$codex" | cut -d' ' -f1)
case $sha in
"$want_sha_head"*"$want_sha_tail") ;;
*)
	echo "FAIL realcodex: $codex has sha256 $sha, not the 0.169.0 build the spec describes" >&2
	exit 1
	;;
esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/realcodex.XXXXXX")
ours=${EXEC_SERVER:-}
if [ -z "$ours" ]; then
	ours=$tmp/exec-server
	(cd "$repo" && CGO_ENABLED=0 go build -o "$ours" .)
fi
(cd "$repo/interop" && go build -o "$tmp/realcodex" ./realcodex)

workdir=()
if [ -n "${REALCODEX_WORKDIR:-}" ]; then
	workdir=(-workdir "$REALCODEX_WORKDIR")
fi
exec "$tmp/realcodex" -codex "$codex" -ours "$ours" "${workdir[@]}" "$@"
