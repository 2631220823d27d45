#!/usr/bin/env bash
# The alert rules fire: `promtool check rules` on ops/prometheus-alerts.yml and
# `promtool test rules` on ops/prometheus-alerts.test.yml, and every alert in the
# rules has at least one test case that expects it to fire.
# promtool comes from Debian's `prometheus` package (scripts/setup.sh installs it).
set -euo pipefail
cd "$(dirname "$0")/.."
promtool check rules ops/prometheus-alerts.yml
promtool test rules ops/prometheus-alerts.test.yml
missing=0
for a in $(grep -oP '^\s*- alert: \K\w+' ops/prometheus-alerts.yml); do
  if ! grep -A3 "alertname: $a\$" ops/prometheus-alerts.test.yml | grep -q 'exp_labels'; then
    # A case that expects it with labels is a case where it fires.
    if ! awk -v a="$a" '$0 ~ "alertname: "a"$" {f=1; next} f && /alertname:/ {f=0} f && /exp_labels/ {found=1} END {exit !found}' ops/prometheus-alerts.test.yml; then
      echo "alert $a has no test case in which it fires" >&2
      missing=1
    fi
  fi
done
exit $missing
