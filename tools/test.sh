#!/usr/bin/env bash
# Builds (through tools/setup.sh, which installs what is missing) and runs the
# whole test suite with CTest. Tests that need a GPU skip with a reason when
# none is present. Extra arguments go to ctest (e.g. -L model, -R tokenizer).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
ctest --test-dir "${SPECPIPE_BUILD_DIR:-build}" --output-on-failure -j "$(nproc)" "$@"
