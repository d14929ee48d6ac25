#!/bin/bash
# Reward 1 when the verifier venv's pytest passes test_config.py.
mkdir -p /logs/verifier
if /opt/verifier/venv/bin/python -m pytest -q -p no:cacheprovider /tests/test_config.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
