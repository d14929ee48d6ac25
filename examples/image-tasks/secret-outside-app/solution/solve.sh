#!/bin/bash
# Reference solution.
set -euo pipefail
cp /opt/task-data/secret.txt /app/answer.txt
