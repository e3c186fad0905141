#!/bin/sh
# The sandbox's race tests (docs/sandbox.md §2, §3), run longer than CI runs them: a sandboxed
# attacker swapping directories (RENAME_EXCHANGE) while new sandboxes are built, and while the
# fs worker writes, creates and removes next to protected names. Each verdict is read on the
# host. Linux, as root or a user with user namespaces; loopback only.
#
#   scripts/escape.sh            N=10: 6,500 sandbox starts, 2,000 rounds of each fs race
#   scripts/escape.sh 50         N=50
#
# N scales CI's counts: 650 sandbox starts against the swap (5x the most that 08cbb97, before
# the fix, needed: 130) and 200 rounds of the fs worker's swap race, each times N; the race of
# a .git that appears mid-write runs 200*N rounds too (CI: 2,000).
set -eu

root=$(cd "$(dirname "$0")/.." && pwd)
times=${1:-10}
case $times in '' | *[!0-9]* | 0) echo "escape.sh: want a positive multiple of CI's counts, not $times" >&2; exit 2 ;; esac

cd "$root"
EXEC_SERVER_RACE_ATTEMPTS=$((650 * times)) EXEC_SERVER_ESCAPE_ROUNDS=$((200 * times)) \
	go test -count=1 -timeout 0 -v \
	-run 'TestSandboxMountRaceRenameExchange|TestFSSandboxWorkerRefusesProtectedNamesUnderRace|TestFSSandboxWorkerGuardsANameThatAppearsMidWrite' . |
	grep -E '^(=== RUN|--- |\s+\S+_test\.go:[0-9]+:|ok|FAIL|PASS)'
