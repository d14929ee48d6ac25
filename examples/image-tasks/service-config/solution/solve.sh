#!/bin/bash
# Reference solution.
set -euo pipefail
sed -i "s/^port=.*/port=8431/" /etc/ledger/ledger.conf
