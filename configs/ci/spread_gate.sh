#!/usr/bin/env bash
# The spread gate as a CI step: grade a sample of rows with your grader and fail the job when it cannot tell passes
# apart or has too few to judge (exit 1) or is broken (exit 4); bad input is exit 2. The verdict, with the report
# under it, goes to the job's summary when $GITHUB_STEP_SUMMARY names one (GitHub Actions), and to stdout either way.
#
#   bash spread_gate.sh ROWS [whileai spread options ...]
#   bash spread_gate.sh rows.jsonl --recipe recipes/my_grader.yaml
#
# SPREAD_JSON names the report file (spread.json). A judge's key: put it in the variable the recipe's
# grader.judge.api_key_env names and give that name in SPREAD_KEY_ENV (OPENAI_API_KEY by default). The script takes
# the key out of its environment, checks that the `whileai` on PATH is whileai-grpo's (its --version and its spread
# command: the package index's `whileai` is another project), and hands the key to the one `whileai spread` call.
set -uo pipefail
if [ $# -lt 1 ]; then
  echo "usage: bash spread_gate.sh ROWS [whileai spread options ...]" >&2
  exit 2
fi
report=${SPREAD_JSON:-spread.json}
key_env=${SPREAD_KEY_ENV:-OPENAI_API_KEY}
if ! [[ $key_env =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]]; then
  echo "spread_gate.sh: SPREAD_KEY_ENV is not a variable name: $key_env" >&2
  exit 2
fi
# The key, kept in this shell unexported: nothing this script starts sees it but the one `whileai spread` call.
key_given=${!key_env+yes}
key=${!key_env-}
unset "$key_env"
errors=$(mktemp)
trap 'rm -f "$errors"' EXIT

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

finish() {
  summary
  if [ -n "${GITHUB_STEP_SUMMARY:-}" ]; then
    summary >>"$GITHUB_STEP_SUMMARY"
  fi
  exit "$status"
}

# This project's whileai, or nothing: another program of that name gets neither the rows nor the key.
rm -f "$report"
found=$(command -v whileai)
version=$(whileai --version 2>"$errors" </dev/null)
usage=$(whileai spread --help 2>>"$errors" </dev/null | head -n 2)
if [ -z "$found" ] || [[ $version != "whileai "*" (whileai-grpo)" ]] || [[ $usage != *"Usage: whileai spread"* ]]; then
  said=$(grep -v '^ ' "$errors" | tail -n 1)  # what it printed on stderr, when it failed to start
  {
    echo "spread_gate.sh: the whileai on PATH (${found:-none}) is not whileai-grpo's, or does not start: its" \
      "--version says '${version:-nothing}'${said:+ (stderr: $said)}. The package index's 'whileai' is another" \
      "project: install whileai-grpo from a path (./whileai), a wheel or a pinned git URL (the workflow's" \
      "WHILEAI). Nothing was graded and no key was handed on."
  } >"$errors.said"
  mv "$errors.said" "$errors"
  cat "$errors" >&2
  status=2
  outcome="failed: whileai-grpo is not installed"
  finish
fi

if [ -n "$key_given" ]; then
  (export "$key_env=$key" && exec whileai spread "$@" --json) >"$report" 2>"$errors"
else
  whileai spread "$@" --json >"$report" 2>"$errors"
fi
status=$?
cat "$errors" >&2
verdict=""
if [ -s "$report" ]; then
  verdict=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1])).get("verdict", ""))' "$report" 2>/dev/null)
fi
case "$status:$verdict" in
  0:yes) outcome="passed: the grader tells passes apart" ;;
  0:*)  # exit 0 without a verdict: the run ended before one (a grader module's os._exit at import, say)
    status=1
    outcome="failed: whileai spread exited 0 without a verdict" ;;
  "1:too few") outcome="failed: too few scores, groups or controls to judge" ;;
  1:*) outcome="failed: no spread" ;;
  3:*) outcome="failed: an optional install is missing (named above; .parquet rows need whileai-grpo[parquet]: WHILEAI=./whileai[parquet])" ;;
  4:*) outcome="failed: the grader is broken or unreachable" ;;
  *) outcome="failed: exit $status" ;;
esac
finish
