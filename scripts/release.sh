#!/bin/sh
# Release build (issue 12): static, stripped, reproducible exec-server binaries for linux and
# darwin on amd64 and arm64, a tarball per target (the binary, LICENSE, README.md), install.sh
# and SHA256SUMS, in one flat directory laid out as a release's download URL serves it.
#
#   scripts/release.sh [--dry-run] [--out DIR] [--targets "linux/amd64 ..."] [--base-url URL]
#   scripts/release.sh --print-stamp
#
# The stamp comes from git: the version is the v* tag on HEAD without its v (else main.go's),
# the commit is HEAD (with "-dirty" when the tree has changes), the date is HEAD's commit time
# in UTC; VERSION, COMMIT and SOURCE_DATE_EPOCH override them (a copy without .git). Nothing
# in the output depends on the clock, the directory or the user, so two builds of one commit
# with one Go version are byte-identical; --print-stamp prints the stamp for such a rebuild.
#
# A release (no --dry-run) needs a clean tree and a v* tag on HEAD; --dry-run, what CI runs,
# needs neither. DIR defaults to dist/. --base-url URL becomes the default download location
# of DIR's copy of install.sh (where the release's files will be served). Nothing is uploaded:
# publishing is copying DIR's files to the release.
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

dry=0
out=dist
targets="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64"
base_url=
print_stamp=0
die() { printf 'release.sh: %s\n' "$*" >&2; exit 1; }
while [ $# -gt 0 ]; do
	case $1 in
	--dry-run) dry=1 ;;
	--out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift ;;
	--targets) [ $# -ge 2 ] || die "--targets needs a list"; targets=$2; shift ;;
	--base-url) [ $# -ge 2 ] || die "--base-url needs a URL"; base_url=$2; shift ;;
	--print-stamp) print_stamp=1 ;;
	-h | --help) sed -n '2,19s/^# \{0,1\}//p' "$0"; exit 0 ;;
	*) die "unknown argument: $1" ;;
	esac
	shift
done

# The stamp.
in_git=0
git rev-parse --git-dir >/dev/null 2>&1 && in_git=1
dirty=0
if [ "$in_git" = 1 ] && [ -n "$(git status --porcelain --untracked-files=normal)" ]; then dirty=1; fi
tag=
if [ "$in_git" = 1 ]; then tag=$(git describe --tags --exact-match --match 'v[0-9]*' HEAD 2>/dev/null || true); fi
if [ -z "${VERSION:-}" ]; then
	if [ -n "$tag" ]; then
		VERSION=${tag#v}
	else
		VERSION=$(sed -n 's/^	version = "\(.*\)"$/\1/p' main.go)
		[ -n "$VERSION" ] || die "no version: main.go has no 'version = \"...\"' line"
	fi
fi
if [ -z "${COMMIT:-}" ]; then
	COMMIT=unknown
	if [ "$in_git" = 1 ]; then
		COMMIT=$(git rev-parse HEAD)
		[ "$dirty" = 0 ] || COMMIT="$COMMIT-dirty"
	fi
fi
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=0
	if [ "$in_git" = 1 ]; then SOURCE_DATE_EPOCH=$(git log -1 --format=%ct HEAD); fi
fi
case $SOURCE_DATE_EPOCH in '' | *[!0-9]*) die "SOURCE_DATE_EPOCH must be seconds since 1970, not $SOURCE_DATE_EPOCH" ;; esac
date=unknown
if [ "$SOURCE_DATE_EPOCH" != 0 ]; then
	date=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ 2>/dev/null ||
		date -u -r "$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
fi
if [ "$print_stamp" = 1 ]; then
	printf "VERSION='%s'\nCOMMIT='%s'\nSOURCE_DATE_EPOCH='%s'\n" "$VERSION" "$COMMIT" "$SOURCE_DATE_EPOCH"
	exit 0
fi
if [ "$dry" = 0 ]; then
	[ "$dirty" = 0 ] || die "the tree has changes: commit them, or use --dry-run"
	[ -n "$tag" ] || die "HEAD has no v* tag: tag the release (git tag vX.Y.Z), or use --dry-run"
fi

# The tools.
go=${GO:-go}
tar=tar
command -v gtar >/dev/null 2>&1 && tar=gtar
"$tar" --version 2>/dev/null | grep -q 'GNU tar' || die "needs GNU tar (gtar) for reproducible tarballs"
if command -v sha256sum >/dev/null 2>&1; then
	sha256() { sha256sum "$@"; }
