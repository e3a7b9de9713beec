#!/bin/bash
# Kaldi-style scheduler (after steps/nnet/train_scheduler.sh): one trainer call
# per epoch, cross-validation after each, newbob learning-rate halving, and
# rejection of epochs that make the held-out loss worse. DIR ends with
# final.npz and, in steps/nnet/train.sh's layout, final.nnet,
# final.feature_transform and ali_train_pdf.counts.
#
#   bin/train_scheduler.sh [--np 4] [--algo bmuf] [--lr 0.002] [--max-iters 20] \
#       [--start-halving-impr 0.01] [--end-halving-impr 0.001] [--halving-factor 0.5] \
#       DIR [trainer options, e.g. --feats scp:feats.scp --targets ali.ark \
#            --cv-feats scp:cv.scp --cv-targets cv_ali.ark]
set -euo pipefail
prog=$(basename "$0")
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

np=4; algo=bmuf; lr=0.002; max_iters=20; min_iters=0
start_halving_impr=0.01; end_halving_impr=0.001; halving_factor=0.5
while [[ $# -gt 0 && "$1" == --* ]]; do
  need_value "$1" $#
  case "$1" in
    --np) np=$2;; --algo) algo=$2;; --lr) lr=$2;; --max-iters) max_iters=$2;;
    --min-iters) min_iters=$2;;
    --start-halving-impr) start_halving_impr=$2;; --end-halving-impr) end_halving_impr=$2;;
    --halving-factor) halving_factor=$2;;
    *) die "unknown option $1";;
  esac
  shift 2
done
[[ $# -ge 1 ]] || { echo "usage: $0 [options] DIR [trainer options]" >&2; exit 2; }
count --np "$np" 1; count --max-iters "$max_iters" 1; count --min-iters "$min_iters" 0
dir=$1; shift
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
py="${PSGD_PYTHON:-$here/.venv/bin/python}"
mpirun="${PSGD_MPIRUN:-$(dirname "$py")/mpirun}"
mkdir -p "$dir/log" "$dir/nnet"

# newbob is psgd's own (psgd/train/newbob.py), its state kept between calls;
# the first call checks the rates and starts afresh, before any training
newbob() { "$py" -m psgd.train.newbob "$dir/newbob.json" "$@"; }
newbob --lr "$lr" --start-halving-impr "$start_halving_impr" \
       --end-halving-impr "$end_halving_impr" --halving-factor "$halving_factor" \
  || exit $?

# run LOG WHAT [trainer options]: a trainer call; its failure ends the script
# with the trainer's reason
run() {
  local log=$1 what=$2 status=0; shift 2
  "$mpirun" -np "$np" "$py" -m psgd.worker --algo "$algo" "$@" > "$log" 2>&1 || status=$?
  [[ $status == 0 ]] || { report_failure "$status" "$log" "$what"; exit "$status"; }
}
loss_of() {
  local loss
  loss=$(awk '/AvgLoss:/{ loss=$4 } END{ print loss }' "$1")
  [[ -n $loss ]] || die "no AvgLoss line in $1: the cross-validation reported no loss"
  echo "$loss"
}
acc_of() { awk '/FRAME_ACCURACY/{ acc=$3; sub(/%/,"",acc); } END{print acc}' "$1"; }

# the initial model (Kaldi's nnet-initialize): zero epochs writes it
best="$dir/nnet/init.npz"
run "$dir/log/init.log" "the initial model" --epochs 0 --out "$best" "$@"
run "$dir/log/prerun.cv.log" "the pre-run cross-validation" --cross-validate --init "$best" "$@"
loss=$(loss_of "$dir/log/prerun.cv.log")
echo "CROSSVAL PRERUN AVG.LOSS $loss, ACC $(acc_of "$dir/log/prerun.cv.log")%"
newbob "$loss" > /dev/null

for iter in $(seq -w "$max_iters"); do
  cand="$dir/nnet/iter${iter}.npz"
  log="$dir/log/iter${iter}"
  run "$log.tr.log" "iteration $iter's training" --epochs 1 --lr "$lr" --init "$best" \
      --out "$cand" --seed "$((777 + 10#$iter))" "$@"
  run "$log.cv.log" "iteration $iter's cross-validation" --cross-validate --init "$cand" "$@"
  loss_new=$(loss_of "$log.cv.log")
  line="ITERATION $iter: lr $lr, CROSSVAL AVG.LOSS $loss_new, ACC $(acc_of "$log.cv.log")%"
  step=$(newbob "$loss_new")          # a failure here stops the script (set -e)
  read -r verdict lr done <<< "$step"
  [[ $verdict == accepted ]] && best=$cand
  echo "$line, nnet $verdict"
  if [[ $done == 1 && $((10#$iter)) -gt $min_iters ]]; then
    echo "finished, too small relative improvement"; break
  fi
done
cp "$best" "$dir/final.npz"
echo "final model: $dir/final.npz"
# steps/nnet/train.sh's outputs for nnet-forward / decode.sh: final.nnet,
# final.feature_transform, ali_train_pdf.counts (models with an nnet1 form)
if "$py" -m psgd.kaldi convert "$dir/final.npz" "$dir/final.nnet"; then
  echo "final nnet1 model: $dir/final.nnet, $dir/final.feature_transform, $dir/ali_train_pdf.counts"
fi
