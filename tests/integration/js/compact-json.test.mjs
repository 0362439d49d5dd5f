// Compact constrained output through the official `openai` package
// (test-server-compact-json.sh runs it): chat.completions.parse, which
// throws LengthFinishReasonError when a reply was cut by max_tokens and
// JSON-parses json_schema content and strict tools' arguments, gets whole
// values back from stories260K within small budgets.
// Env: SINKD_BASE_URL, SINKD_API_KEY, SINKD_PERSON_SCHEMA (a JSON Schema of
// {name, age, city}), SINKD_WEATHER_TOOL (a strict get_weather tool).
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({
  baseURL: process.env.SINKD_BASE_URL, apiKey: process.env.SINKD_API_KEY, maxRetries: 0, timeout: 60000,
});
const person = JSON.parse(process.env.SINKD_PERSON_SCHEMA);
const weather = JSON.parse(process.env.SINKD_WEATHER_TOOL);
const model = 'stories260K';

let failures = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failures++;
    console.log(`not ok - ${name}\n   ${String((e && e.stack) || e).split('\n').slice(0, 6).join('\n   ')}`);
  }
}

await check('parse: json_schema replies for three fields within max_tokens 40', async () => {
  for (const seed of [1, 2, 3, 4, 5]) {
    const c = await client.chat.completions.parse({
      model, seed, max_tokens: 40, messages: [{ role: 'user', content: 'Who are you?' }],
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true } },
    });
    const v = c.choices[0].message.parsed;
    assert.deepEqual(Object.keys(v).sort(), ['age', 'city', 'name']);
    assert.equal(typeof v.name, 'string');
    assert.ok(Number.isInteger(v.age));
    assert.ok(c.usage.completion_tokens <= 40);
    // no blank outside the strings
    assert.doesNotMatch(c.choices[0].message.content.replace(/"(\\.|[^"\\])*"/g, ''), /\s/);
  }
});

await check('parse: a forced tool call within max_tokens 80', async () => {
  for (const seed of [1, 2, 3]) {
    const c = await client.chat.completions.parse({
      model, seed, max_tokens: 80, tools: [weather], tool_choice: 'required',
      messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
    });
    assert.equal(c.choices[0].finish_reason, 'tool_calls');
    const call = c.choices[0].message.tool_calls[0];
    assert.equal(call.function.name, 'get_weather');
    assert.deepEqual(Object.keys(call.function.parsed_arguments), ['city']);
  }
});

await check('the pretty option passes through the client', async () => {
  const c = await client.chat.completions.parse({
    model, seed: 1, max_tokens: 300, messages: [{ role: 'user', content: 'Who are you?' }],
    response_format: {
      type: 'json_schema', json_schema: { name: 'person', schema: person, strict: true },
      x_sinkd_whitespace: 'pretty',
    },
  });
  assert.equal(typeof c.choices[0].message.parsed.name, 'string');
});

process.exit(failures ? 1 : 0);
