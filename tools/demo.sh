#!/usr/bin/env bash
# The demo: installs what is missing, builds, renders a few videos and prints where they are.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
"$VGEN_BUILD/bin/vgen" demo --out "${VGEN_DEMO_OUT:-$VGEN_ROOT/out/demo}" "$@"
