#!/usr/bin/env python3
"""Reads strata's TensorBoard event files with TensorBoard's own reader (the `tensorboard`
PyPI package's EventAccumulator), an implementation independent of strata's, and checks
them against the CsvLogger file of the same run: every epoch's loss and accuracy, training
and validation, must match to float precision, and the monitoring scalars must be there.
Prints the scalar tags it found and "tensorboard ok" on success.

    check_tensorboard.py monitoring/logs monitoring/history.csv
(the monitoring example writes both; `pip install tensorboard` first)
"""
import csv
import math
import sys

from tensorboard.backend.event_processing.event_accumulator import EventAccumulator


def scalars(directory):
    acc = EventAccumulator(directory, size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def main():
    logs, history = sys.argv[1], sys.argv[2]
    train, validation = scalars(logs + "/train"), scalars(logs + "/validation")
    with open(history) as f:
        rows = list(csv.DictReader(f))
    problems = []
    for row in rows:
        epoch = int(row["epoch"])
        for tags, column, tag in ((train, "loss", "epoch_loss"), (train, "accuracy", "epoch_accuracy"),
                                  (validation, "val_loss", "epoch_loss"), (validation, "val_accuracy", "epoch_accuracy")):
            if not row.get(column):
                continue
            found = dict(tags.get(tag, []))
            if epoch not in found:
                problems.append(f"{tag} of epoch {epoch} missing")
            elif not math.isclose(found[epoch], float(row[column]), rel_tol=1e-6):
                problems.append(f"{tag} of epoch {epoch}: {found[epoch]} in the event file, {row[column]} in the CSV")
    for tag in ("epoch_learning_rate", "epoch_step_time_ms", "epoch_peak_rss_mb"):
        if len(train.get(tag, [])) != len(rows):
            problems.append(f"{tag}: {len(train.get(tag, []))} values for {len(rows)} epochs")
    print("train scalars:", ", ".join(f"{t} ({len(v)})" for t, v in sorted(train.items())))
    print("validation scalars:", ", ".join(f"{t} ({len(v)})" for t, v in sorted(validation.items())))
    if problems:
        print("problems:\n  " + "\n  ".join(problems))
        return 1
    print(f"tensorboard ok: {len(rows)} epochs match the CSV")
    return 0


if __name__ == "__main__":
    sys.exit(main())
