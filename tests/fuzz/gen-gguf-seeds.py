#!/usr/bin/env python3
"""Writes the small GGUF seeds of the gguf fuzz target (stdlib only):
kv-types.gguf (every metadata value type, tensors of several element types),
bpe-vocab.gguf (a byte-level BPE vocabulary with merges and special tokens)
and spm-vocab.gguf (a SentencePiece vocabulary with byte fallback).  The
tiny models come from sinkd-mkmodel (see run.sh's comment).  Usage:
gen-gguf-seeds.py OUT_DIR"""
import struct
import sys


def s(text):
    b = text.encode()
    return struct.pack('<Q', len(b)) + b


def kv(key, vtype, payload):
    return s(key) + struct.pack('<I', vtype) + payload


def arr(etype, items):
    return struct.pack('<IQ', etype, len(items)) + b''.join(items)


def gguf(kvs, tensors, align=32):
    """tensors: (name, dims, ggml type, data bytes)."""
    out = b'GGUF' + struct.pack('<IQQ', 3, len(tensors), len(kvs)) + b''.join(kvs)
    offset, datas = 0, []
    for name, dims, ttype, data in tensors:
        out += s(name) + struct.pack('<I', len(dims))
        out += b''.join(struct.pack('<Q', d) for d in dims)
        out += struct.pack('<IQ', ttype, offset)
        pad = (-len(data)) % align
        datas.append(data + b'\0' * pad)
        offset += len(data) + pad
    out += b'\0' * ((-len(out)) % align)
    return out + b''.join(datas)


def kv_types():
    kvs = [
        kv('general.architecture', 8, s('llama')),
        kv('general.alignment', 4, struct.pack('<I', 32)),
        kv('t.u8', 0, struct.pack('<B', 200)), kv('t.i8', 1, struct.pack('<b', -3)),
        kv('t.u16', 2, struct.pack('<H', 60000)), kv('t.i16', 3, struct.pack('<h', -300)),
        kv('t.u32', 4, struct.pack('<I', 4000000000)), kv('t.i32', 5, struct.pack('<i', -7)),
        kv('t.f32', 6, struct.pack('<f', 1.5)), kv('t.bool', 7, struct.pack('<B', 1)),
        kv('t.u64', 10, struct.pack('<Q', 2**63)), kv('t.i64', 11, struct.pack('<q', -2**40)),
        kv('t.f64', 12, struct.pack('<d', 0.25)),
        kv('t.str', 8, s('h\u00e9llo')),
        kv('t.arr_i32', 9, arr(5, [struct.pack('<i', v) for v in (1, -2, 3)])),
        kv('t.arr_f32', 9, arr(6, [struct.pack('<f', v) for v in (0.5, -1.0)])),
        kv('t.arr_str', 9, arr(8, [s('a'), s(''), s('\u2581b')])),
        kv('t.arr_empty', 9, arr(4, [])),
    ]
    f32 = struct.pack('<8f', *range(8))
    f16 = struct.pack('<8e', *range(8))
    q8 = struct.pack('<e', 0.5) + bytes(range(32))
    tensors = [('a.f32', [4, 2], 0, f32), ('b.f16', [8], 1, f16), ('c.q8_0', [32], 8, q8)]
    return gguf(kvs, tensors)


def bytes_to_unicode():
    bs = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs)))


def bpe_vocab():
    b2u = bytes_to_unicode()
    tokens = [b2u[b] for b in range(256)]
    merges = ['\u0120 t', 'h e', '\u0120t he', 'i n', '\u0120 a', 'e r', 'o n']
    for m in merges:
        tokens.append(m.replace(' ', ''))
    tokens += ['<|endoftext|>', '<|im_start|>', '<|im_end|>']
    types = [1] * (len(tokens) - 3) + [3, 3, 3]
    kvs = [
        kv('general.architecture', 8, s('llama')),
        kv('tokenizer.ggml.model', 8, s('gpt2')),
        kv('tokenizer.ggml.pre', 8, s('gpt-2')),
        kv('tokenizer.ggml.tokens', 9, arr(8, [s(t) for t in tokens])),
        kv('tokenizer.ggml.token_type', 9, arr(5, [struct.pack('<i', t) for t in types])),
        kv('tokenizer.ggml.merges', 9, arr(8, [s(m) for m in merges])),
        kv('tokenizer.ggml.bos_token_id', 4, struct.pack('<I', len(tokens) - 3)),
        kv('tokenizer.ggml.eos_token_id', 4, struct.pack('<I', len(tokens) - 3)),
        kv('tokenizer.chat_template', 8, s('{% for m in messages %}{{m.content}}{% endfor %}')),
    ]
    return gguf(kvs, [])


def spm_vocab():
    tokens = ['<unk>', '<s>', '</s>'] + ['<0x%02X>' % b for b in range(256)]
    pieces = ['\u2581', 'e', 't', 'a', '\u2581t', 'he', '\u2581the', 'o', 'n', '\u2581a']
    tokens += pieces
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0, 0.0, 0.0] + [0.0] * 256 + [-float(i) for i in range(len(pieces))]
    kvs = [
        kv('general.architecture', 8, s('llama')),
        kv('tokenizer.ggml.model', 8, s('llama')),
        kv('tokenizer.ggml.tokens', 9, arr(8, [s(t) for t in tokens])),
        kv('tokenizer.ggml.scores', 9, arr(6, [struct.pack('<f', v) for v in scores])),
        kv('tokenizer.ggml.token_type', 9, arr(5, [struct.pack('<i', t) for t in types])),
        kv('tokenizer.ggml.add_space_prefix', 7, struct.pack('<B', 1)),
    ]
    return gguf(kvs, [])


def main():
    out = sys.argv[1]
    for name, data in (('kv-types.gguf', kv_types()), ('bpe-vocab.gguf', bpe_vocab()),
                       ('spm-vocab.gguf', spm_vocab())):
        with open('%s/%s' % (out, name), 'wb') as f:
            f.write(data)


if __name__ == '__main__':
    main()
