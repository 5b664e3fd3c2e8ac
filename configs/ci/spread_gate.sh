#!/usr/bin/env bash
# The spread gate as a CI step: grade a sample of rows with your grader and fail the job when it cannot tell passes
# apart (exit 1) or is broken (exit 4); bad input is exit 2. The verdict, and the --json report under it, go to the
# job's summary when $GITHUB_STEP_SUMMARY names one (GitHub Actions), and to stdout either way.
#
#   bash spread_gate.sh ROWS [whileai spread options ...]
#   bash spread_gate.sh rows.jsonl --recipe recipes/my_grader.yaml
#
# SPREAD_JSON names the report file (spread.json). whileai must be installed; a judge's key comes from the variable
# the recipe's api_key_env names.
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: bash spread_gate.sh ROWS [whileai spread options ...]" >&2
  exit 2
fi
report=${SPREAD_JSON:-spread.json}
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT
whileai spread "$@" --json >"$report" 2>"$errors"
status=$?
cat "$errors" >&2
case $status in
  0) outcome="passed: the grader tells passes apart" ;;
  1) outcome="failed: no spread" ;;
  4) outcome="failed: the grader is broken or unreachable" ;;
  *) outcome="failed: exit $status" ;;
esac
summary() {
  echo "### whileai spread gate $outcome"
  echo
  if [ -s "$report" ]; then
    echo '```text'
    COLUMNS=120 whileai report "$report"
    echo '```'
    echo
    echo "<details><summary>$report</summary>"
    echo
    echo '```json'
    cat "$report"
    echo
    echo '```'
    echo '</details>'
  else
    echo '```text'
    tail -n 20 "$errors"
    echo '```'
  fi
}
summary
if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
  summary >>"$GITHUB_STEP_SUMMARY"
fi
exit "$status"
