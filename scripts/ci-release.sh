#!/bin/sh
# CI for getting exec-server onto a host (issue 12), run by .ci/run's "release and install"
# step; by hand: scripts/ci-release.sh (as root: it installs what it lacks with apt and uses
# network and mount namespaces). It checks, in order:
#   1. shellcheck on the scripts;
#   2. the release build (scripts/release.sh --dry-run, 4 targets), and its reproducibility:
#      linux/amd64 built again from a copy of the tree in another directory with an empty
#      Go build cache must have the same sums;
#   3. install.sh from a local HTTP server under dash and bash, with curl and with wget, with
#      sha256sum and with shasum, and the `curl | sh` line on a fresh HOME ending in a running
#      server;
#   4. what install.sh refuses, each in one line: a corrupted binary, a wrong checksum, a
#      missing release, no curl nor wget, no sha256sum nor shasum, an unknown arch,
#      unwritable directories;
#   5. a reinstall while the installed server runs;
#   6. --from DIR, and scp + run, in a network namespace with nothing but lo;
#   7. the folder vendored into another module, with its own go.mod and with the host's;
#   8. the service files (systemd-analyze verify, the sandbox under the unit's hardening) and
#      the Go tests of the air-gapped promise and the service files.
set -eu

[ "$(id -u)" = 0 ] || { echo "ci-release: run as root (apt, namespaces, a second user)" >&2; exit 1; }
umask 022
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
export PATH="/usr/local/go/bin:$PATH"
began=$(date +%s)
T=$(mktemp -d "${TMPDIR:-/tmp}/exec-ci-release.XXXXXX")
chmod 0755 "$T"
pids=
cleanup() {
	for p in $pids; do kill "$p" 2>/dev/null || true; done
	rm -rf "$T"
}
trap cleanup EXIT
trap 'exit 1' INT TERM
say() { printf '\n--- %s\n' "$*"; }
fail() {
	printf 'ci-release: FAIL: %s\n' "$*" >&2
	exit 1
}

# The tools these checks run, installed when missing.
missing=
for need in dash:dash bash:bash curl:curl wget:wget shasum:perl shellcheck:shellcheck ip:iproute2 unshare:util-linux setpriv:util-linux; do
	command -v "${need%%:*}" >/dev/null 2>&1 || missing="$missing ${need#*:}"
done
if [ -n "$missing" ]; then
	echo "installing:$missing"
	# shellcheck disable=SC2086 # one word per package
	(apt-get update -qq && apt-get install -y -qq $missing) >/dev/null 2>&1 || fail "cannot install$missing"
fi
goos=$(go env GOOS) goarch=$(go env GOARCH)
name=exec-server-$goos-$goarch

say "shellcheck"
shellcheck --version | sed -n 2p
shellcheck install.sh scripts/release.sh scripts/ci-release.sh
echo "clean: install.sh scripts/release.sh scripts/ci-release.sh"

# copy_tree DIR copies the tree as a checkout has it (tracked and untracked files, not ignored).
copy_tree() {
	mkdir -p "$1"
	if git rev-parse --git-dir >/dev/null 2>&1; then
		git ls-files -z -co --exclude-standard | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$1"
	else
		tar --exclude=./.git --exclude=./.cache --exclude=./dist -cf - . | tar -xf - -C "$1"
	fi
}

# The server of release artifacts, on loopback.
go build -o "$T/httpd" scripts/httpd.go
mkdir "$T/srv"
"$T/httpd" "$T/srv" >"$T/httpd.url" 2>"$T/httpd.log" &
pids="$pids $!"
i=0
until [ -s "$T/httpd.url" ]; do
	i=$((i + 1))
	[ "$i" -lt 100 ] || fail "httpd did not start"
	sleep 0.1
done
url=$(head -n 1 "$T/httpd.url")

say "release build (scripts/release.sh --dry-run, 4 targets) and reproducibility"
eval "$(scripts/release.sh --print-stamp)"
export VERSION COMMIT SOURCE_DATE_EPOCH
copy_tree "$T/copy"
# The second build: another directory, no .git, an empty build cache, side by side with the first.
(cd "$T/copy" && GOCACHE="$T/gocache" sh scripts/release.sh --dry-run --targets "$goos/$goarch" \
	--base-url "$url/good" --out "$T/repro") >"$T/repro.log" 2>&1 &
