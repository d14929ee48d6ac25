#!/bin/sh
# A light multi-turn agent for bench/env_scale.py, run by the env server's `command` agent in the
# real local sandbox: TURNS chat calls through the trial's proxy URL (OPENAI_BASE_URL, its trial key
# in OPENAI_API_KEY), each resending the whole conversation (every answer so far and a tool
# observation after it, as an agent does), with about TOOL seconds of "tool time" (a sleep, 0.5x to
# 1.5x, seeded by the trial id) before each call after the first. Then writes /app/answer.txt,
# which the bench task's verifier scores.
#
# POSIX sh, curl and sed only: a thousand of these fit where a thousand Python agents would not.
# The simulated replicas answer in hex text, so an answer drops into JSON without escaping.
#
#     sh shell_agent.sh TURNS TOOL_SECONDS MAX_TOKENS
set -u
turns=${1:-4}
tool=${2:-60}
max_tokens=${3:-16}
seed=$(printf %s "$RLSTACK_TRIAL" | cksum | cut -d' ' -f1)
msgs='{"role":"system","content":"You are a shell agent."},{"role":"user","content":"Write the answer to /app/answer.txt."}'
turn=1
while [ "$turn" -le "$turns" ]; do
  if [ "$turn" -gt 1 ]; then
    sleep $(( tool * (50 + (seed + turn * 7919) % 101) / 100 ))
  fi
  body="{\"model\":\"$OPENAI_MODEL\",\"max_tokens\":$max_tokens,\"messages\":[$msgs]}"
  reply=$(curl -sS --max-time 300 -H "Authorization: Bearer $OPENAI_API_KEY" -H 'Content-Type: application/json' \
          --data-binary "$body" "$OPENAI_BASE_URL/chat/completions") || { echo "turn $turn: curl failed" >&2; exit 3; }
  content=$(printf %s "$reply" | sed -n 's/.*"content": *"\([0-9a-f]*\)".*/\1/p')
  if [ -z "$content" ]; then
    printf 'turn %s: no answer in %.300s\n' "$turn" "$reply" >&2
    exit 4
  fi
  msgs="$msgs,{\"role\":\"assistant\",\"content\":\"$content\"},{\"role\":\"user\",\"content\":\"tool output $turn: exit 0\"}"
  turn=$((turn + 1))
done
printf '%s\n' "$content" > /app/answer.txt
echo "done after $turns turns"
