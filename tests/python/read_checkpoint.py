#!/usr/bin/env python3
"""An independent reader of strata checkpoints, using only the standard library (and NumPy
when it is installed): parses the safetensors layout, recomputes strata's checksum, and
compares every tensor and metadata entry with expected.json, which the C++ side computed
from the model's matrices. Then writes from_python.safetensors (weights doubled, step 4)
with its own checksum, for the C++ side to load.

usage: read_checkpoint.py <dir>
"""
import json
import struct
import sys
import zlib
from pathlib import Path

try:
    import numpy
except ImportError:
    numpy = None
try:  # Hugging Face's reference implementation, where installed (pip install safetensors)
    import safetensors.numpy
except ImportError:
    safetensors = None


def canonical(entries, metadata):
    text = ""
    for name, e in sorted(entries.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        shape = "[" + ", ".join(str(d) for d in e["shape"]) + "]"
        begin, end = e["data_offsets"]
        text += f"{name}\t{e['dtype']}\t{shape}\t{begin}\t{end}\n"
    for key in sorted(metadata):
        if key != "checksum":
            text += f"{key}\t{metadata[key]}\n"
    return text.encode()


def checksum(data, entries, metadata):
    return "crc32:%08x" % zlib.crc32(canonical(entries, metadata), zlib.crc32(data))


def read(path):
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    assert n % 8 == 0, f"header length {n} is not padded to 8"
    header = json.loads(raw[8 : 8 + n])
    data = raw[8 + n :]
    metadata = header.pop("__metadata__")
    position = 0
    for name, e in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        begin, end = e["data_offsets"]
        assert begin == position, f"{name}: gap or overlap at {begin}"
        count = 1
        for d in e["shape"]:
            count *= d
        assert e["dtype"] == "F32" and end - begin == 4 * count, f"{name}: size"
        position = end
    assert position == len(data), "data size"
    assert metadata["checksum"] == checksum(data, header, metadata), "checksum"
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        flat = list(struct.unpack("<%df" % ((end - begin) // 4), data[begin:end]))
        if numpy is not None:
            array = numpy.frombuffer(data[begin:end], dtype="<f4").reshape(e["shape"])
            assert array.ravel().tolist() == flat, f"{name}: numpy disagrees"
        tensors[name] = (e["shape"], flat)
    return tensors, metadata


def flatten(nested):
    return [x for item in nested for x in flatten(item)] if isinstance(nested, list) else [nested]


def as_f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def write(path, tensors, metadata):
    entries, data, offset = {}, b"", 0
    for name, (shape, values) in tensors.items():
        blob = struct.pack("<%df" % len(values), *values)
        entries[name] = {"dtype": "F32", "shape": shape, "data_offsets": [offset, offset + len(blob)]}
        data += blob
        offset += len(blob)
    metadata = dict(metadata)
    metadata["checksum"] = checksum(data, entries, metadata)
    header = json.dumps({"__metadata__": metadata, **entries}).encode()
    header += b" " * (-len(header) % 8)
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)


def main():
    directory = Path(sys.argv[1])
    tensors, metadata = read(directory / "ckpt.safetensors")
    expected = json.loads((directory / "expected.json").read_text())
    compared = 0
    for group, prefix in (("weights", ""), ("m", "optimizer/")):
        for name, nested in expected[group].items():
            key = prefix + name + ("/m" if group == "m" else "")
            shape, flat = tensors[key]
            want = [as_f32(x) for x in flatten(nested)]
            assert flat == want, f"{key}: values differ"
            compared += len(flat)
    for key, value in expected["metadata"].items():
        assert metadata[key] == value, f"metadata {key}: {metadata[key]!r} != {value!r}"
    if safetensors is not None:
        reference = safetensors.numpy.load_file(str(directory / "ckpt.safetensors"))
        for name, (shape, flat) in tensors.items():
            assert list(reference[name].shape) == shape and reference[name].ravel().tolist() == flat, name
    print(f"read {len(tensors)} tensors, {compared} values equal, checksum verified, numpy: "
          f"{'yes' if numpy is not None else 'not installed'}, safetensors package: "
          f"{'agrees' if safetensors is not None else 'not installed'}")

    doubled = {}
    for name, (shape, flat) in tensors.items():
        doubled[name] = (shape, [2 * x for x in flat] if not name.startswith("optimizer/") else flat)
    metadata["step"] = "4"
    write(directory / "from_python.safetensors", doubled, metadata)
    print("wrote from_python.safetensors")


if __name__ == "__main__":
    main()
