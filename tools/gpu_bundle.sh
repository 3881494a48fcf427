#!/usr/bin/env bash
# tools/gpu_bundle.sh [OUT_DIR]  (default: build-gpu/, which git ignores)
#
# Packs what a bare GPU machine needs to run tools/gpu_check.sh into OUT_DIR/vgen-gpu-bundle.tar.xz
# (< 60 MiB): bin/vgen (stripped; the debug info stays here as OUT_DIR/vgen.debug), lib/ with
# every shared library vgen needs except LibTorch's own (libtorch*, libc10*, torch's libgomp and the
# nvidia-* wheel libraries: the device's torch 2.11.0+cu130 provides them, gpu_check.sh puts its
# torch/lib on LD_LIBRARY_PATH) and except glibc's; wheels/ with diffusers and the pure-Python /
# cp312 packages it needs that the device image lacks; tools/ with the exporter and the check driver;
# bundle.json (libraries, the highest GLIBC symbol version needed, the wheels).
#
# Environment: VGEN_BUILD_DIR (default build/, whose bin/vgen is built if missing), VGEN_PYTHON
# (the venv whose torch the binary was linked against: default ~/.cache/vgen/venv/bin/python),
# VGEN_BUNDLE_WHEELS (a folder of already downloaded wheels; otherwise pip downloads them),
# XZ_OPT (default -9e -T2).
# Sending it to the device: OUT_DIR inside the work tree travels as a carried ignored path:
#   run(command="bash tools/gpu_check.sh --bundle build-gpu/vgen-gpu-bundle.tar.xz $OUT", carry=["build-gpu"])
# The 64 MiB carry limit covers everything carried: keep only the archive in OUT_DIR (this script
# leaves the staging folder and vgen.debug beside it: use a second OUT_DIR or delete them; see
# --clean).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CLEAN=0
if [[ "${1:-}" == "--clean" ]]; then CLEAN=1; shift; fi
OUT=${1:-$ROOT/build-gpu}
BUILD=${VGEN_BUILD_DIR:-$ROOT/build}
PY=${VGEN_PYTHON:-$HOME/.cache/vgen/venv/bin/python}
LIMIT=$((60 * 1024 * 1024))
# diffusers for the reference run; importlib_metadata + zipp: diffusers imports them, a torch-only
# image may lack them; pillow (cp312): diffusers imports PIL at import time. The versions of the
# pinned venv (tools/requirements.txt), where the CPU check runs.
WHEELS=("diffusers==0.42.1" "importlib_metadata==10.2.0" "zipp==4.1.2" "pillow==13.0.0")

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [[ ! -x "$BUILD/bin/vgen" ]]; then
  cmake --build "$BUILD" --target vgen
