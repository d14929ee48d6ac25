#!/bin/bash
# Reference solution.
set -euo pipefail
jq -r .build.tag /app/release.json > /app/tag.txt
