// Hugging Face's token ids for every line of a corpus, from @lenml/tokenizers
// (transformers.js's tokenizers) and the real tokenizer.json and
// tokenizer_config.json of each vocabulary package.
// Usage: node hf-ids.mjs CORPUS OUTDIR NAME...   (NAME: llama3_1, qwen3, gemma3, gptoss)
// Writes OUTDIR/case-NNN.txt (each input, raw UTF-8) and OUTDIR/NAME.ids
// (one line of space-separated ids per input: encode() with the
// tokenizer's own special tokens added, as a model would see the text).
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const [corpus, outdir, ...names] = process.argv.slice(2);
if (!corpus || !outdir || names.length === 0) {
  console.error("usage: node hf-ids.mjs CORPUS OUTDIR NAME...");
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
const texts = readFileSync(corpus, "utf8")
  .split("\n")
  .filter((l) => l.length > 0 && !l.startsWith("#"))
  .map((l) => JSON.parse(l));
mkdirSync(outdir, { recursive: true });
texts.forEach((t, i) => writeFileSync(join(outdir, `case-${String(i).padStart(3, "0")}.txt`), t));
for (const name of names) {
  const models = join(here, "node_modules", "@lenml", `tokenizer-${name}`, "models");
  const tok = TokenizerLoader.fromPreTrained({
    tokenizerJSON: JSON.parse(readFileSync(join(models, "tokenizer.json"), "utf8")),
    tokenizerConfig: JSON.parse(readFileSync(join(models, "tokenizer_config.json"), "utf8")),
  });
  const lines = texts.map((t) => tok.encode(t, { add_special_tokens: true }).join(" "));
  writeFileSync(join(outdir, `${name}.ids`), lines.join("\n") + "\n");
}
