#!/usr/bin/env bash
# Regenerate docs/findings.md: `normbench findings` (--quick or --smoke: a smaller scale, written
# to runs/findings/findings-quick.md or findings-smoke.md, never over docs/findings.md).
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m normbench findings "$@"
