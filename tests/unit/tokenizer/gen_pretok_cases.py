#!/usr/bin/env python3
"""Generates pretok-cases.json: expected pre-tokenizer splits computed with
Python's re (an independent backtracking engine), the \\p{..} and \\s classes
expanded into explicit code point ranges from unicodedata.  Development
time only:  python3 gen_pretok_cases.py > pretok-cases.json"""
import json
import random
import sys
import unicodedata

WS = [(0x09, 0x0D), (0x20, 0x20), (0x85, 0x85), (0xA0, 0xA0), (0x1680, 0x1680), (0x2000, 0x200A),
      (0x2028, 0x2029), (0x202F, 0x202F), (0x205F, 0x205F), (0x3000, 0x3000)]


def cat_ranges(prefixes):
    out, start = [], None
    for cp in range(0x110000):
        ok = unicodedata.category(chr(cp)).startswith(prefixes)
        if ok and start is None:
            start = cp
        if not ok and start is not None:
            out.append((start, cp - 1))
            start = None
    return out


CATS = {k: cat_ranges(k) for k in ("L", "N", "P", "S", "M", "Lu", "Ll", "Lt", "Lm", "Lo")}


def esc(cp):
    return "\\U%08X" % cp


def ranges_body(rs):
    return "".join(esc(a) if a == b else esc(a) + "-" + esc(b) for a, b in rs)


def translate(pat):
    """\\p{X}, \\s, \\S into explicit classes; $ into \\Z."""
    out, i, inside = [], 0, False
    while i < len(pat):
        c = pat[i]
        if c == "\\" and pat[i + 1] == "p":
            end = pat.index("}", i)
            body = ranges_body(CATS[pat[i + 3:end]])
            out.append(body if inside else "[" + body + "]")
            i = end + 1
            continue
        if c == "\\" and pat[i + 1] in "sS":
            body = ranges_body(WS)
            if pat[i + 1] == "s":
                out.append(body if inside else "[" + body + "]")
            else:
                assert not inside
                out.append("[^" + body + "]")
            i += 2
            continue
        if c == "\\":
            out.append(pat[i:i + 2])
            i += 2
            continue
        if c == "[":
            inside = True
        elif c == "]":
            inside = False
        elif c == "$" and not inside:
            c = "\\Z"
        out.append(c)
        i += 1
    return "".join(out)


GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
LLAMA3 = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|"
          r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2 = LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}")
UPPER = r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]"
LOWER = r"[\p{Ll}\p{Lm}\p{Lo}\p{M}]"
CONTR = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
PRE = {
    "default": [r"[\p{P}\$\+<=>\^~\|]+", GPT2, r"\p{N}+", r"[0-9][0-9][0-9]"],
    "gpt-2": [GPT2],
    "llama-bpe": [LLAMA3],
    "qwen2": [QWEN2],
    "falcon": [r"[\p{P}\$\+<=>\^~\|`]+", GPT2, r"[0-9][0-9][0-9]"],
    "starcoder": [r"\p{N}", GPT2],
    "deepseek-coder": ["[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+", r"\p{N}"],
    "deepseek-v3": [r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
                    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
                    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+"],
    "tekken": [r"[^\r\n\p{L}\p{N}]?" + UPPER + "*" + LOWER + r"+|[^\r\n\p{L}\p{N}]?" + UPPER + "+" + LOWER
               + r"*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "gpt-4o": [r"[^\r\n\p{L}\p{N}]?" + UPPER + "*" + LOWER + "+" + CONTR + r"?|[^\r\n\p{L}\p{N}]?" + UPPER + "+"
               + LOWER + "*" + CONTR + r"?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "seed-coder": [CONTR + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+"],
    "bailingmoe": [r"'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+"],
    "chameleon": ["<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", r"([\t\n]|    |  )", r"\p{N}",
                  r"[\p{P}!-/:-@\[-`{-~]", GPT2],
    "viking": [" ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+", r"\p{N}"],
}


def split(regexes, text):
    import re
    pieces = [text]
    for pat in regexes:
        rx = re.compile(translate(pat))
        nxt = []
        for p in pieces:
            pos = gap = 0
            while pos < len(p):
                m = rx.match(p, pos)
                if not m or m.end() == pos:
                    pos += 1
                    continue
                if gap < pos:
                    nxt.append(p[gap:pos])
                nxt.append(p[pos:m.end()])
                pos = gap = m.end()
            if gap < len(p):
                nxt.append(p[gap:])
        pieces = nxt
    return pieces


FIXED = [
    "Hello world", " Hello  World!", "I've been 'told he's there, 'RE you sure? 'M not sure I'll",
    "3 33 333 3333 33333 3.3 3..3", "\n \n\n \t\t \n", "   leading and trailing   ",
    "<sentinel:12>IMGIMGABCZ x IMGIMGABCDEZ", "CamelCaseWord HTTPServer iPhone ÉCOLE école",
    "🚀 (normal) 😶\u200d🌫️ ✅ 🦙🦙", "Hello, y'all! How are you 😁 ?我想在apple工作1314151天～",
    "нещо на Български", "ខ្មែរ", "Ä ÖÜ ß", "x\u00a0y\u2028z\u3000w", "a\r\nb\rc\n", "'''```\"\"\"......!!!!!!??????",
    "e\u0301le\u0300ve", "１２３ｘｙｚ！", "tab\tsep\tvalues", "$100+<=>^~|`", "Ωμέγα ΐΰ ῼ",
]


def main():
    rng = random.Random(1234)
    alphabet = list("aZ9 '\t\n\r.,!?-_$+<=>^~|`\"") + ["é", "ß", "Ω", "я", "中", "文", "한", "あ", "٣", "½",
                                                        "\u0301", "\u00a0", "\u3000", "😀", "🦙", "€", "…", "，", "Ｘ", "1", "0"]
    texts = list(FIXED)
    for _ in range(40):
        texts.append("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))))
    cases = []
    for name, regexes in PRE.items():
        for t in texts:
            cases.append({"pre": name, "text": t, "pieces": split(regexes, t)})
    sys.stdout.write("[\n" + ",\n".join(json.dumps(c, separators=(",", ":")) for c in cases) + "\n]\n")


if __name__ == "__main__":
    main()
