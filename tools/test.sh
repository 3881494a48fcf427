#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test (C++ doctest
# executables through CTest, Python reference tests through pytest).
set -euo pipefail
export VGEN_SETUP=all  # every tool and target, whatever the demo installed before
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$VGEN_BUILD"
ctest --output-on-failure -j "${VGEN_JOBS}" "$@"
