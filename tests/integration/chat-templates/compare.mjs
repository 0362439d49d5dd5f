// Compares what `sinkd chat-template --batch` rendered with what
// @huggingface/jinja rendered (render-hf.mjs), case by case, byte for byte.
// Usage: node compare.mjs OUT_DIR KNOWN_REFUSALS
// OUT_DIR holds render-hf.mjs's files and, per template, tID.sinkd.jsonl
// (sinkd's result lines), tID.sinkd.err and tID.sinkd.rc (its stderr and
// exit status: 3 when the template does not parse; any other status but 0
// fails every case of the template).
// A case matches when both render the same bytes, when both raise the same
// raise_exception message, or when both fail otherwise (a parse or type
// error: the messages differ by design).  Where only Hugging Face fails and
// sinkd renders (or raises), sinkd follows Python's Jinja2 (what
// transformers and vLLM run): with render-jinja2.py's tID.j2.jsonl the case
// matches only when sinkd's output is Jinja2's byte for byte (or the same
// raised message), column "j2-where-hf-refuses"; without them (jinja2 not
// installed) it matches only when KNOWN_REFUSALS lists it.  A case where
// only sinkd fails matches only when KNOWN_REFUSALS lists it.  An entry
// (template, case glob, the side that fails, the construct and why) that
// matches no case is stale and fails the comparison too.
// Prints a table (template, cases, identical, refused by both, known,
// j2-where-hf-refuses, different; and, with the Jinja2 results, "jinja2":
// all the cases where sinkd agrees with Jinja2, for information), the first
// difference of each template, the messages sinkd failed with where Hugging
// Face rendered (what the interpreter still lacks), and exits 1 on any
// difference.
import fs from "node:fs";
import path from "node:path";

const [outDir, knownFile] = process.argv.slice(2);
const read = (f) => fs.readFileSync(path.join(outDir, f), "utf8");
const lines = (s) => s.split("\n").filter((l) => l.length > 0).map((l) => JSON.parse(l));
const manifest = JSON.parse(read("manifest.json"));
const caseNames = JSON.parse(read("cases.json"));
const haveJ2 = manifest.every((t) => fs.existsSync(path.join(outDir, `t${t.id}.j2.jsonl`)));

function loadKnown() {
	const out = [];
	for (const [i, raw] of fs.readFileSync(knownFile, "utf8").split("\n").entries()) {
		if (!raw.trim() || raw.startsWith("#")) continue;
		const [template, glob, side, why] = raw.split("\t");
		if (!why || !["hf", "sinkd"].includes(side)) {
			console.log(`# ${knownFile}:${i + 1}: want TEMPLATE<tab>CASE-GLOB<tab>hf|sinkd<tab>CONSTRUCT: REASON`);
			process.exit(2);
		}
		const re = new RegExp("^" + glob.split("*").map((s) => s.replace(/[.+?^${}()|[\]\\]/g, "\\$&")).join(".*") + "$");
		out.push({ template, re, side, why, line: i + 1, used: 0 });
	}
	return out;
}

// sinkd's results for one template: its lines, or its parse error for every case.
function sinkdResults(t) {
	const rc = Number(read(`t${t.id}.sinkd.rc`).trim());
	const err = read(`t${t.id}.sinkd.err`).trim();
	if (rc === 0) return lines(read(`t${t.id}.sinkd.jsonl`));
	// Any other status (a crash, a sanitizer report) fails every case.
	const kind = rc === 3 ? "syntax" : "crash";
	return caseNames.map(() => ({ ok: false, kind, error: err.replace(/^sinkd chat-template: \S*?\.jinja:/, "") }));
}

function firstDiff(a, b) {
	let i = 0;
	while (i < a.length && i < b.length && a[i] === b[i]) i++;
	return i;
}

function showDiff(t, name, hf, ours) {
	const at = firstDiff(hf, ours);
	const ctx = (s) => JSON.stringify(s.slice(Math.max(0, at - 40), at + 40));
	const byte = Buffer.byteLength(hf.slice(0, at), "utf8");
	console.log(`# ${t.name} / ${name}: first difference at byte ${byte} (of ${Buffer.byteLength(hf)} / ${Buffer.byteLength(ours)})`);
	console.log(`#   Hugging Face: ${ctx(hf)}`);
	console.log(`#   sinkd:        ${ctx(ours)}`);
}

// A side "fails" when it errs other than by raise_exception: a renderer's
// gap, where the other side may go on to render or to raise.
function classify(hf, ours) {
	if (ours.kind === "crash") return "different";
	if (hf.ok && ours.ok) return hf.text === ours.text ? "identical" : "different";
	const hfFails = !hf.ok && !hf.raised;
	const oursFails = !ours.ok && ours.kind !== "raised";
	if (hfFails && oursFails) return "refused";
	if (hf.raised && ours.kind === "raised") return hf.error === ours.error ? "refused" : "different";
	if (hfFails) return "hf-fails";
	if (oursFails) return "sinkd-fails";
	return "different";
}

