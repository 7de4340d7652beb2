#!/usr/bin/env bash
# The examples refuse a bad command line (examples/command_line.hpp): exit code 2, a line that
# names what was wrong and the flags they take, and no data read (their first line, which
# follows the data's loading, is absent).
#   command_line_test.sh CUSTOM_LOOP RESUME [BERT_FINETUNE] [FASHION_MNIST]  (an empty one is skipped)
set -u
custom_loop=$1 resume=$2 bert=${3:-} fashion=${4:-}
failures=0
refuses() {  # refuses EXPECTED PROGRAM ARGS...
  local expected=$1
  shift
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [[ $rc -ne 2 || $out != *"$expected"* || $out == *test_accuracy* || $out == *Fashion-MNIST* ]]; then
    echo "FAILED: $* gave exit code $rc and: $out"
    failures=$((failures + 1))
  fi
}
refuses "error: --epochs: 'abc' is not a whole number; use --epochs N" "$custom_loop" --epochs abc
refuses "error: --epochs: '3x' is not a whole number" "$custom_loop" --epochs 3x
refuses "error: --epochs: '' is not a whole number" "$custom_loop" --epochs ''
refuses "error: --epochs has no value; use --epochs N" "$custom_loop" --epochs
refuses "error: unknown flag --epoch; use --epochs N" "$custom_loop" --epoch 3
refuses "error: --interrupt-at-step: '99999999999999999999' is not a whole number in range; use --dir DIR" \
  "$resume" --interrupt-at-step 99999999999999999999
if [[ -n $bert ]]; then
  refuses "error: --lr: '1e-3x' is not a number; use --epochs N" "$bert" --lr 1e-3x
  refuses "error: --batch-size: '-' is not a whole number" "$bert" --batch-size -
fi
if [[ -n $fashion ]]; then
  refuses "error: --batch-size: '12.5' is not a whole number; use --epochs N --batch-size B --precision" \
    "$fashion" --batch-size 12.5
  refuses "error: --precision fp8 is not one of fp32, bf16, fp16" "$fashion" --precision fp8
fi
if ((failures > 0)); then
  echo "$failures bad command lines were not refused"
  exit 1
fi
echo "every bad command line refused"
