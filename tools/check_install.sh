#!/usr/bin/env bash
# Installs the build into a temporary prefix, builds apps/example against it the way an outside
# project would (find_package(vgen)), and runs it with a model package.
# Usage: tools/check_install.sh BUILD_DIR MODEL_DIR [PYTHON]
set -euo pipefail
build="$1"; model="$2"; python="${3:-python3}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for f in index.html app.js style.css; do  # the page vgen serve shows at /
  test -s "$work/prefix/share/vgen/web/$f" || { echo "not installed: share/vgen/web/$f"; exit 1; }
done
torch_cmake="$("$python" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
cmake -S "$root/apps/example" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix;$torch_cmake" >"$work/configure.log" 2>&1 || { cat "$work/configure.log"; exit 1; }
cmake --build "$work/build" >"$work/build.log" 2>&1 || { cat "$work/build.log"; exit 1; }
mkdir -p "$work/out"
"$work/build/vgen_example" "$work/out" "$model"
test -s "$work/out/first.mp4" && test -s "$work/out/second.mp4" && test ! -e "$work/out/doomed.mp4"
echo "example built against the installed package and rendered: $(ls "$work/out")"
