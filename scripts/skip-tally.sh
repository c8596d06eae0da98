#!/usr/bin/env bash
# skip-tally.sh LOG: the tally `make test` prints after the tests, from the lines skipped
# tests appended to LOG (`<binary> <test>\t<part>: <why>`, crates/testkit): how many, and
# each part and reason with its count. A skip is never a pass: `BERTH_REQUIRE=<parts>`
# makes a required part's skip fail its test.
set -euo pipefail
log=${1:?usage: skip-tally.sh LOG}
count=0
[ -f "$log" ] && count=$(wc -l < "$log")
if [ "$count" -eq 0 ]; then
  echo "Skipped: none (every test ran)"
  exit 0
fi
by_part=$(cut -f2- "$log" | cut -d: -f1 | sort | uniq -c | sort -rn | awk '{printf "%s%s %s", sep, $2, $1; sep=", "}')
echo "Skipped: $count test(s) could not run here ($by_part; each test in $log)"
cut -f2- "$log" | sort | uniq -c | sort -rn
