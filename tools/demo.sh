#!/usr/bin/env bash
# The demo: installs what running vgen needs (not the test tools), builds the vgen target only,
# renders a few videos and prints where they are. tools/test.sh adds the rest.
set -euo pipefail
export VGEN_SETUP="${VGEN_SETUP:-demo}"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
"$VGEN_BUILD/bin/vgen" demo --out "${VGEN_DEMO_OUT:-$VGEN_ROOT/out/demo}" "$@"
