#!/usr/bin/env bash
# tools/gpu_check.sh [--device cuda|cpu] [--tiny] [--bundle FILE] [--python PY] [--work DIR] [--budget-s S]
#                    [--steps N] [--text-layers N] [--only first|compiled|PHASE,...] OUT_DIR
#
# The one GPU check: on a bare device machine, unpacks the bundle (tools/gpu_bundle.sh), makes
# its wheels importable over the device's torch, builds a bf16 vgen package of a real-size Wan 2.1
# T2V 1.3B (published config, random weights; --tiny: the tiny test model), renders the same
# prompts, seeds and sizes with diffusers' WanPipeline and with vgen (bf16, same device, same run),
# and writes OUT_DIR/gpu_check.json (rewritten after every phase: partial results survive a
# failure or a time-out) and OUT_DIR/gpu_check.log. Phases, time boxes and what each number
# means: tools/vgen_gpu/check.py. Each command is planned for < 8 minutes on an H100/H200
# (--budget-s, default 450 s of phases after the set-up); the exit status is 0 only if every
# phase it was asked for passed (or was reused).
#
# On the GPU machine (its image: Python 3.12 and torch 2.11.0+cu130 in /opt/torch/.venv, no
# diffusers, no Boost, no FFmpeg, no network; 64 MiB carried), two commands a session, the same
# --work (outside the copied tree: it stays while the machine is warm):
#   here:   bash tools/gpu_bundle.sh --clean build-gpu     # -> build-gpu/vgen-gpu-bundle.tar.xz (< 60 MiB)
#   device: run(command="bash tools/gpu_check.sh --bundle build-gpu/vgen-gpu-bundle.tar.xz --work /tmp/vgen-gpu-work $OUT",
#               carry=["build-gpu"], timeout_s=540)
#           run(command="bash tools/gpu_check.sh --bundle build-gpu/vgen-gpu-bundle.tar.xz --work /tmp/vgen-gpu-work --only compiled --budget-s B $OUT",
#               carry=["build-gpu"], timeout_s=T)
#   with T = status's budget_left_s - 30 and B = T - 60 (900 s of device time in all: both cannot
#   have 540 s; under about 240 s left, skip it and give_back).
#   then read each $OUT/gpu_check.json ("table": s/step, VAE decode, end to end, peak memory, PSNR,
#   attention per kernel and cuDNN-first, the step's kernel split, the decoder probe, fp8, tiled
#   decode (the last two may be cut by the budget); the second: vgen_aoti, its compile time and .pt2 size, then the batch, two
#   leases and the fusion row, as far as its budget goes). The second reuses
#   the model, packages and single-job results the first left in --work (phases "reused"); on a
#   fresh machine it builds and exports them again first (about 2.5 minutes more).
# On this machine (the suite runs both as tests/python/test_gpu_bundle.py and test_gpu_bundle_aoti.py):
#   bash tools/gpu_check.sh --device cpu --tiny --bundle build-gpu/vgen-gpu-bundle.tar.xz --work /tmp/gpu-work /tmp/gpu-out
#   bash tools/gpu_check.sh --device cpu --tiny --bundle build-gpu/vgen-gpu-bundle.tar.xz --work /tmp/gpu-work --only compiled /tmp/gpu-out2
#
# --python: the interpreter whose torch serves as "the device's torch" (default /opt/torch/.venv/bin/python,
# else $VGEN_PYTHON, else python3). vgen runs with LD_LIBRARY_PATH = bundle/lib : that torch's lib
# directory : its nvidia-* wheels' lib directories, nothing from this script's own build.
set -uo pipefail

DEVICE=cuda TINY=0 BUNDLE="" PY="" WORK="" OUT="" EXTRA=()
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
while (($#)); do
  case "$1" in
    --device) DEVICE=$2; shift 2 ;;
    --tiny) TINY=1; shift ;;
    --bundle) BUNDLE=$2; shift 2 ;;
    --python) PY=$2; shift 2 ;;
    --work) WORK=$2; shift 2 ;;
    --budget-s|--steps|--text-layers|--only) EXTRA+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,35p' "$0"; exit 0 ;;
    -*) echo "gpu_check: unknown option $1" >&2; exit 2 ;;
    *) OUT=$1; shift ;;
  esac
