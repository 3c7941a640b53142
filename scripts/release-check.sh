#!/bin/sh
# release-check.sh VERSION shows that the release is reproducible and sound.
# It builds the release into dist/ from this checkout, then again from a copy
# of the sources in another directory, later, and compares every file byte
# for byte, printing both checksums side by side. It then builds linux/amd64
# a third time with an empty GOCACHE and compares that too, checks
# SHA256SUMS with sha256sum -c, shows file(1) on each binary and runs the
# linux/amd64 binary's --version where the machine can.
#
# The second build shares the first one's build cache, so it mostly links;
# it still shows that the directory and the time do not reach the files,
# since -trimpath, -buildid= and the archives' fixed times are what keep
# them out, not the cache. The third build is the one that shows a binary
# does not depend on what the cache held; it compiles everything, so it is
# done for one platform only (RELEASE_CHECK_FRESH_CACHE=0 skips it).
set -eu

if [ $# -ne 1 ]; then
	echo "usage: scripts/release-check.sh VERSION" >&2
	exit 2
fi
version=$1
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git log -1 --format=%ct -- . ':(exclude)server.json')
fi
export SOURCE_DATE_EPOCH

sha256() {
	if command -v sha256sum >/dev/null; then
		sha256sum "$@"
	else
		shasum -a 256 "$@"
	fi
}

# compare DIR1 DIR2 prints each file of DIR2 with its checksum in both and
# fails if any file differs or either directory has a file the other lacks.
compare() {
	(cd "$1" && find . -type f | sort) >"$other/files1"
	(cd "$2" && find . -type f | sort) >"$other/files2"
	if [ "$3" = all ] && ! cmp -s "$other/files1" "$other/files2"; then
		echo "FAIL: the two builds wrote different files:" >&2
		diff "$other/files1" "$other/files2" >&2 || true
		return 1
	fi
	status=0
	while read -r f; do
		a=$(sha256 "$1/$f" | cut -d' ' -f1)
		b=$(sha256 "$2/$f" | cut -d' ' -f1)
		if cmp -s "$1/$f" "$2/$f"; then
			printf '%s  %s  same  %s\n' "$a" "$b" "${f#./}"
		else
			printf '%s  %s  DIFFERENT  %s\n' "$a" "$b" "${f#./}"
			status=1
		fi
	done <"$other/files2"
	return $status
}

other=$(mktemp -d "${TMPDIR:-/tmp}/crosstalk-release-check.XXXXXX")
trap 'rm -rf "$other"' EXIT
trap 'exit 1' INT TERM

t0=$(date +%s)
echo "==> build 1: $root at $(date -u +%H:%M:%S)"
scripts/release.sh "$version" dist
t1=$(date +%s)

# The copy holds what git would commit from this working tree: tracked files
# that still exist and untracked files that are not ignored (so no dist/,
# binaries or node_modules).
copy=$other/elsewhere/a-longer/path/crosstalk-mcp-copy
mkdir -p "$copy"
git ls-files --cached --others --exclude-standard | while read -r f; do
	[ -f "$f" ] && printf '%s\n' "$f"
done >"$other/sources"
tar -cf - -T "$other/sources" | tar -xf - -C "$copy"
echo "==> build 2: $copy at $(date -u +%H:%M:%S)"
(cd "$copy" && scripts/release.sh "$version" "$other/dist")
t2=$(date +%s)

echo "==> build 1 (dist/) and build 2 ($other/dist), sha256 side by side"
compare dist "$other/dist" all || { echo "FAIL: the release is not reproducible" >&2; exit 1; }

if [ "${RELEASE_CHECK_FRESH_CACHE:-1}" != 0 ]; then
	echo "==> build 3: linux/amd64 with an empty GOCACHE at $(date -u +%H:%M:%S)"
	(cd "$copy" && GOCACHE=$other/gocache scripts/release.sh "$version" "$other/fresh" linux/amd64)
	rm "$other/fresh/SHA256SUMS" # it lists one platform's assets only
	echo "==> build 1 and build 3 (empty cache), sha256 side by side"
	compare dist "$other/fresh" some || { echo "FAIL: the linux/amd64 files depend on the build cache" >&2; exit 1; }
fi
t3=$(date +%s)

echo "==> sha256sum -c SHA256SUMS"
(cd dist && sha256 -c SHA256SUMS)

echo "==> file(1) on each binary"
if command -v file >/dev/null; then
	for bin in dist/bin/*; do
		desc=$(file -b "$bin")
		echo "$(basename "$bin"): $desc"
		case $(basename "$bin") in
		*-linux-amd64) want='x86-64.*statically linked' ;;
		*-linux-arm64) want='aarch64.*statically linked' ;;
		*-freebsd-amd64) want='x86-64.*FreeBSD.*statically linked' ;;
		*-freebsd-arm64) want='aarch64.*FreeBSD.*statically linked' ;;
		*-darwin-amd64) want='Mach-O 64-bit.*x86_64' ;;
		*-darwin-arm64) want='Mach-O 64-bit.*arm64' ;;
		*-windows-amd64.exe) want='PE32\+.*x86-64' ;;
		*-windows-arm64.exe) want='PE32\+.*Aarch64' ;;
		*) want='unknown platform' ;;
		esac
		echo "$desc" | grep -Eq "$want" || { echo "FAIL: $bin: want /$want/" >&2; exit 1; }
	done
elif [ -n "${CI:-}" ]; then
	echo "FAIL: file(1) is not installed (.ci/run installs it)" >&2
	exit 1
else
	echo "file(1) is not installed; main_release_bundle_test.go checks each binary's format too"
fi

if [ "$(uname -s)/$(uname -m)" = Linux/x86_64 ]; then
	echo "==> dist/bin/crosstalk-mcp-linux-amd64 --version"
	dist/bin/crosstalk-mcp-linux-amd64 --version | tee "$other/version"
	[ "$(head -n 1 "$other/version")" = "$version" ] || { echo "FAIL: --version line 1 is not $version" >&2; exit 1; }
fi
echo "PASS: release-check: build 1 $((t1 - t0)) s, build 2 $((t2 - t1)) s, empty-cache build $((t3 - t2)) s"