repro=$!
start=$(date +%s)
scripts/release.sh --dry-run --base-url "$url/good" --out "$T/srv/good"
wait "$repro" || {
	cat "$T/repro.log"
	fail "the second build failed"
}
echo "(the 4 targets and the rebuild took $(($(date +%s) - start)) s together)"
echo "build 1: $root, the usual build cache"
echo "build 2: $T/copy, no .git, GOCACHE empty"
for f in "$name" "$name.tar.gz" install.sh; do
	a=$(grep "  $f\$" "$T/srv/good/SHA256SUMS") || fail "no sum for $f"
	b=$(grep "  $f\$" "$T/repro/SHA256SUMS") || fail "no sum for $f in the rebuild"
	[ "$a" = "$b" ] || fail "not reproducible: $a vs $b"
	echo "identical: $a"
done

say "--version of the release binary"
line=$("$T/srv/good/$name" --version)
echo "$line"
case $line in
"exec-server $VERSION (commit $COMMIT, date "*", protocol of codex "*")") ;;
*) fail "--version does not name version $VERSION and commit $COMMIT" ;;
esac

# readyz BIN: starts BIN on a loopback port, checks GET /readyz, stops it.
readyz() {
	"$1" --listen ws://127.0.0.1:0 >"$T/listen" 2>/dev/null &
	srv=$!
	i=0
	until [ -s "$T/listen" ]; do
		i=$((i + 1))
		[ "$i" -lt 100 ] || fail "$1 did not print its URL"
		sleep 0.1
	done
	ws=$(head -n 1 "$T/listen")
	code=$(curl -s -o /dev/null -w '%{http_code}' "http://${ws#ws://}/readyz")
	kill "$srv"
	wait "$srv" || true
	rm -f "$T/listen"
	[ "$code" = 200 ] || fail "GET /readyz of $1: $code"
	echo "running: $ws, GET /readyz: $code"
}

# bindir DIR CMD...: DIR gets a link to every command on the usual PATH but CMD...
bindir() {
	d=$1
	shift
	mkdir -p "$d"
	for p in /usr/local/sbin/* /usr/local/bin/* /usr/sbin/* /usr/bin/* /sbin/* /bin/*; do
		b=${p##*/}
		for skip in "$@"; do [ "$b" = "$skip" ] && continue 2; done
		[ -e "$d/$b" ] || ln -s "$p" "$d/$b"
	done
}
bindir "$T/nocurl" curl
bindir "$T/nofetch" curl wget
bindir "$T/nosha256sum" sha256sum
bindir "$T/nosums" sha256sum shasum
mkdir "$T/fakeuname"
printf '#!/bin/sh\ncase "$*" in -m) echo sparc64 ;; *) exec %s "$@" ;; esac\n' "$(command -v uname)" >"$T/fakeuname/uname"
chmod 0755 "$T/fakeuname/uname"

say "install.sh from $url/good under dash and bash"
for sh in dash bash; do
	echo "$ $sh install.sh --base-url $url/good --dir $T/$sh"
	"$sh" install.sh --base-url "$url/good" --dir "$T/$sh"
	[ "$("$T/$sh/exec-server" --version)" = "$line" ] || fail "$sh: the installed binary is not the release's"
done
echo "$ EXEC_SERVER_BASE_URL=$url/good dash install.sh --dir $T/env   (wget only: no curl on PATH)"
EXEC_SERVER_BASE_URL="$url/good" PATH="$T/nocurl" dash install.sh --dir "$T/env"
[ "$("$T/env/exec-server" --version)" = "$line" ] || fail "wget: the installed binary is not the release's"
echo "$ bash install.sh --base-url $url/good --dir $T/shasum   (shasum -a 256: no sha256sum on PATH)"
PATH="$T/nosha256sum" bash install.sh --base-url "$url/good" --dir "$T/shasum"
[ "$("$T/shasum/exec-server" --version)" = "$line" ] || fail "shasum: the installed binary is not the release's"

