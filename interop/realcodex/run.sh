#!/usr/bin/env bash
# Interop of our exec-server with the real Codex harness (0.171 by default; 0.169 with
# REALCODEX_VERSION=0.169.0), locally and through a loopback registry + rendezvous. Not run in
# CI: it downloads the reference binary (once, into the git-ignored .cache/) with npm.
#
#   interop/realcodex/run.sh [realcodex flags]     e.g. -checks remote-ours -v, -s all
#
# Environment: EXEC_SERVER=path skips building ours; REALCODEX_WORKDIR=dir keeps logs there
# (default: a new directory under ~/.cache/realcodex, never /tmp: see README, -s);
# REALCODEX_VERSION=0.171.0 (default) or 0.169.0 picks the reference.
# Prints one PASS/FAIL/SKIP line per check; exit status 1 if any check failed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
version=${REALCODEX_VERSION:-0.171.0}
# Each version has its own directory under .cache/ref and its own pinned sha256 of the
# linux-x64 codex binary.
case $version in
0.171.0)
	cache=$repo/.cache/ref/v171
	want_sha=b76a027d6b210f9a8da7aaf321dd235c700f0ef7a794d4a5314b9af6c134f0f0
	;;
0.169.0)
	cache=$repo/.cache/ref
	want_sha=b452ca20f838a8855a88a41050ee4a694033fff4ea3ecdad5633e6e0e8d13f2b
	;;
*)
	echo "realcodex: REALCODEX_VERSION=$version is not pinned here (0.171.0 or 0.169.0)" >&2
	exit 2
	;;
esac
codex=$cache/package/vendor/x86_64-unknown-linux-musl/bin/codex

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
if [ "$sha" != "$want_sha" ]; then
	echo "FAIL realcodex: $codex has sha256 $sha, not the $version build pinned here ($want_sha)" >&2
	exit 1
fi

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
exec "$tmp/realcodex" -codex "$codex" -codex-version "$version" -ours "$ours" "${workdir[@]}" "$@"
