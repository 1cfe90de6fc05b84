#!/usr/bin/env python3
"""Writes store_fuzz's seed corpus (worker/testdata/fuzz/store/): byte 0 says how far the harness
takes the connection (bit 0 authenticated, bit 1 joined as rank 1), then frames as store.h
describes them (4-byte big-endian length, opcode, payload), good and bad.

    python3 hack/store_fuzz_seeds.py
"""
import os
import struct

SEEDS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "worker", "testdata",
                     "fuzz", "store")


def frame(op, payload=b""):
    return struct.pack(">I", 1 + len(payload)) + op + payload


def key(k):
    return struct.pack(">H", len(k)) + k


def value(v):
    return struct.pack(">I", len(v)) + v


def add(k, delta):
    return frame(b"D", key(k) + struct.pack(">q", delta))


JOINED, AUTHED, NONE = b"\x03", b"\x01", b"\x00"
SEEDS_ = {
    "ops": JOINED + frame(b"S", key(b"a") + value(b"1")) + frame(b"G", key(b"a")) +
    frame(b"W", key(b"a")) + add(b"n", 3) + add(b"n", -1) + frame(b"G", key(b"none")) +
    frame(b"X") + frame(b"B"),
    "wait-pending": JOINED + frame(b"W", key(b"never")),
    "wait-cancel": JOINED + frame(b"W", key(b"never")) + frame(b"X") + frame(b"G", key(b"x")),
    "add-to-text": JOINED + frame(b"S", key(b"t"), ) + frame(b"S", key(b"t") + value(b"12ab")) +
    add(b"t", 1),
    "add-overflow": JOINED + frame(b"S", key(b"m") + value(b"9223372036854775807")) +
    add(b"m", 1) + add(b"m", -2),
    "bad-set": JOINED + frame(b"S", key(b"a") + struct.pack(">I", 99) + b"short"),
    "bad-key": JOINED + frame(b"G", struct.pack(">H", 300) + b"k"),
    "unknown-op": JOINED + frame(b"Q", key(b"a")),
    "empty-frame": JOINED + struct.pack(">I", 0),
    "huge-frame": JOINED + struct.pack(">I", 0x7fffffff) + b"S",
    "hello-twice": AUTHED + frame(b"H", struct.pack(">iii", 1, 2, 1) + key(b"fuzz-config")) +
    frame(b"H", struct.pack(">iii", 0, 2, 1) + key(b"fuzz-config")),
    "hello-wrong-world": AUTHED + frame(b"H", struct.pack(">iii", 1, 3, 1) + key(b"fuzz-config")),
    "hello-wrong-nproc": AUTHED + frame(b"H", struct.pack(">iii", 1, 2, 2) + key(b"fuzz-config")),
    "hello-wrong-hash": AUTHED + frame(b"H", struct.pack(">iii", 1, 2, 1) + key(b"other")),
    "hello-bad-rank": AUTHED + frame(b"H", struct.pack(">iii", -1, 2, 1) + key(b"fuzz-config")),
    "hello-old-format": AUTHED + frame(b"H", struct.pack(">ii", 1, 2) + key(b"fuzz-config")),
    "set-before-hello": AUTHED + frame(b"S", key(b"a") + value(b"1")),
    "auth-wrong-mac": NONE + frame(b"A", bytes(64)),
    "auth-short": NONE + frame(b"A", bytes(10)),
    "preauth-big": NONE + struct.pack(">I", 200) + b"A" * 200,
    "preauth-set": NONE + frame(b"S", key(b"a") + value(b"1")),
}


def main():
    os.makedirs(SEEDS, exist_ok=True)
    for name, blob in SEEDS_.items():
        with open(os.path.join(SEEDS, name), "wb") as f:
            f.write(blob)
    print("%d seeds in %s" % (len(SEEDS_), os.path.normpath(SEEDS)))


if __name__ == "__main__":
    main()