say "one line, a fresh HOME: curl -fsSL $url/good/install.sh | sh"
mkdir "$T/home"
env -i HOME="$T/home" PATH=/usr/local/bin:/usr/bin:/bin sh -c "curl -fsSL $url/good/install.sh | sh"
readyz "$T/home/.local/bin/exec-server"

say "what install.sh refuses (one line each, nothing installed, nothing left behind)"
cp -R "$T/srv/good" "$T/srv/badbin"
printf 'X' | dd of="$T/srv/badbin/$name" bs=1 seek=4096 conv=notrunc 2>/dev/null
cp -R "$T/srv/good" "$T/srv/badsum"
sed "s/^[0-9a-f]*  $name\$/$(printf '%064d' 0)  $name/" "$T/srv/good/SHA256SUMS" >"$T/srv/badsum/SHA256SUMS"
mkdir "$T/afile-parent" && : >"$T/afile-parent/file"
mkdir "$T/rootonly"
mkdir "$T/scp-nosums" && cp "$T/srv/good/$name" "$T/scp-nosums/"
n=0
# refused NAME PATTERN DIR CMD...: CMD must fail with status 1 and one stderr line matching
# PATTERN, leaving DIR without exec-server or a temporary file.
refused() {
	what=$1 pattern=$2 dir=$3
	shift 3
	set +e
	"$@" >"$T/out" 2>"$T/err"
	status=$?
	set -e
	[ "$status" = 1 ] || fail "$what: exit status $status, want 1: $(cat "$T/err")"
	[ "$(wc -l <"$T/err" | tr -d ' ')" = 1 ] || fail "$what: want one line on stderr, got: $(cat "$T/err")"
	grep -q -- "$pattern" "$T/err" || fail "$what: stderr does not say '$pattern': $(cat "$T/err")"
	[ ! -e "$dir/exec-server" ] || fail "$what: $dir/exec-server was installed"
	for left in "$dir"/.exec-server*; do
		[ ! -e "$left" ] || fail "$what: temporary file $left left behind"
	done
	n=$((n + 1))
	printf '%-34s %s\n' "$what:" "$(cat "$T/err")"
}
for sh in dash bash; do
	echo "[$sh]"
	refused "corrupted binary" "checksum mismatch" "$T/r1-$sh" "$sh" install.sh --base-url "$url/badbin" --dir "$T/r1-$sh"
	refused "wrong checksum" "checksum mismatch" "$T/r2-$sh" "$sh" install.sh --base-url "$url/badsum" --dir "$T/r2-$sh"
	refused "no such release" "download failed" "$T/r3-$sh" "$sh" install.sh --base-url "$url/nothing" --dir "$T/r3-$sh"
	refused "no curl and no wget" "neither curl nor wget" "$T/r4-$sh" env PATH="$T/nofetch" "$sh" install.sh --base-url "$url/good" --dir "$T/r4-$sh"
	refused "no sha256sum and no shasum" "neither sha256sum nor shasum" "$T/r8-$sh" env PATH="$T/nosums" "$sh" install.sh --base-url "$url/good" --dir "$T/r8-$sh"
	refused "unknown arch" "unsupported architecture: sparc64" "$T/r5-$sh" env PATH="$T/fakeuname:$PATH" "$sh" install.sh --base-url "$url/good" --dir "$T/r5-$sh"
	refused "dir under a file" "cannot create" "$T/afile-parent/file/bin" "$sh" install.sh --base-url "$url/good" --dir "$T/afile-parent/file/bin"
	refused "dir not writable (as nobody)" "is not a writable directory" "$T/rootonly" setpriv --reuid=65534 --regid=65534 --clear-groups "$sh" "$T/srv/good/install.sh" --base-url "$url/good" --dir "$T/rootonly"
	refused "no download location" "no download location" "$T/r6-$sh" env -u EXEC_SERVER_BASE_URL "$sh" install.sh --dir "$T/r6-$sh"
	refused "--from without SHA256SUMS" "SHA256SUMS not found" "$T/r7-$sh" "$sh" install.sh --from "$T/scp-nosums" --dir "$T/r7-$sh"
done
echo "$n refusals as expected"