elif command -v shasum >/dev/null 2>&1; then
	sha256() { shasum -a 256 "$@"; }
else
	die "needs sha256sum or shasum"
fi
# The toolchain is the one on PATH (never a download), with the baseline of each arch.
export GOTOOLCHAIN=local CGO_ENABLED=0 GOAMD64=v1 GOARM64=v8.0 GOEXPERIMENT=
goversion=$("$go" version) || die "no Go toolchain ($go)"

mkdir -p "$out"
out=$(cd "$out" && pwd)
for t in $targets; do rm -f "$out/exec-server-${t%/*}-${t#*/}" "$out/exec-server-${t%/*}-${t#*/}.tar.gz"; done
rm -f "$out/SHA256SUMS" "$out/install.sh"
work=$(mktemp -d "${TMPDIR:-/tmp}/exec-release.XXXXXX")
trap 'rm -rf "$work"' EXIT INT TERM

echo "exec-server $VERSION, commit $COMMIT, date $date; $goversion"
[ "$dry" = 0 ] || echo "dry run: not for publishing"

# The binaries, built side by side (each build is mostly one core's work).
ldflags="-s -w -buildid= -X main.version=$VERSION -X main.commit=$COMMIT -X main.date=$date"
for t in $targets; do
	os=${t%/*} arch=${t#*/}
	case $os/$arch in linux/amd64 | linux/arm64 | darwin/amd64 | darwin/arm64) ;; *) die "unsupported target $t" ;; esac
	(GOOS=$os GOARCH=$arch "$go" build -buildvcs=false -trimpath -ldflags "$ldflags" \
		-o "$out/exec-server-$os-$arch" . >"$work/$os-$arch.log" 2>&1 || echo failed >"$work/$os-$arch.failed") &
done
wait
for t in $targets; do
	if [ -e "$work/${t%/*}-${t#*/}.failed" ]; then
		cat "$work/${t%/*}-${t#*/}.log" >&2
		die "building $t failed"
	fi
done

# A tarball per target: exec-server-OS-ARCH/{exec-server,LICENSE,README.md}, owned by 0:0, dated
# by the commit, sorted by name, gzip without name or time.
for t in $targets; do
	name=exec-server-${t%/*}-${t#*/}
	mkdir "$work/$name"
	cp "$out/$name" "$work/$name/exec-server"
	cp LICENSE README.md "$work/$name/"
	chmod 0755 "$work/$name" "$work/$name/exec-server"
	chmod 0644 "$work/$name/LICENSE" "$work/$name/README.md"
	(cd "$work" && "$tar" --format=ustar --sort=name --mtime="@$SOURCE_DATE_EPOCH" \
		--owner=0 --group=0 --numeric-owner -cf - "$name") | gzip -9n >"$out/$name.tar.gz"
done

# install.sh, with the download location of this release when --base-url names it.
if [ -n "$base_url" ]; then
	case $base_url in *"'"* | *'|'*) die "--base-url must not contain ' or |" ;; esac
	sed "s|^default_base_url=.*|default_base_url='$base_url'|" install.sh >"$out/install.sh"
	grep -q "^default_base_url='$base_url'\$" "$out/install.sh" || die "install.sh has no default_base_url line"
else
	cp install.sh "$out/install.sh"
fi
chmod 0755 "$out/install.sh"

(cd "$out" && for f in exec-server-* install.sh; do sha256 "$f"; done) >"$work/SHA256SUMS"
mv "$work/SHA256SUMS" "$out/SHA256SUMS"

# Sizes; linux/amd64 stays within 10 MiB, room enough that bytes are never saved by hand-writing
# crypto or a parser the standard library or x/crypto has (BENCHMARKS.md, the binary-size row).
limit=10485760
for t in $targets; do
	name=exec-server-${t%/*}-${t#*/}
	size=$(wc -c <"$out/$name" | tr -d ' ')
	printf '%-26s %9s bytes (%s MiB)\n' "$name" "$size" "$(awk "BEGIN{printf \"%.2f\", $size/1048576}")"
	if [ "$t" = linux/amd64 ] && [ "$size" -gt "$limit" ]; then
		die "$name is $size bytes, over the $limit-byte (10 MiB) limit"
	fi
done
host=$("$go" env GOHOSTOS)/$("$go" env GOHOSTARCH)
for t in $targets; do
	if [ "$t" = "$host" ]; then "$out/exec-server-${t%/*}-${t#*/}" --version; fi
done
echo "SHA256SUMS:"
cat "$out/SHA256SUMS"
