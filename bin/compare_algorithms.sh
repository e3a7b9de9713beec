#!/bin/bash
# Train every algorithm on the same data and print one comparison table.
#
#   bin/compare_algorithms.sh [NP] [trainer options...]     (default NP 5)
set -euo pipefail
prog=$(basename "$0")
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
np=5
if [[ $# -gt 0 && $1 != -* ]]; then np=$1; shift; fi
count NP "$np" 2 "easgd, asgd and masgd need a server and a worker"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PSGD_PYTHON:-$here/.venv/bin/python}"
mpirun="${PSGD_MPIRUN:-$(dirname "$py")/mpirun}"
out=$(mktemp -d "${TMPDIR:-/tmp}/psgd-compare.XXXXXX")
failed=()
for algo in bsp bmuf sod syncgrad easgd asgd masgd; do
  start=$(date +%s.%N)
  status=0
  "$mpirun" -np "$np" "$py" -m psgd.worker --algo "$algo" --quiet \
      --metrics "$out/$algo.jsonl" "$@" > "$out/$algo.log" 2>&1 || status=$?
  if [[ $status != 0 ]]; then        # said now; the comparison goes on
    report_failure "$status" "$out/$algo.log" "$algo"; failed+=("$algo")
  elif [[ ! -s $out/$algo.jsonl ]]; then
    echo "$prog: error: $algo wrote no metrics (log $out/$algo.log)" >&2; failed+=("$algo")
  fi
  echo "$start $(date +%s.%N)" > "$out/$algo.time"
done
"$py" - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
print("%-9s %6s %11s %10s %10s %9s" % ("algo", "epochs", "train_loss", "test_loss",
                                      "accuracy", "wall_s"))
for algo in ("bsp", "bmuf", "sod", "syncgrad", "easgd", "asgd", "masgd"):
    path = os.path.join(out, algo + ".jsonl")
    rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
    if not rows:
        print("%-9s %6s" % (algo, "failed"))
        continue
    r = rows[-1]
    start, end = map(float, open(os.path.join(out, algo + ".time")).read().split())
    print("%-9s %6d %11.4f %10.4f %9.2f%% %9.1f" % (algo, r["epoch"], r["train_loss"] or 0,
          r["test_loss"] or 0, 100 * (r["test_accuracy"] or 0), end - start))
PY
[[ ${#failed[@]} == 0 ]] || die "${#failed[@]} of 7 algorithms failed: ${failed[*]}"