say "a reinstall while the installed server runs"
dash install.sh --base-url "$url/good" --dir "$T/busy" >/dev/null
"$T/busy/exec-server" --listen ws://127.0.0.1:0 >"$T/busy.url" 2>/dev/null &
busy=$!
pids="$pids $busy"
i=0
until [ -s "$T/busy.url" ]; do
	i=$((i + 1))
	[ "$i" -lt 100 ] || fail "the installed server did not start"
	sleep 0.1
done
before=$(stat -c %i "$T/busy/exec-server")
bash install.sh --base-url "$url/good" --dir "$T/busy"
after=$(stat -c %i "$T/busy/exec-server")
kill -0 "$busy" || fail "the running server died during the reinstall"
ws=$(head -n 1 "$T/busy.url")
code=$(curl -s -o /dev/null -w '%{http_code}' "http://${ws#ws://}/readyz")
[ "$code" = 200 ] || fail "the running server stopped answering: $code"
[ "$before" != "$after" ] || fail "the reinstall wrote into the running binary's file"
echo "the server kept running (GET /readyz: $code) on its old file (inode $before); the new one is inode $after"
kill "$busy"

say "no network: --from DIR and scp + run, in a network namespace with nothing but lo"
nonet=
if unshare -n true 2>/dev/null; then
	nonet="unshare -n"
elif unshare -rn true 2>/dev/null; then
	nonet="unshare -rn"
fi
if [ -z "$nonet" ]; then
	echo "SKIP: no network namespaces here (unshare -n and unshare -rn both fail)"
else
	mkdir "$T/scp"
	cp "$T/srv/good/$name" "$T/srv/good/SHA256SUMS" "$T/scp/" # what one would scp
	echo "interfaces inside: $($nonet sh -c 'tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d " " | tr "\n" " "')"
	if $nonet curl -fsS -m 5 "$url/good/SHA256SUMS" >/dev/null 2>"$T/err"; then fail "the namespace reached $url"; fi
	echo "curl $url from inside: $(cat "$T/err")"
	for sh in dash bash; do
		echo "$ $sh install.sh --from $T/scp --dir $T/from-$sh"
		$nonet "$sh" install.sh --from "$T/scp" --dir "$T/from-$sh"
		[ "$("$T/from-$sh/exec-server" --version)" = "$line" ] || fail "--from: the installed binary is not the release's"
	done
	echo "$ $T/scp/$name --listen ws://127.0.0.1:0   (lo up, nothing else)"
	# shellcheck disable=SC2016 # expanded by the inner sh
	$nonet sh -c '
		set -eu
		ip link set lo up
		"$1" --listen ws://127.0.0.1:0 >"$2/scp.url" 2>/dev/null &
		i=0
		until [ -s "$2/scp.url" ]; do i=$((i + 1)); [ "$i" -lt 100 ]; sleep 0.1; done
		ws=$(head -n 1 "$2/scp.url")
		code=$(curl -s -o /dev/null -w "%{http_code}" "http://${ws#ws://}/readyz")
		kill $!
		echo "running: $ws, GET /readyz: $code"
		[ "$code" = 200 ]' sh "$T/scp/$name" "$T" || fail "scp + run in the namespace"
fi

say "vendoring: third_party/exec-server/ in another module, GOPROXY=off"
go mod download
vendor_host() {
	mkdir -p "$1/third_party"
	copy_tree "$1/third_party/exec-server"
	printf 'module example.com/host\n\ngo 1.26.0\n' >"$1/go.mod"
	printf '// Package host stands for the module that vendors exec-server.\npackage host\n' >"$1/host.go"
}
vendor_host "$T/host-own"
(cd "$T/host-own/third_party/exec-server" && GOPROXY=off go build -o "$T/vendored-own" .)
echo "its own go.mod (cd third_party/exec-server && go build):  $("$T/vendored-own" --version)"
(cd "$T/host-own" && go work init . ./third_party/exec-server && GOPROXY=off go build -o "$T/vendored-work" exec-server)
echo "its own go.mod, a go.work at the host's root:              $("$T/vendored-work" --version)"
vendor_host "$T/host-deps"
rm "$T/host-deps/third_party/exec-server/go.mod" "$T/host-deps/third_party/exec-server/go.sum"
{
	echo
	sed -n '/^require (/,/^)/p' go.mod
} >>"$T/host-deps/go.mod"
cp go.sum "$T/host-deps/go.sum"
(cd "$T/host-deps" && GOPROXY=off go build -o "$T/vendored-deps" ./third_party/exec-server)
echo "the host's go.mod provides golang.org/x/{net,sys,crypto}: $("$T/vendored-deps" --version)"