function main() {
	const known = loadKnown();
	const totals = { cases: 0, identical: 0, refused: 0, known: 0, j2only: 0, different: 0, jinja2: 0 };
	const missing = new Map(); // sinkd's message -> count, where Hugging Face rendered
	const rows = [];
	for (const t of manifest) {
		const hf = lines(read(`t${t.id}.hf.jsonl`));
		const ours = sinkdResults(t);
		const row = { name: t.name, cases: hf.length, identical: 0, refused: 0, known: 0, j2only: 0, different: 0, jinja2: 0, why: "" };
		const j2 = haveJ2 ? lines(read(`t${t.id}.j2.jsonl`)) : [];
		let shown = false;
		hf.forEach((h, i) => {
			const o = ours[i] || { ok: false, kind: "missing", error: "no result line" };
			const name = caseNames[i];
			let c = classify(h, o);
			const j = j2[i];
			if (c === "hf-fails" && j) {
				// an entry for it stays in use: runs without jinja2 need it
				const k = known.find((k) => k.template === t.name && k.side === "hf" && k.re.test(name));
				if (k) k.used++;
				c = ["identical", "refused"].includes(classify(j, o)) ? "j2only" : "different";
			}
			if (c === "sinkd-fails" || c === "hf-fails") {
				const side = c === "sinkd-fails" ? "sinkd" : "hf";
				const k = known.find((k) => k.template === t.name && k.side === side && k.re.test(name));
				if (c === "sinkd-fails") {
					const msg = o.error.replace(/^\d+:\d+: /, "");
					missing.set(msg, (missing.get(msg) || 0) + 1);
				}
				if (k) {
					k.used++;
					c = "known";
				} else {
					c = "different";
				}
			}
			row[c]++;
			if (j && ["identical", "refused"].includes(classify(j, o))) row.jinja2++;
			if (c === "refused" && !row.why) row.why = `Hugging Face: ${h.error.slice(0, 90)}; sinkd: ${o.error.slice(0, 90)}`;
			if (c === "different" && !shown) {
				shown = true;
				if (j && !h.ok && !h.raised && j.ok && o.ok) showDiff(t, name + " (Jinja2, as Hugging Face fails)", j.text, o.text);
				else if (h.ok && o.ok) showDiff(t, name, h.text, o.text);
				else
					console.log(`# ${t.name} / ${name}: Hugging Face ${h.ok ? "rendered" : (h.raised ? "raised: " : "failed: ") + h.error.slice(0, 100)}; ` +
						`sinkd ${o.ok ? "rendered" : o.kind + ": " + o.error.slice(0, 100)}`);
			}
		});
		for (const k of Object.keys(totals)) totals[k] += row[k];
		rows.push(row);
	}
	// Names cut at 56 characters: llama.cpp's test names run long.
	const w = Math.min(56, Math.max(...rows.map((r) => r.name.length), 8));
	const j2col = (v) => (haveJ2 ? ` ${String(v).padStart(6)}` : "");
	const j2only = (v) => (haveJ2 ? ` ${String(v).padStart(19)}` : "");
	const fmt = (r) => `${r.name.slice(0, w).padEnd(w)} ${String(r.cases).padStart(5)} ${String(r.identical).padStart(9)} ${String(r.refused).padStart(7)} ${String(r.known).padStart(5)}${j2only(r.j2only)} ${String(r.different).padStart(9)}${j2col(r.jinja2)}`;
	console.log(`${"template".padEnd(w)} ${"cases".padStart(5)} ${"identical".padStart(9)} ${"refused".padStart(7)} ${"known".padStart(5)}${j2only("j2-where-hf-refuses")} ${"different".padStart(9)}${j2col("jinja2")}`);
	for (const r of rows) console.log(fmt(r));
	console.log(fmt({ name: "total", ...totals }));
	// What the closing note lists: templates no case of which renders.
	for (const r of rows)
		if (r.refused === r.cases) console.log(`# refused in every case by both: ${r.name} (${r.why.replace(/\n/g, "\\n")})`);
	const top = [...missing.entries()].sort((a, b) => b[1] - a[1]).slice(0, 15);
	if (top.length) {
		console.log("# sinkd failed where Hugging Face rendered (cases, message):");
		for (const [m, n] of top) console.log(`#   ${String(n).padStart(4)}  ${m.slice(0, 150)}`);
	}
	let stale = 0;
	for (const k of known)
		if (!k.used) {
			stale++;
			console.log(`# ${knownFile}:${k.line}: stale: no case of ${k.template} where only ${k.side} fails`);
		}
	if (!haveJ2) {
		delete totals.jinja2;
		delete totals.j2only;
	}
	console.log(JSON.stringify({ templates: rows.length, ...totals, stale_known: stale }));
	process.exit(totals.different === 0 && stale === 0 ? 0 : 1);
}

main();
