#!/bin/sh
# release.sh VERSION OUTDIR [OS/ARCH...] builds the release files into OUTDIR
# (emptied first): for each platform a static CGO_ENABLED=0 binary in
# OUTDIR/bin, an archive (.tar.gz; .zip for Windows) holding it with LICENSE
# and README.md, and for Linux, macOS and Windows an MCPB bundle; then
# SHA256SUMS over the archives and bundles, and server.json for the MCP
# registry with each bundle's fileSha256. Without platforms it builds all.
#
# The files are the same bytes wherever and whenever they are built from the
# same sources with the same Go toolchain: -trimpath drops the build
# directory, -buildvcs=false and -buildid= drop the commit and build ids, and
# the archives (scripts/pack) are sorted, owned by 0:0 and stamped with one
# time, SOURCE_DATE_EPOCH. It defaults to the commit time of the newest
# commit that changed anything but server.json: `make release` rewrites
# server.json with the bundles' checksums, and committing that must not
# change the time stamped into the bundles it describes.
#
# The bundle's manifest follows the MCPB manifest spec, manifest_version 0.3
# (MANIFEST.md in github.com/anthropics/mcpb); its template is
# scripts/mcpb-manifest.json.
set -eu

if [ $# -lt 2 ]; then
	echo "usage: scripts/release.sh VERSION OUTDIR [OS/ARCH...]" >&2
	exit 2
fi
version=$1
out=$2
shift 2
# A partial release (some platforms) has no server.json: it lists them all.
partial=$#
platforms=${*:-linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64 freebsd/amd64 freebsd/arm64}

root=$(cd "$(dirname "$0")/.." && pwd)
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$root" log -1 --format=%ct -- . ':(exclude)server.json' 2>/dev/null) || {
		echo "release: $root is not a git checkout, so there is no commit time to stamp;" \
			"set SOURCE_DATE_EPOCH (Unix seconds), such as the release's commit time" >&2
		exit 1
	}
fi
case $SOURCE_DATE_EPOCH in
'' | *[!0-9]*)
	echo "release: SOURCE_DATE_EPOCH must be Unix seconds (got '$SOURCE_DATE_EPOCH')" >&2
	exit 1
	;;
esac
case $version in
'' | *[!0-9A-Za-z.+-]*)
	echo "release: VERSION must be a plain version such as 1.2.0 (got '$version')" >&2
	exit 1
	;;
esac

# OUTDIR is emptied, so it must be new or hold only what a release writes
# (a home directory or /usr/local has a bin/ too).
if [ -e "$out" ] && { ls -A "$out" && if [ -d "$out/bin" ]; then ls -A "$out/bin"; fi; } |
	grep -Eqv '^(bin|SHA256SUMS|server\.json|crosstalk-mcp-.+)$'; then
	echo "release: $out holds files a release does not write: not a release directory, not emptying it" >&2
	exit 1
fi
rm -rf "$out"
mkdir -p "$out/bin"
out=$(cd "$out" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
trap 'exit 1' INT TERM

# pack is built once, for this machine, from its own module.
go -C "$root/scripts/pack" build -o "$work/pack" .

echo "==> release $version, $(go env GOVERSION), SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH"
assets=""
for platform in $platforms; do
	os=${platform%/*}
	arch=${platform#*/}
	exe=crosstalk-mcp
	[ "$os" = windows ] && exe=crosstalk-mcp.exe
	name=crosstalk-mcp-$version-$os-$arch
	bin=$out/bin/crosstalk-mcp-$os-$arch
	[ "$os" = windows ] && bin=$bin.exe
	echo "==> $name"
	# GOAMD64, GOARM64, GOFLAGS, GOEXPERIMENT and GOWORK are pinned so that
	# a developer's environment cannot change the code generated.
	(cd "$root" && CGO_ENABLED=0 GOOS=$os GOARCH=$arch GOAMD64=v1 GOARM64=v8.0 GOFLAGS= GOEXPERIMENT= GOWORK=off \
		go build -trimpath -buildvcs=false -ldflags "-s -w -buildid= -X main.version=$version" -o "$bin" .)
	mkdir -p "$work/$name"
	cp "$bin" "$work/$name/$exe"
	if [ "$os" = windows ]; then
		"$work/pack" zip -o "$out/$name.zip" -mtime "$SOURCE_DATE_EPOCH" -prefix "$name/" \
			"$work/$name/$exe" "$root/LICENSE" "$root/README.md"
		assets="$assets $name.zip"
	else
		"$work/pack" tgz -o "$out/$name.tar.gz" -mtime "$SOURCE_DATE_EPOCH" -prefix "$name/" \
			"$work/$name/$exe" "$root/LICENSE" "$root/README.md"
		assets="$assets $name.tar.gz"
	fi
	case $os in
	linux | darwin | windows)
		"$work/pack" manifest -template "$root/scripts/mcpb-manifest.json" -version "$version" \
			-goos "$os" -binary "$exe" -o "$work/$name/manifest.json"
		"$work/pack" zip -o "$out/$name.mcpb" -mtime "$SOURCE_DATE_EPOCH" \
			"$work/$name/manifest.json=manifest.json" "$work/$name/$exe=server/$exe" \
			"$root/LICENSE=LICENSE" "$root/README.md=README.md"
		assets="$assets $name.mcpb"
		;;
	esac
done

# The asset names are built above from VERSION and the platform, so they
# hold no blanks and split safely.
# shellcheck disable=SC2086
(cd "$out" && "$work/pack" sums -o SHA256SUMS $assets)
if [ "$partial" -eq 0 ]; then
	"$work/pack" serverjson -template "$root/server.json" -version "$version" -dist "$out" -o "$out/server.json"
fi
echo "==> $out: $(ls "$out" | wc -l | tr -d ' ') entries"