say "service files"
if command -v systemd-analyze >/dev/null 2>&1; then
	mkdir "$T/unit"
	sed "s|/usr/local/bin/exec-server|$T/srv/good/$name|" contrib/exec-server.service >"$T/unit/exec-server.service"
	systemd-analyze verify "$T/unit/exec-server.service" >"$T/verify" 2>&1 || true
	if [ -s "$T/verify" ]; then
		cat "$T/verify"
		fail "systemd-analyze verify contrib/exec-server.service"
	fi
	echo "systemd-analyze verify contrib/exec-server.service: clean ($(systemd-analyze --version | head -n 1))"
	systemd-analyze security --offline=true "$T/unit/exec-server.service" 2>/dev/null | grep 'Overall exposure' || true
else
	echo "SKIP: systemd-analyze is not installed"
fi
if command -v plutil >/dev/null 2>&1; then plutil -lint contrib/exec-server.plist; fi

# The sandbox under the unit's hardening, as far as a mount namespace can play it: a dedicated
# user, ProtectSystem=strict (/ read-only, the workspace read-write), NoNewPrivileges=, an
# empty CapabilityBoundingSet=. It must keep the mechanism it has without them; with
# ProtectKernelTunables= (a mount over /proc/sys), which the unit leaves out, it would not.
mkdir "$T/workspace" && chown 65534:65534 "$T/workspace"
bin="$T/srv/good/$name"
as_service="setpriv --reuid=65534 --regid=65534 --clear-groups --no-new-privs --bounding-set=-all"
plain=$(cd "$T/workspace" && $as_service "$bin" sandbox --status | head -n 1)
# shellcheck disable=SC2016 # expanded by the inner sh
if unshare -m --propagation private sh -c 'mount --bind "$1" "$1" && mount -o remount,bind,ro /' sh "$T/workspace" 2>"$T/err"; then
	# shellcheck disable=SC2016 # expanded by the inner sh
	hardened=$(unshare -m --propagation private sh -c '
		mount --bind "$1" "$1" && mount -o remount,bind,ro / && cd "$1" &&
		$3 "$2" sandbox --status | head -n 1 &&
		$3 "$2" sandbox -- sh -c "echo ok > in && ! (echo x > /etc/exec-server-ci-probe) 2>/dev/null"' \
		sh "$T/workspace" "$bin" "$as_service") || fail "the sandbox under the unit's hardening"
	[ -s "$T/workspace/in" ] || fail "the sandboxed write to the workspace did not happen"
	echo "sandbox as the service user:              $plain"
	echo "... with the unit's hardening:            $hardened (the workspace written, /etc refused)"
	[ "$hardened" = "$plain" ] || fail "the unit's hardening changes the sandbox: $plain -> $hardened"
	# shellcheck disable=SC2016 # expanded by the inner sh
	tunables=$(unshare -m --propagation private sh -c 'mount --bind /proc/sys /proc/sys && mount -o remount,bind,ro /proc/sys &&
		cd "$1" && $3 "$2" sandbox --status | head -n 1' sh "$T/workspace" "$bin" "$as_service" 2>/dev/null || echo "(could not try)")
	echo "... with ProtectKernelTunables= (left out): $tunables"
else
	echo "SKIP: the hardening cannot be played here: $(cat "$T/err")"
fi

say "Go tests: the air-gapped session and the service files"
go test -count=1 -run '^(TestAirGappedSession|TestVersionLineNamesVersionCommitDateAndProtocol|TestSystemdUnitIsHardenedAndKeepsTheSandbox|TestLaunchdPlistKeepsTheCredentialOnStdin)$' -v . >"$T/gotest" 2>&1 ||
	{
		cat "$T/gotest"
		fail "go test"
	}
grep -E '^(--- |ok|PASS|FAIL)|interfaces \[|session:' "$T/gotest"

say "release and install: all checks passed in $(($(date +%s) - began)) s"
