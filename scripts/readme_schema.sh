#!/usr/bin/env bash
# Rewrites README.md's key table (between the schema markers) with
# `mirrortrain config --schema`, the registrations' own description of every
# config key. tests/trainer/config_test.cc checks the two agree.
set -euo pipefail
cd "$(dirname "$0")/.."
MT="${MT:-build/bin/mirrortrain}"
"$MT" config --schema > /tmp/mt_schema.$$
python3 - /tmp/mt_schema.$$ <<'PY'
import sys
schema = open(sys.argv[1]).read()
text = open("README.md").read()
begin, end = "<!-- schema begin -->\n", "<!-- schema end -->"
a, b = text.index(begin) + len(begin), text.index(end)
open("README.md", "w").write(text[:a] + schema + text[b:])
PY
rm -f /tmp/mt_schema.$$
