# What the bin/ scripts share (sourced, not run): one-line errors, checked
# option values, and a failed trainer call reported with its reason, so that
# a script never ends silently with the cause buried in a log file.
# Callers set `prog` (their name in error lines) and run under set -euo pipefail.

die() { echo "$prog: error: $*" >&2; exit 2; }

# need_value FLAG ARGC: FLAG must be followed by a value
need_value() { [[ $2 -ge 2 ]] || die "$1 needs a value"; }

# count FLAG VALUE MIN [WHY]: VALUE must be a whole number >= MIN
count() {
  [[ $2 =~ ^[0-9]+$ ]] && (( 10#$2 >= $3 )) \
    || die "$1 must be a whole number >= $3${4:+ ($4)}, got '$2'"
}

# report_failure STATUS LOG WHAT: the trainer's error line (every rank
# prints it: shown once), or the end of its log when it has none
report_failure() {
  local status=$1 log=$2 what=$3 reason
  reason=$(grep -E ': error: | failed: ' "$log" | awk '!seen[$0]++' | head -n 3 || true)
  if [[ -n $reason ]]; then
    echo "$prog: error: $what failed (exit status $status; log $log): ${reason//$'\n'/; }" >&2
  else
    echo "$prog: error: $what failed (exit status $status); the end of $log:" >&2
    tail -n 10 "$log" | sed 's/^/  /' >&2
  fi
}
