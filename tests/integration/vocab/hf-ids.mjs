// Hugging Face's token ids for every line of a corpus, for each vocabulary
// package's real tokenizer.json and tokenizer_config.json: from
// @lenml/tokenizers (transformers.js's tokenizers) and, when its native
// module loads, from `tokenizers` (Hugging Face's Rust library).
// Usage: node hf-ids.mjs CORPUS OUTDIR NAME...   (NAME: llama3_1, qwen3, gemma3, gptoss)
// Writes OUTDIR/case-NNN.txt (each input, raw UTF-8), OUTDIR/NAME.ids and
// OUTDIR/NAME.rust.ids (one line of space-separated ids per input, the
// tokenizer's own special tokens added, as a model would see the text).
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { TokenizerLoader } from "@lenml/tokenizers";

const [corpus, outdir, ...names] = process.argv.slice(2);
if (!corpus || !outdir || names.length === 0) {
  console.error("usage: node hf-ids.mjs CORPUS OUTDIR NAME...");
  process.exit(2);
}
const here = dirname(fileURLToPath(import.meta.url));
let rust = null;
try {
  rust = createRequire(import.meta.url)("tokenizers");
} catch (e) {
  console.error(`tokenizers (Rust) not loaded, its ids are left out: ${e.message}`);
}
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
  if (!rust) continue;
  const rtok = rust.Tokenizer.fromFile(join(models, "tokenizer.json"));
  const rlines = [];
  for (const t of texts) {
    const enc = await rtok.encode(t, null, { addSpecialTokens: true });
    rlines.push(Array.from(enc.getIds()).join(" "));
  }
  writeFileSync(join(outdir, `${name}.rust.ids`), rlines.join("\n") + "\n");
}