done
[[ -n "$OUT" ]] || { echo "gpu_check: OUT_DIR missing" >&2; exit 2; }
BUNDLE=${BUNDLE:-$ROOT/build-gpu/vgen-gpu-bundle.tar.xz}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/gpu_check.log"
exec > >(tee -a "$LOG") 2>&1
echo "gpu_check: $(date -u +%FT%TZ) device=$DEVICE tiny=$TINY bundle=$BUNDLE"

fail() {  # a set-up failure still leaves a JSON saying where it stopped
  printf '{"ok": false, "setup_error": "%s", "device": "%s"}\n' "$1" "$DEVICE" > "$OUT/gpu_check.json"
  echo "gpu_check: $1" >&2
  exit 1
}

if [[ -z "$PY" ]]; then
  for c in /opt/torch/.venv/bin/python "${VGEN_PYTHON:-}" python3; do
    [[ -n "$c" ]] && command -v "$c" >/dev/null && { PY=$c; break; }
  done
fi
"$PY" -c 'import torch' 2>/dev/null || fail "no torch in $PY"
WORK=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/vgen-gpu-check.XXXXXX")}
mkdir -p "$WORK"
[[ -f "$BUNDLE" ]] || fail "bundle $BUNDLE not found (build it with tools/gpu_bundle.sh)"

# Unpack with Python's tarfile: a bare image may lack xz.
t0=$(date +%s.%N)
"$PY" - "$BUNDLE" "$WORK" <<'PYEOF' || fail "could not unpack the bundle"
import sys, tarfile, zipfile, pathlib
bundle, work = sys.argv[1], pathlib.Path(sys.argv[2])
with tarfile.open(bundle) as t:
    t.extractall(work, filter="tar")
PYEOF
B="$WORK/vgen-gpu-bundle"
chmod +x "$B/bin/vgen"
# The bundle was built on Debian bookworm: its libstdc++ and libexpat need GLIBC_2.36 (Ubuntu 22.04
# has 2.35, 24.04 has 2.39). Say so at once rather than through a loader error.
"$PY" - "$B/bundle.json" <<'PYEOF' || fail "this machine's glibc is older than the bundle needs (bundle.json glibc_required)"
import json, os, sys
need = json.load(open(sys.argv[1]))["glibc_required"].split("_")[1]
have = os.confstr("CS_GNU_LIBC_VERSION").split()[1]
ver = lambda v: tuple(int(x) for x in v.split("."))
print(f"gpu_check: glibc {have}, the bundle needs {need}")
sys.exit(0 if ver(have) >= ver(need) else 1)
PYEOF
echo "gpu_check: unpacked in $(echo "$(date +%s.%N) - $t0" | bc 2>/dev/null || echo '?') s into $WORK"

TORCH_LIBS=$("$PY" - <<'PYEOF'
import os, glob, torch
site = os.path.dirname(os.path.dirname(torch.__file__))
dirs = [os.path.join(os.path.dirname(torch.__file__), "lib")]
dirs += sorted(d for d in glob.glob(os.path.join(site, "nvidia", "**", "lib"), recursive=True) if os.path.isdir(d))
print(":".join(dirs))
PYEOF
) || fail "could not locate the torch libraries"
export LD_LIBRARY_PATH="$B/lib:$TORCH_LIBS"
# The bundle's wheels, unpacked (tools/gpu_bundle.sh); its Pillow only where the image has none.
SITE="$B/site"
"$PY" -c 'import PIL' 2>/dev/null || SITE="$SITE:$B/site-pillow"
export PYTHONPATH="$SITE:$B/tools${PYTHONPATH:+:$PYTHONPATH}"
"$B/bin/vgen" --version || fail "the bundled vgen does not start (see $LOG)"

ARGS=(--device "$DEVICE" --vgen "$B/bin/vgen" --work "$WORK" --out "$OUT" "${EXTRA[@]}")
((TINY)) && ARGS+=(--tiny)
"$PY" -m vgen_gpu.check "${ARGS[@]}"
rc=$?
echo "gpu_check: exit $rc; $OUT/gpu_check.json"
exit $rc
