#!/usr/bin/env bash
# skip-tally.sh LOG: the tally `make test` prints after the tests, from the lines skipped
# tests appended to LOG (`<binary> <test>\t<part>: <why>`, crates/testkit): how many, and
# each part and reason with its count. A skip is never a pass: `BERTH_REQUIRE=<parts>`
# makes a required part's skip fail its test.
set -euo pipefail
log=${1:?usage: skip-tally.sh LOG}
count=0
[ -f "$log" ] && count=$(wc -l < "$log")
echo "Skipped: $count test(s) could not run here (each listed in $log)"
if [ "$count" -gt 0 ]; then
  cut -f2- "$log" | sort | uniq -c | sort -rn
fi
