#!/bin/sh
# Mutation testing of the evidence core, the witnesses and the boundary:
# gremlins changes one condition or operator at a time and runs the
# package's own tests; a mutant that no test notices ("lived") is a check
# an examiner relies on that nothing pins. Prints one table, a row per
# package; each package's full list (which mutant, where) is kept in
# $OUT/<package>.txt. Takes tens of minutes on a 2-core machine, so it is
# not part of .ci/run; docs/TESTING.md says when to run it.
#
#   scripts/mutation.sh                   every package below
#   scripts/mutation.sh ./integrity ...   only those
#
# WORKERS (1) and TIMEOUT_COEFFICIENT (10) are gremlins' settings: one
# worker and a generous timeout keep the slower tests from being read as
# timeouts while the machine is busy.
set -eu
cd "$(dirname "$0")/.."
gremlins="github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0"
workers=${WORKERS:-1}
coefficient=${TIMEOUT_COEFFICIENT:-10}
OUT=${OUT:-$(mktemp -d "${TMPDIR:-/tmp}/aptl-mutation-XXXXXX")}
mkdir -p "$OUT"
if [ "$#" -eq 0 ]; then
	set -- ./integrity ./recorder ./evidence ./internal/scriptfmt ./internal/agentwire ./internal/relaywire \
		./witness/pcap ./witness/audit ./witness/auditrelay ./broker ./agentd
fi
printf '%-22s %7s %6s %12s %10s %9s %9s %8s\n' package killed lived "not covered" "timed out" efficacy coverage time
for pkg in "$@"; do
	name=$(echo "$pkg" | sed 's|^\./||; s|/|-|g')
	log="$OUT/$name.txt"
	start=$(date +%s)
	if ! go run "$gremlins" unleash --workers "$workers" --timeout-coefficient "$coefficient" "$pkg" >"$log" 2>&1; then
		echo "mutation: gremlins failed on $pkg; see $log" >&2
		exit 1
	fi
	secs=$(($(date +%s) - start))
	# gremlins' summary: "Killed: N, Lived: N, Not covered: N",
	# "Timed out: N, ...", "Test efficacy: X%", "Mutator coverage: Y%".
	count() { sed -n "s/.*$1: \([0-9][0-9]*\).*/\1/p" "$log" | tail -n 1; }
	percent() { sed -n "s/^$1: \([0-9.]*%\).*/\1/p" "$log" | tail -n 1; }
	printf '%-22s %7s %6s %12s %10s %9s %9s %7ss\n' "${pkg#./}" "$(count Killed)" "$(count Lived)" \
		"$(count 'Not covered')" "$(count 'Timed out')" "$(percent 'Test efficacy')" "$(percent 'Mutator coverage')" "$secs"
done
echo "mutants by place: $OUT/<package>.txt (grep LIVED)"
