#!/usr/bin/env bash
# The measured-cost loop on examples/mlp's uneven model (-wide N: the first
# and last blocks some 2N times a plain block's work; -wide-wait D: each of
# their F and I calls also waits D, as for an accelerator), BENCHMARKS.md "Measured
# costs":
#   1. run dualpipev, auto's choice at even costs, with -trace;
#   2. ppgen tune fits a model (one layer per stage) to the measured timeline;
#   3. ppgen gen -schedule auto -model regenerates: the script checks that
#      the program is the committed -schedule tuned (examples/mlp/tuned);
#   4. both schedules are timed alternately, ROUNDS times, STEPS steps each
#      (mlp -timing: the median iteration after the first step), under nice;
#      it prints each schedule's median and the median of the per-round
#      ratios dualpipev / tuned.
#
#   scripts/tune-loop.sh [ROUNDS [STEPS [MLP FLAGS...]]]   # defaults 10 20 -wide 32
#   scripts/tune-loop.sh 10 20 -wide 4 -wide-wait 1ms
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-10} steps=${2:-20}
shift $(($# < 2 ? $# : 2))
model=("$@")
[ ${#model[@]} -gt 0 ] || model=(-wide 32)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
nice -n 19 go build -o "$tmp/mlp" ./examples/mlp
nice -n 19 go build -o "$tmp/ppgen" ./cmd/ppgen

"$tmp/mlp" -schedule dualpipev "${model[@]}" -steps 3 -trace "$tmp/run.json" >/dev/null
"$tmp/ppgen" tune -trace "$tmp/run.json" -o "$tmp/model.json" -stages 8
"$tmp/ppgen" gen -schedule auto -model "$tmp/model.json" -ranks 4 -micro 8 -table -package tuned -o "$tmp/tuned_gen.go"
chosen=$(sed -n 's/^\tSchedule: *"\(.*\)",$/\1/p' "$tmp/tuned_gen.go")
"$tmp/ppgen" sim -compare "dualpipev,$chosen" -ranks 4 -micro 8 -model "$tmp/model.json" | sed -n '2,4p'
# The header's second line records the invocation (the model's path): skip it.
if cmp -s <(tail -n +3 "$tmp/tuned_gen.go") <(tail -n +3 examples/mlp/tuned/tuned_gen.go); then
	echo "regenerated: the committed -schedule tuned (examples/mlp/tuned/tuned_gen.go)"
	echo "load average before timing: $(cut -d' ' -f1-3 /proc/loadavg)"
else
	echo "regenerated: a program other than the committed -schedule tuned (the fit of this machine's run differs); timing the committed one" >&2
fi

ms() { nice -n 19 "$tmp/mlp" -schedule "$1" "${model[@]}" -steps "$steps" -timing | sed -n 's/^iteration: median \([0-9.]*\) ms.*/\1/p'; }
median() { sort -g | awk '{v[NR]=$1} END {print (NR%2 ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2)}'; }
: >"$tmp/a" && : >"$tmp/b" && : >"$tmp/r"
for i in $(seq "$rounds"); do
	a=$(ms dualpipev) b=$(ms tuned)
	echo "$a" >>"$tmp/a"
	echo "$b" >>"$tmp/b"
	awk -v a="$a" -v b="$b" 'BEGIN {print a / b}' >>"$tmp/r"
	echo "round $i: dualpipev $a ms, tuned $b ms"
done
echo "median iteration: dualpipev $(median <"$tmp/a") ms, tuned $(median <"$tmp/b") ms; median ratio dualpipev/tuned $(median <"$tmp/r") over $rounds rounds (${model[*]}, $steps steps each; load average $(cut -d' ' -f1-3 /proc/loadavg))"
