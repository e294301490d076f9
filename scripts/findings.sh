#!/usr/bin/env bash
# Regenerate docs/findings.md (add --quick for a shorter version): `normbench findings`.
set -euo pipefail
cd "$(dirname "$0")/.."
exec python -m normbench findings "$@"
