#!/usr/bin/env bash
# Regenerate docs/findings.md (add --quick for the 5-minute version).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python scripts/findings.py "$@"
