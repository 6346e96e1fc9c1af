#!/usr/bin/env python3
"""Reads back the TensorBoard event files in DIR with the `tensorboard` package (used by
tensorboard_writer_test.cpp, so the check is independent of brrr's own encoder).

Prints one line per item, tab-separated:
  records <file> <count>        every record's length and data CRCs verified (DataLossError -> exit 1)
  file_version <version>        as seen by EventAccumulator
  scalar <tag> <step> <value>   every scalar, value as float repr
  text <tag> <step> <plugin> <text>  every text summary, its plugin's name and the text's repr
"""
import pathlib
import sys

from tensorboard.backend.event_processing import event_accumulator
from tensorboard.compat.tensorflow_stub import errors, pywrap_tensorflow
from tensorboard.util import tensor_util


def count_records(path: pathlib.Path) -> int:
    reader = pywrap_tensorflow.PyRecordReader_New(str(path))
    count = 0
    while True:
        try:
            reader.GetNext()  # raises DataLossError on a CRC mismatch or a truncated record
        except errors.OutOfRangeError:
            return count
        count += 1


def main() -> int:
    run_dir = pathlib.Path(sys.argv[1])
    files = sorted(run_dir.glob("events.out.tfevents.*"))
    if not files:
        print(f"no event files in {run_dir}", file=sys.stderr)
        return 1
    for path in files:
        print(f"records\t{path.name}\t{count_records(path)}")
    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    print(f"file_version\t{acc.file_version}")
    for tag in sorted(acc.Tags()["scalars"]):
        for event in acc.Scalars(tag):
            print(f"scalar\t{tag}\t{event.step}\t{event.value!r}")
    for tag in sorted(acc.Tags()["tensors"]):
        plugin = acc.SummaryMetadata(tag).plugin_data.plugin_name
        for event in acc.Tensors(tag):
            text = tensor_util.make_ndarray(event.tensor_proto).item().decode()
            print(f"text\t{tag}\t{event.step}\t{plugin}\t{text!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
