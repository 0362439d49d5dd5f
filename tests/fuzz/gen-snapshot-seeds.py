#!/usr/bin/env python3
"""Writes the seed snapshots of the snapshot fuzz target into
tests/fuzz/corpus/snapshot/: small valid files (the layout of
src/session/snapshot.h, the tier sizes of src/cache/sinkcache.c, the image
of src/cache/kvimage.h) for a float, an int8 and an int4-with-quantized-sinks
cache, with random finite K/V values, codes and quantization parameters; and
hostile-* files, the int8 one crafted as an attacker would (resealed, so
that only the field checks refuse them): counters that wrap after one
append, RoPE parameters that are not the model's, non-finite K/V values."""
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

def fp_values(count, dtype):
    """count random finite K/V elements of dtype (0 f32, 1 f16, 2 bf16)."""
    vals = [random.uniform(-2.0, 2.0) for _ in range(count)]
    if dtype == 0:
        return struct.pack("<%df" % count, *vals)
    if dtype == 1:
        return struct.pack("<%de" % count, *vals)
    return b"".join(struct.pack("<f", v)[2:] for v in vals)  # bf16: the high half

def codes(count):
    return bytes(random.getrandbits(8) for _ in range(count))

def params(pairs):
    """pairs (scale, min) f32: what quantizing values in [-2, 2] gives."""
    return b"".join(struct.pack("<ff", random.uniform(0.0, 4.0 / 255), random.uniform(-2.0, 0.0))
                    for _ in range(pairs))

def layer_image(n_kv, d, dtype, n_sink, sink_quant, code_row, g, n_groups, n_fp):
    """One layer of a cache image, tier by tier as src/cache/kvimage.h lays it out."""
    out = b""
    if sink_quant:
        out += codes(2 * n_kv * n_sink * code_row) + params(2 * n_kv * n_sink)
    else:
        out += fp_values(2 * n_kv * n_sink * d, dtype)
    for _ in range(n_groups):
        # key and value codes; per kv head a row of d key scales, then of d
        # mins; then a (scale, min) per value row
        out += codes(2 * n_kv * g * code_row)
        for _ in range(n_kv):
            out += b"".join(struct.pack("<f", random.uniform(0.0, 4.0 / 255)) for _ in range(d))
            out += b"".join(struct.pack("<f", random.uniform(-2.0, 0.0)) for _ in range(d))
        out += params(n_kv * g)
    return out + fp_values(2 * n_kv * n_fp * d, dtype)

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
    kv = b"".join(layer_image(n_kv, d, dtype, n_sink, sink_quant, code_row, g, n_groups,
                              n_stage + n_hot) for _ in range(n_layers))
    assert len(kv) == layer * n_layers
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

def reseal(b):
    return bytes(b[:-32]) + hashlib.sha256(bytes(b[:-32])).digest()

def crafted(base):
    """Hostile variants of a valid snapshot (f16 sinks in full precision, one
    quantized group): each passes the checks the reader had before it
    compared RoPE with the model, bounded the counters and scanned the K/V
    values."""
    assert base[112] == 1 and base[114] == 1 and base[110] == 1
    kv = 304 + 4 * struct.unpack_from("<I", base, 244)[0]  # layer 0's first sink key
    n_sink = struct.unpack_from("<i", base, 272)[0]
    n_kv, d = struct.unpack_from("<ii", base, 88)
    bits = base[111]
    code_row = d if bits == 8 else d // 2
    grp = kv + 2 * n_kv * n_sink * d * 2  # the first group, after the f16 sinks
    g = 18  # the int8 seed's group size (a divisor of its 36 compressed slots)
    vp = grp + 2 * n_kv * g * code_row + n_kv * 2 * d * 4  # its value scales

    def edit(f):
        b = bytearray(base)
        f(b)
        return reseal(b)

    def n_seen(b):  # wraps after one append
        b[248:256] = struct.pack("<Q", 2**64 - 2)
        b[232:240] = struct.pack("<Q", 2**64 - 1)
    return {
        "hostile-n-seen": edit(n_seen),
        "hostile-rope-dim-0": edit(lambda b: b.__setitem__(slice(96, 100), bytes(4))),
        "hostile-rope-theta": edit(lambda b: b.__setitem__(slice(100, 108),
                                                           struct.pack("<d", 500000.0))),
        "hostile-rope-neox": edit(lambda b: b.__setitem__(108, 1)),
        "hostile-nan-k": edit(lambda b: b.__setitem__(slice(kv, kv + 2), b"\x00\x7e")),
        # finite, but code 255 times it is not
        "hostile-scale-overflow": edit(lambda b: b.__setitem__(slice(vp, vp + 4),
                                                               struct.pack("<f", 3e38))),
    }

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
    seeds.update(crafted(seeds["int8"]))
    for name, b in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(b)

if __name__ == "__main__":
    sys.exit(main())
