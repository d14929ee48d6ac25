#!/bin/bash
# Reward 1 when /app/answer.txt holds the image's secret; the verifier reads it where the image put it.
mkdir -p /logs/verifier
if [ "$(tr -d '[:space:]' < /app/answer.txt 2>/dev/null)" = "$(tr -d '[:space:]' < /opt/task-data/secret.txt)" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
