#!/usr/bin/env bash
# MultiWorkerMirrored's fault paths under mpirun (CTest multi_worker.faults):
#   1. a rank that stalls (SIGSTOP) is named in a CommError on the chief within the timeout;
#   2. a rank that dies (SIGKILL) ends the job with an error, not a hang;
#   3. killed and run again with BackupAndRestore, the job ends with weights identical, byte
#      for byte, to an uninterrupted run;
#   4. resumed on another number of workers (3 killed, 2 restarted, and the reverse), it
#      continues from the same global step and position in the epoch, and ends within float
#      rounding of the uninterrupted run (the sums are grouped differently);
#   5. workers that restore different backups (no shared filesystem) all stop with one error.
# Usage: multi_worker_faults.sh MPIEXEC PROGRAM WORKDIR
set -uo pipefail
mpiexec="$1" program="$2" work="$3"
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 1

fail() {
  echo "FAIL: $*"
  exit 1
}
# Every job is bounded: a hang shows as exit code 124.
job() {
  local np="$1" log="$2"
  shift 2
  timeout 120 "$mpiexec" --allow-run-as-root --oversubscribe -np "$np" "$program" "$@" >"$log" 2>&1
}
expect_killed() {  # np log args...: the job must end (not hang) with a failure
  local rc=0
  job "$@" || rc=$?
  [ "$rc" -ne 124 ] || fail "$2: the job hung after a rank was killed"
  [ "$rc" -ne 0 ] || fail "$2: the job succeeded although a rank was killed"
  grep -qi "signal 9\|killed" "$2" || fail "$2: mpirun did not report the killed rank: $(tail -5 "$2")"
}

echo "1. a stalled rank is named within the timeout"
job 2 stall.log stall stall.txt
[ -s stall.txt ] || fail "the chief wrote no result: $(tail -20 stall.log)"
cat stall.txt
grep -q "^CommError after" stall.txt || fail "expected a CommError"
grep -q "never arrived: 1" stall.txt || fail "the CommError does not name rank 1"
waited="$(sed -n 's/^CommError after \([0-9.e+-]*\) s.*/\1/p' stall.txt)"
awk -v w="$waited" 'BEGIN { exit !(w >= 1.9 && w < 10) }' || fail "waited $waited s for a 2 s timeout"

echo "2. a killed rank ends the job"
expect_killed 2 kill.log train kill-backup kill.bin 5
[ ! -e kill.bin ] || fail "a killed job wrote final weights"

echo "3. resume bit for bit"
job 2 reference.log train reference-backup reference.bin || fail "reference run: $(tail -40 reference.log)"
expect_killed 2 killed.log train backup resumed.bin 42
job 2 resumed.log train backup resumed.bin || fail "resumed run: $(tail -40 resumed.log)"
cat resumed.log
grep -q "restored step=40 epoch=1 batch=10 on 2 workers" resumed.log || fail "did not resume from the step-40 backup"
cmp reference.bin resumed.bin || fail "the resumed run's weights differ from the uninterrupted run's"
[ "$(grep -o "final loss=[^;]*" reference.log)" = "$(grep -o "final loss=[^;]*" resumed.log)" ] || fail "the resumed run's history differs"

echo "4. resume on another number of workers"
for counts in "3 2" "2 3"; do
  set -- $counts
  expect_killed "$1" "killed-$1.log" train "backup-$1-$2" "changed-$1-$2.bin" 42
  job "$2" "resumed-$1-$2.log" train "backup-$1-$2" "changed-$1-$2.bin" || fail "resume on $2: $(tail -40 "resumed-$1-$2.log")"
  cat "resumed-$1-$2.log"
  grep -q "restored step=40 epoch=1 batch=10 on $2 workers" "resumed-$1-$2.log" || fail "$1 -> $2 did not resume at step 40"
  "$program" compare "changed-$1-$2.bin" reference.bin 1e-4 || fail "$1 -> $2 workers ended too far from the reference"
done
echo "5. workers that cannot read the chief's backup"
expect_killed 2 killed-private.log train "private-{rank}" private.bin 42
rc=0
job 2 private.log train "private-{rank}" private.bin || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "workers that restored different steps were not stopped (rc $rc)"
# (the two ranks' lines may interleave: count occurrences, not lines)
[ "$(grep -o "process 1 starts at step 0 (epoch 0, batch 0) but the chief starts at step 40" private.log | wc -l)" -eq 2 ] ||
  fail "expected the same ConfigError on both ranks: $(cat private.log)"
echo "all fault paths passed"
