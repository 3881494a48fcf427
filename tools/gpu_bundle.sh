#!/usr/bin/env bash
# tools/gpu_bundle.sh [OUT_DIR]  (default: build-gpu/, which git ignores)
#
# Packs what a bare GPU machine needs to run tools/gpu_check.sh into OUT_DIR/vgen-gpu-bundle.tar.xz
# (with the work tree, under the device's 64 MiB: see LIMIT): bin/vgen (stripped; the debug info
# stays here as OUT_DIR/vgen.debug), lib/ with every shared library vgen needs except LibTorch's
# own (libtorch*, libc10*, torch's libgomp and the nvidia-* wheel libraries: the device's torch
# 2.11.0+cu130 provides them, gpu_check.sh puts its torch/lib on LD_LIBRARY_PATH) and glibc's,
# with stubs for the codec libraries vgen never calls (tools/vgen_gpu/bundle_libs.py); wheels/ with diffusers and the pure-Python /
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
# The device takes 64 MiB in all: the tracked work tree plus what is carried. Keep 4 MiB spare for
# the tree's growth between building the bundle and sending it.
TREE=$(cd "$ROOT" && git ls-files -z 2>/dev/null | du -cb --files0-from=- 2>/dev/null | tail -1 | cut -f1)
LIMIT=$(((64 - 4) * 1024 * 1024 - ${TREE:-0}))
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

# Libraries: LibTorch and its wheels' libraries are left to the device's torch, glibc's to the
# device, the codec and protocol libraries vgen never calls (FFmpeg's BIND_NOW dependencies) are
# replaced by stubs, the rest are copied (tools/vgen_gpu/bundle_libs.py says why and which).
libs_json=$("$PY" "$ROOT/tools/vgen_gpu/bundle_libs.py" "$BUILD/bin/vgen" "$STAGE/lib" "$TORCH_DIR" "$SITE" "${CC:-cc}")
mapfile -t bundled < <("$PY" -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])["bundled"]))' "$libs_json")
mapfile -t from_torch < <("$PY" -c 'import json,sys; print("\n".join(json.loads(sys.argv[1])["from_torch"]))' "$libs_json")
# The copies of libraries that the system's ldconfig cache would otherwise supply carry no debug
# info we need on the device.
strip --strip-unneeded "$STAGE"/lib/*.so* 2>/dev/null || true  # stubs included
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
# that saves about 5 MiB. Pillow apart: used only where the image has none.
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

"$PY" - "$STAGE/bundle.json" "$glibc_max" "$glibc_bin" "$glibcxx_max" "$libs_json" <<'EOF'
import json, os, sys, torch
out, glibc_max, glibc_bin, glibcxx, libs = sys.argv[1:6]
libs = json.loads(libs)
stage = os.path.dirname(out)
json.dump({"glibc_required": glibc_max, "glibc_required_by_vgen": glibc_bin, "glibcxx_required_by_vgen": glibcxx,
           "torch_built_against": torch.__version__, "libraries": libs["bundled"],
           "libraries_from_torch": libs["from_torch"], "libraries_stubbed": libs["stubbed"],
           "wheels": open(os.path.join(stage, "wheels.txt")).read().split()},
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
  echo "gpu_bundle: over the limit: $size + the tracked tree's ${TREE:-0} bytes leave under 4 MiB of the device's 64 MiB" >&2
  exit 1
fi
