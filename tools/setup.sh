#!/usr/bin/env bash
# Installs what is missing and builds vgen. Idempotent: a second run installs nothing and
# rebuilds only what changed. Sourced by tools/demo.sh and tools/test.sh; run it directly to
# just set up and build.
#
#   VGEN_SETUP  demo: only what running vgen needs (its build packages, LibTorch) and only the
#               `vgen` target, so a newcomer's first clip comes fast; all (default): the test
#               tools too (browser, NATS server, diffusers, pytest) and every target
#   VGEN_VENV   Python venv with the pinned tooling and LibTorch (default ~/.cache/vgen/venv,
#               outside the clone so a fresh clone reuses it)
#   VGEN_BUILD  build directory (default build/)
#   VGEN_JOBS   parallel build jobs (default: number of cores)
set -euo pipefail

VGEN_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VGEN_VENV="${VGEN_VENV:-$HOME/.cache/vgen/venv}"
VGEN_BUILD="${VGEN_BUILD:-$VGEN_ROOT/build}"
VGEN_JOBS="${VGEN_JOBS:-$(nproc)}"
VGEN_SETUP="${VGEN_SETUP:-all}"
case "$VGEN_SETUP" in demo|all) ;; *) echo "VGEN_SETUP must be demo or all (got '$VGEN_SETUP')" >&2; exit 2;; esac

log() { printf '[setup] %s\n' "$*" >&2; }

# 1. Debian packages ---------------------------------------------------------------------
APT_PACKAGES=(  # what building and running vgen needs
  build-essential cmake ninja-build pkg-config git ca-certificates
  python3 python3-venv python3-pip
  libboost1.81-dev libboost-fiber1.81-dev libboost-context1.81-dev libboost-json1.81-dev
  libavcodec-dev libavformat-dev libavutil-dev libswscale-dev libswresample-dev  # swresample: audio to the encoder's rate and format
  libavfilter-dev  # the post-stages' no-model fallback (minterpolate, lanczos scale)
  doctest-dev libspdlog-dev libfmt-dev libcli11-dev libssl-dev libsentencepiece-dev
  libpcre2-dev libicu-dev  # the byte-level BPE tokenizer (stages/text/bpe_tokenizer): its regex and NFC
  libsqlite3-dev nlohmann-json3-dev
  libnats-dev  # the fleet's client (vgen worker, --queue); found at configure time, so always
)
if [ "$VGEN_SETUP" = all ]; then
  APT_PACKAGES+=(
    ffmpeg                    # ffprobe, the tests' judge of every file
    chromium chromium-driver  # the web page's browser test (tests/python/test_web_browser.py)
    nats-server               # the fleet tests' broker
  )
fi
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  log "Debian packages: all present"
fi

# 2. Python venv: LibTorch comes from the pinned torch wheel (requirements-runtime.txt); the
# tests' tooling (requirements.txt: diffusers, pytest, ...) only with VGEN_SETUP=all ----------
if [ ! -x "$VGEN_VENV/bin/python" ]; then
  log "creating venv $VGEN_VENV"
  mkdir -p "$(dirname "$VGEN_VENV")"
  python3 -m venv "$VGEN_VENV"
fi
install_requirements() {  # FILE WHAT: pip-installs FILE unless its stamp says it is in place
  local req="$VGEN_ROOT/tools/$1" stamp="$VGEN_VENV/.vgen-$1.sha256" want
  want="$(sha256sum "$req" | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    log "installing $2 into $VGEN_VENV"
    "$VGEN_VENV/bin/pip" install -q -r "$req"
    echo "$want" > "$stamp"
  else
    log "$2: up to date"
  fi
}
install_requirements requirements-runtime.txt "LibTorch (the torch wheel: several GB, once)"
if [ "$VGEN_SETUP" = all ]; then
  install_requirements requirements.txt "the pinned Python tooling"
fi
# vgen's own tooling (tools/pyproject.toml: vgen_export, vgen_reference, vgen_demo_model,
# vgen_trace), editable, so `python -m vgen_export.wan ...` runs this checkout's code from anywhere.
# Reinstalled when pyproject.toml changes or the venv's install names another checkout (the venv
# lives outside the clone and is shared). The tests do not depend on it: CTest puts the build's
# own source tree first (tests/CMakeLists.txt).
TOOLS_STAMP="$VGEN_VENV/.vgen-tools.sha256"
tools_want="$VGEN_ROOT/tools $(sha256sum "$VGEN_ROOT/tools/pyproject.toml" | cut -d' ' -f1)"
tools_at="$("$VGEN_VENV/bin/python" -c 'import pathlib, vgen_export; print(pathlib.Path(vgen_export.__file__).resolve().parents[1])' 2>/dev/null || true)"
if [ "$(cat "$TOOLS_STAMP" 2>/dev/null)" != "$tools_want" ] || [ "$tools_at" != "$VGEN_ROOT/tools" ]; then
  log "installing vgen's Python tooling from $VGEN_ROOT/tools (editable)"
  "$VGEN_VENV/bin/pip" install -q --no-deps -e "$VGEN_ROOT/tools"
  echo "$tools_want" > "$TOOLS_STAMP"
else
  log "vgen Python tooling: installed from this checkout"
fi
TORCH_CMAKE="$("$VGEN_VENV/bin/python" -W ignore -c 'import torch; print(torch.utils.cmake_prefix_path)')"

# 3. Configure and build ------------------------------------------------------------------
with_torch=ON
if ! command -v nvcc >/dev/null 2>&1 && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  # find_package(Torch) against the CUDA wheel needs a CUDA toolkit (pytorch #73427).
  log "WARNING: no CUDA toolkit found; building without the LibTorch parts"
  with_torch=OFF
fi
export PATH="/usr/local/cuda/bin:$PATH"
# ccache is optional: when installed it makes rebuilds (and builds of other worktrees of the same
# tree) reuse objects; the build is the same without it.
launcher=()
if command -v ccache >/dev/null 2>&1; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
if [ ! -f "$VGEN_BUILD/build.ninja" ]; then
  log "configuring $VGEN_BUILD"
  cmake -S "$VGEN_ROOT" -B "$VGEN_BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_PREFIX_PATH="$TORCH_CMAKE" -DVGEN_WITH_TORCH="$with_torch" \
    -DVGEN_PYTHON="$VGEN_VENV/bin/python" "${launcher[@]}" >/dev/null
fi
if [ "$VGEN_SETUP" = demo ]; then
  log "building vgen ($VGEN_JOBS jobs)"
  cmake --build "$VGEN_BUILD" -j "$VGEN_JOBS" --target vgen
else
  log "building ($VGEN_JOBS jobs)"
  cmake --build "$VGEN_BUILD" -j "$VGEN_JOBS"
fi
log "built $VGEN_BUILD/bin/vgen"
export VGEN_ROOT VGEN_VENV VGEN_BUILD
