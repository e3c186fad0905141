#!/bin/sh
# Installs the exec-server binary for this OS and arch, verified against the release's
# SHA256SUMS, into ~/.local/bin (or --dir DIR) without root:
#
#   curl -fsSL BASE_URL/install.sh | sh -s -- [--base-url BASE_URL] [--dir DIR]
#   sh install.sh --from DIR_WITH_THE_FILES [--dir DIR]      (no network: files copied by scp)
#
# BASE_URL serves exec-server-OS-ARCH and SHA256SUMS (a release's download URL); it is
# --base-url, else $EXEC_SERVER_BASE_URL, else default_base_url below (set in the copy of this
# file that a release publishes). --from DIR reads the same two files from a directory.
# The new binary is written beside the old one and renamed over it, so a running server keeps
# its file. Every error is one line on stderr and exit status 1. POSIX sh (dash, bash, ash).
set -eu

# Where a published release is downloaded from, e.g.
# https://github.com/OWNER/exec-server/releases/latest/download; empty in the source tree.
default_base_url=''

die() {
	printf 'install.sh: %s\n' "$*" >&2
	exit 1
}

usage() {
	cat <<'EOF'
usage: install.sh [--base-url URL | --from DIR] [--dir DIR]

Installs exec-server for this OS and arch into DIR (default ~/.local/bin), verified
against SHA256SUMS. URL (or $EXEC_SERVER_BASE_URL) serves exec-server-OS-ARCH and
SHA256SUMS, as a release's download URL does; --from DIR reads the same two files
from a directory (no network).
EOF
}

# detect_target sets os and arch to the release's names for this machine.
detect_target() {
	os=$(uname -s 2>/dev/null) || die "cannot run uname"
	case $os in
	Linux) os=linux ;;
	Darwin) os=darwin ;;
	*) die "unsupported OS: $os (releases exist for Linux and macOS)" ;;
	esac
	arch=$(uname -m 2>/dev/null) || die "cannot run uname"
	case $arch in
	x86_64 | amd64) arch=amd64 ;;
	aarch64 | arm64) arch=arm64 ;;
	*) die "unsupported architecture: $arch (releases exist for amd64 and arm64)" ;;
	esac
	# A shell under Rosetta says x86_64 on an arm64 Mac: install the native binary.
	if [ "$os/$arch" = darwin/amd64 ] && [ "$(sysctl -n sysctl.proc_translated 2>/dev/null || true)" = 1 ]; then
		arch=arm64
	fi
}

# fetch URL FILE downloads URL to FILE with curl or wget.
fetch() {
	if command -v curl >/dev/null 2>&1; then
		curl -fsL --retry 2 -o "$2" "$1" 2>/dev/null || die "download failed: $1 (curl exit $?)"
	elif command -v wget >/dev/null 2>&1; then
		wget -q -O "$2" "$1" 2>/dev/null || die "download failed: $1 (wget exit $?)"
	else
		die "neither curl nor wget is installed: install one, or copy the files over and use --from DIR"
	fi
}

# pick_sha256 sets sha256 to the command that prints a file's SHA-256 first on its line.
pick_sha256() {
	if command -v sha256sum >/dev/null 2>&1; then
		sha256=sha256sum
	elif command -v shasum >/dev/null 2>&1; then
		sha256="shasum -a 256"
	else
		die "neither sha256sum nor shasum is installed: cannot verify the download"
	fi
}

main() {
	base_url=${EXEC_SERVER_BASE_URL:-$default_base_url}
	from=
	dir=
	while [ $# -gt 0 ]; do
		case $1 in
		--base-url) [ $# -ge 2 ] || die "--base-url needs a URL"; base_url=$2; shift ;;
		--base-url=*) base_url=${1#*=} ;;
		--from) [ $# -ge 2 ] || die "--from needs a directory"; from=$2; shift ;;
		--from=*) from=${1#*=} ;;
		--dir) [ $# -ge 2 ] || die "--dir needs a directory"; dir=$2; shift ;;
		--dir=*) dir=${1#*=} ;;
		-h | --help) usage; exit 0 ;;
		*) die "unknown argument: $1 (see --help)" ;;
		esac
		shift
	done
	if [ -z "$dir" ]; then
		[ -n "${HOME:-}" ] || die "HOME is not set: pass --dir DIR"
		dir=$HOME/.local/bin
	fi
	if [ -z "$from" ] && [ -z "$base_url" ]; then
		die "no download location: pass --base-url URL or set EXEC_SERVER_BASE_URL (no default until releases are published), or use --from DIR"
	fi
	detect_target
	name=exec-server-$os-$arch
	pick_sha256

	mkdir -p "$dir" 2>/dev/null || die "cannot create $dir"
	if ! [ -d "$dir" ] || ! [ -w "$dir" ]; then die "$dir is not a writable directory"; fi
	[ ! -d "$dir/exec-server" ] || die "$dir/exec-server is a directory"
	dir=$(cd "$dir" && pwd) || die "cannot enter $dir"
	# Both files land beside the target, so the final rename stays on one file system.
	new=$(mktemp "$dir/.exec-server.XXXXXX" 2>/dev/null) || die "cannot write to $dir"
	sums=$(mktemp "$dir/.exec-server-sums.XXXXXX" 2>/dev/null) || { rm -f "$new"; die "cannot write to $dir"; }
	trap 'rm -f "$new" "$sums"' EXIT
	trap 'exit 1' INT TERM HUP

	if [ -n "$from" ]; then
		[ -f "$from/$name" ] || die "$from/$name not found (copy it and SHA256SUMS from the release)"
		[ -f "$from/SHA256SUMS" ] || die "$from/SHA256SUMS not found (copy it with $name)"
		cp "$from/$name" "$new" 2>/dev/null || die "cannot write to $dir"
		cp "$from/SHA256SUMS" "$sums" 2>/dev/null || die "cannot write to $dir"
		source=$from
	else
		base_url=${base_url%/}
		fetch "$base_url/SHA256SUMS" "$sums"
		fetch "$base_url/$name" "$new"
		source=$base_url
	fi

	want=$(awk -v n="$name" '$2 == n || $2 == "*" n { print $1; exit }' "$sums")
	[ -n "$want" ] || die "SHA256SUMS from $source has no entry for $name"
	# shellcheck disable=SC2086 # "shasum -a 256" is three words
	got=$($sha256 "$new") || die "$sha256 failed on $new"
	got=${got%% *}
	[ "$got" = "$want" ] || die "checksum mismatch for $name from $source: want $want, got $got; nothing installed"

	chmod 0755 "$new" || die "cannot chmod $new"
	installed=$("$new" --version 2>/dev/null) || die "the verified $name does not run here (a noexec mount at $dir?)"
	mv -f "$new" "$dir/exec-server" 2>/dev/null || die "cannot rename into $dir/exec-server"
	rm -f "$sums"
	trap - EXIT

	echo "installed $installed"
	echo "  at $dir/exec-server"
	case :${PATH:-}: in
	*:"$dir":*) run=exec-server ;;
	*)
		run=$dir/exec-server
		echo "$dir is not on PATH; add it with:  export PATH=\"$dir:\$PATH\""
		;;
	esac
	echo "next: $run --listen ws://127.0.0.1:8765   (README: Install, Running as a service)"
}

# The whole script is read before anything runs, so a truncated download does nothing.
main "$@"