fi
TORCH_DIR=$("$PY" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
SITE=$(dirname "$TORCH_DIR")

STAGE="$OUT/stage/vgen-gpu-bundle"
rm -rf "$OUT/stage"
mkdir -p "$STAGE/bin" "$STAGE/lib" "$STAGE/wheels" "$STAGE/tools"

# The binary: debug info split off (kept here, linked by name), then stripped.
objcopy --only-keep-debug "$BUILD/bin/vgen" "$OUT/vgen.debug"
strip --strip-unneeded -o "$STAGE/bin/vgen" "$BUILD/bin/vgen"
objcopy --add-gnu-debuglink="$OUT/vgen.debug" "$STAGE/bin/vgen"

# glibc's own libraries: every Linux has them (the GLIBC version check below covers their age).
is_glibc() {
  case "$1" in
    linux-vdso.so.*|ld-linux*|libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libutil.so.*|\
    libresolv.so.*|libanl.so.*|libnsl.so.*|libBrokenLocale.so.*|libmvec.so.*|libnss_*) return 0 ;;
  esac
  return 1
}
# LibTorch and what its wheel brings, found at run time in the device's torch.
is_torch() {
  case "$1" in
    "$TORCH_DIR"/*|"$SITE"/nvidia/*|"$SITE"/cuda*|"$SITE"/triton/*) return 0 ;;
  esac
  return 1
}

declare -a bundled=() from_torch=()
while read -r name _ path _; do
  [[ -z "$name" ]] && continue
  if [[ "$path" == "not" ]]; then echo "gpu_bundle: $name not found by ldd" >&2; exit 1; fi
  is_glibc "$name" && continue
  [[ "$name" == /* ]] && continue  # the interpreter line
  real=$(readlink -f "$path")
  if is_torch "$real"; then from_torch+=("$name"); continue; fi
  cp "$real" "$STAGE/lib/$name"
  bundled+=("$name")
done < <(ldd "$BUILD/bin/vgen" | awk '{ if ($2 == "=>") print $1, $2, $3, $4; else print $1, "-", $1, "-" }')
# The copies of libraries that the system's ldconfig cache would otherwise supply carry no debug
# info we need on the device.
strip --strip-unneeded "$STAGE"/lib/*.so* 2>/dev/null || true
chmod 0644 "$STAGE"/lib/*

# Wheels (downloaded once per OUT_DIR, or taken from VGEN_BUNDLE_WHEELS).
if [[ -n "${VGEN_BUNDLE_WHEELS:-}" ]]; then
  cp "$VGEN_BUNDLE_WHEELS"/*.whl "$STAGE/wheels/"
else
  mkdir -p "$OUT/wheels"
  if ! ls "$OUT"/wheels/diffusers-*.whl >/dev/null 2>&1; then
    "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any \
      -d "$OUT/wheels" "${WHEELS[@]}"
  fi
  cp "$OUT"/wheels/*.whl "$STAGE/wheels/"
fi
# Unpacked (a wheel is a zip: extracting it onto sys.path is installing it, which the device's
# venv without pip needs anyway), so that xz compresses the contents instead of deflate's output:
# that is what keeps the archive under 60 MiB. Pillow apart: used only where the image has none.
"$PY" - "$STAGE/wheels" "$STAGE" <<'PYEOF'
import pathlib, sys, zipfile
wheels, stage = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
for whl in sorted(wheels.glob("*.whl")):
    zipfile.ZipFile(whl).extractall(stage / ("site-pillow" if whl.name.startswith("pillow-") else "site"))
    print(whl.name, file=open(stage / "wheels.txt", "a"))
    whl.unlink()
PYEOF
rmdir "$STAGE/wheels"

# The exporter and the check driver (the device runs the bundle's copy, not the work tree's).
cp -r "$ROOT/tools/vgen_export" "$STAGE/tools/"
cp -r "$ROOT/tools/vgen_gpu" "$STAGE/tools/"
find "$STAGE/tools" -name __pycache__ -prune -exec rm -rf {} +

# The highest GLIBC symbol version the binary and the bundled libraries need.
glibc_max=$(for f in "$STAGE/bin/vgen" "$STAGE"/lib/*; do objdump -T "$f"; done 2>/dev/null |
  grep -o 'GLIBC_[0-9][0-9.]*' | sort -u -V | tail -1)
glibc_bin=$(objdump -T "$STAGE/bin/vgen" | grep -o 'GLIBC_[0-9][0-9.]*' | sort -u -V | tail -1)
glibcxx_max=$(objdump -T "$STAGE/bin/vgen" | grep -o 'GLIBCXX_[0-9][0-9.]*' | sort -u -V | tail -1)

"$PY" - "$STAGE/bundle.json" "$glibc_max" "$glibc_bin" "$glibcxx_max" "$TORCH_DIR" \
  "${#bundled[@]}" "${bundled[@]}" "${from_torch[@]}" <<'EOF'
import json, os, sys, torch
out, glibc_max, glibc_bin, glibcxx, torch_dir, n = sys.argv[1:7]
names = sys.argv[7:]
stage = os.path.dirname(out)
json.dump({"glibc_required": glibc_max, "glibc_required_by_vgen": glibc_bin, "glibcxx_required_by_vgen": glibcxx,
           "torch_built_against": torch.__version__, "libraries": names[:int(n)],
           "libraries_from_torch": names[int(n):], "wheels": open(os.path.join(stage, "wheels.txt")).read().split()},
          open(out, "w"), indent=1)
EOF

ARCHIVE="$OUT/vgen-gpu-bundle.tar.xz"
rm -f "$ARCHIVE"
XZ_OPT=${XZ_OPT:--9e -T2} tar -C "$OUT/stage" -cJf "$ARCHIVE.tmp" vgen-gpu-bundle
mv "$ARCHIVE.tmp" "$ARCHIVE"
size=$(stat -c %s "$ARCHIVE")
raw=$(du -sb "$STAGE" | cut -f1)
[[ $CLEAN == 1 ]] && rm -rf "$OUT/stage" "$OUT/wheels" "$OUT/vgen.debug"
echo "gpu_bundle: $ARCHIVE: $size bytes ($((size / 1048576)) MiB; $((raw / 1048576)) MiB unpacked;" \
     "${#bundled[@]} libraries bundled, ${#from_torch[@]} from torch; needs $glibc_max)"
if (( size >= LIMIT )); then
  echo "gpu_bundle: over the 60 MiB limit" >&2
  exit 1
fi
