#!/bin/bash
# Reward 1 when /app/tag.txt is .build.tag; the verifier itself needs the image's jq.
mkdir -p /logs/verifier
want="$(jq -r .build.tag /app/release.json)" || { echo "no jq in this image" >&2; exit 2; }
if [ "$(cat /app/tag.txt 2>/dev/null)" = "$want" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
