#!/usr/bin/env python3
"""Renders render-hf.mjs's templates and cases with Python's Jinja2 the way
transformers' apply_chat_template does (a sandboxed environment with
trim_blocks, lstrip_blocks and loop controls; its tojson, raise_exception
and strftime_now), for compare.mjs: where @huggingface/jinja refuses a
case, sinkd must render what Jinja2 renders (what transformers and vLLM
serve), byte for byte; and a column of how often sinkd, which follows
@huggingface/jinja where that renders, agrees with Jinja2 in all.

Usage: render-jinja2.py OUT_DIR NOW (NOW: strftime_now's time, seconds
since 1970 UTC).  Writes OUT_DIR/tID.j2.jsonl beside each tID.ctx.jsonl:
{"ok":true,"text":...} or {"ok":false,"error":...,"raised":bool}.
"""
import datetime
import json
import os
import sys

from jinja2.exceptions import TemplateError
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(TemplateError):
    pass


def make_env(now):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def raise_exception(message):
        raise Raised(message)

    def strftime_now(fmt):
        return datetime.datetime.fromtimestamp(now, datetime.timezone.utc).strftime(fmt)

    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_template(env, src, contexts):
    try:
        tmpl = env.from_string(src)
    except Exception as e:  # a parse error fails every case
        return [{"ok": False, "error": str(e), "raised": False} for _ in contexts]
    out = []
    for ctx in contexts:
        try:
            out.append({"ok": True, "text": tmpl.render(**ctx)})
        except Raised as e:
            out.append({"ok": False, "error": str(e), "raised": True})
        except Exception as e:
            out.append({"ok": False, "error": f"{type(e).__name__}: {e}", "raised": False})
    return out


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    out_dir, now = sys.argv[1], int(sys.argv[2])
    env = make_env(now)
    with open(os.path.join(out_dir, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    for t in manifest:
        base = os.path.join(out_dir, f"t{t['id']}")
        with open(base + ".jinja", encoding="utf-8", newline="") as f:
            src = f.read()
        with open(base + ".ctx.jsonl", encoding="utf-8") as f:
            contexts = [json.loads(line) for line in f if line.strip()]
        with open(base + ".j2.jsonl", "w", encoding="utf-8") as f:
            for r in render_template(env, src, contexts):
                f.write(json.dumps(r, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
