#!/usr/bin/env python3
"""Writes the seed snapshots of the snapshot fuzz target into
tests/fuzz/corpus/snapshot/: small valid files (the layout of
src/session/snapshot.h, the tier sizes of src/cache/sinkcache.c) for a
float, an int8 and an int4-with-quantized-sinks cache, cache bytes random."""
import hashlib, os, random, struct, sys

def group_size(comp):
    if comp <= 0:
        return 0
    if comp <= 32:
        return comp
    for gs in range(32, 15, -1):
        if comp % gs == 0:
            return gs
    return 32

def snapshot(n_layers, n_kv, d, dtype, sinks, window, quant, bits, protect, hot_cfg, n):
    """n tokens through a sliding window cache (the last pending)."""
    e = 4 if dtype == 0 else 2
    hot = hot_cfg if quant else window
    hot = max(hot, 1)
    g = group_size(window - hot) if quant else 0
    code_row = d if not quant or bits == 8 else d // 2
    sink_quant = quant and not protect
    seen = n - 1
    n_sink = min(sinks, seen)
    win = seen - n_sink
    evicted = max(0, win - window)
    win -= evicted
    n_hot = min(win, hot)
    rest = win - n_hot
    n_stage = rest % g if g else 0
    n_groups = (rest - n_stage) // g if g else 0
    moved = seen - n_sink - n_hot if seen > n_sink + n_hot else 0
    # evicted tokens were quantized first only when groups exist; keep the
    # file simple: no evictions in the seeds
    assert evicted == 0
    sink_row = code_row if sink_quant else d * e
    layer = 2 * n_kv * n_sink * sink_row
    if sink_quant:
        layer += 2 * n_kv * n_sink * 8
    layer += n_groups * (2 * n_kv * g * code_row + n_kv * 2 * d * 4 + n_kv * g * 8)
    layer += 2 * n_kv * (n_stage + n_hot) * d * e
    kv = bytes(random.getrandbits(8) for _ in range(layer * n_layers))
    hist = list(range(min(n, window + 2)))
    head = b"SINKDSES" + struct.pack("<II", 1, 0) + hashlib.sha256(b"model").digest()
    head += b"llama".ljust(32, b"\0") + struct.pack("<I", 300)
    head += struct.pack("<iiiid", n_layers, n_kv, d, d, 10000.0)
    head += bytes([0, 0, int(quant), bits, int(protect), 0, dtype, 0])
    head += struct.pack("<iiii", sinks, window, 0, hot_cfg)
    head += b"0123abcd".ljust(36, b"\0") + b"key:seed".ljust(64, b"\0")
    head += struct.pack("<QII", n, 1, len(hist))
    head += struct.pack("<QQQiiiiii", seen, 0, moved, n_sink, n_groups, 0, n_stage, n_hot, 0)
    head += struct.pack("<Q", len(kv))
    assert len(head) == 304, len(head)
    body = head + b"".join(struct.pack("<i", t) for t in hist) + kv
    return body + hashlib.sha256(body).digest()

def main():
    random.seed(1)
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "snapshot")
    os.makedirs(out, exist_ok=True)
    seeds = {
        "float-f32": snapshot(1, 1, 4, 0, 2, 8, False, 8, True, 0, 7),
        "float-f16": snapshot(2, 2, 8, 1, 2, 16, False, 8, True, 0, 12),
        "int8": snapshot(1, 2, 8, 1, 2, 40, True, 8, True, 4, 40),
        "int4-sinks": snapshot(1, 1, 8, 2, 2, 40, True, 4, False, 4, 41),
        "sinks-only": snapshot(1, 1, 4, 0, 4, 8, False, 8, True, 0, 3),
    }
    for name, b in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b)

if __name__ == "__main__":
    sys.exit(main())
