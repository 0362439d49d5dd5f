// sinkd through the official `openai` npm package: a streaming chat
// completion and a non-streaming completion, objects checked field by field.
// Env: SINKD_BASE_URL (https://127.0.0.1:PORT/v1), SINKD_API_KEY,
// SINKD_MODEL (the served model's name, stories260K when unset); the test
// certificate comes in through NODE_EXTRA_CA_CERTS.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const served = process.env.SINKD_MODEL || 'stories260K';
// Token counts are stories260K's; another vocabulary is held to their sums.
const stories = served === 'stories260K';

const client = new OpenAI({
  baseURL: process.env.SINKD_BASE_URL,
  apiKey: process.env.SINKD_API_KEY,
  maxRetries: 0,
  timeout: 30000,
});

let failures = 0;
async function check(name, fn) {
  try {
    await fn();
    console.log(`ok - ${name}`);
  } catch (e) {
    failures++;
    console.log(`not ok - ${name}\n   ${String(e && e.stack || e).split('\n').slice(0, 4).join('\n   ')}`);
  }
}

const now = Math.floor(Date.now() / 1000);

await check('models.list names the served model', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models.length, 1);
  assert.equal(models[0].id, served);
  assert.equal(models[0].object, 'model');
});

let completionText = '';
await check('non-streaming completion, field by field', async () => {
  const c = await client.completions.create({
    model: served, prompt: 'Once upon a time', max_tokens: 12, temperature: 0,
  });
  assert.match(c.id, /^cmpl-/);
  assert.equal(c.object, 'text_completion');
  assert.equal(c.model, served);
  assert.ok(Math.abs(c.created - now) < 120);
  assert.equal(c.choices.length, 1);
  const ch = c.choices[0];
  assert.equal(ch.index, 0);
  assert.equal(typeof ch.text, 'string');
  assert.ok(ch.text.length > 10);
  assert.equal(ch.finish_reason, 'length');
  assert.equal(ch.logprobs, null);
  if (stories)
    assert.deepEqual(c.usage, { prompt_tokens: 5, completion_tokens: 12, total_tokens: 17,
                                prompt_tokens_details: { cached_tokens: 0 } });
  else
    assert.ok(c.usage.completion_tokens === 12 && c.usage.prompt_tokens > 0 &&
              c.usage.total_tokens === c.usage.prompt_tokens + 12, JSON.stringify(c.usage));
  completionText = ch.text;
});

await check('streaming completion text equals the non-streaming one (temperature 0)', async () => {
  const stream = await client.completions.create({
    model: served, prompt: 'Once upon a time', max_tokens: 12, temperature: 0, stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'text_completion');
    text += chunk.choices[0].text;
    if (chunk.choices[0].finish_reason) finish = chunk.choices[0].finish_reason;
  }
  assert.equal(text, completionText);
  assert.equal(finish, 'length');
});

await check('streaming chat completion, chunk by chunk, with usage', async () => {
  const stream = await client.chat.completions.create({
    model: served,
    messages: [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: 'Lily went' }],
    max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
  });
  let id = null;
  let content = '';
  let role = null;
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.match(chunk.id, /^chatcmpl-/);
    assert.equal(chunk.model, served);
    assert.ok(Math.abs(chunk.created - now) < 120);
    if (id === null) id = chunk.id;
    assert.equal(chunk.id, id, 'one id for the whole stream');
    if (chunk.usage) {
      assert.deepEqual(chunk.choices, []);
      usage = chunk.usage;
      continue;
    }
    assert.equal(chunk.choices.length, 1);
    const ch = chunk.choices[0];
    assert.equal(ch.index, 0);
    if (ch.delta.role) role = ch.delta.role;
    if (ch.delta.content) content += ch.delta.content;
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(role, 'assistant');
  assert.ok(content.length > 5, `content: ${content}`);
  assert.equal(finish, 'length');
  // a token that ends inside a UTF-8 character comes out with the next one
  assert.ok(chunks >= (stories ? 10 + 2 : 3), `${chunks} chunks`);
  assert.equal(usage.completion_tokens, 10);
  assert.equal(usage.total_tokens, usage.prompt_tokens + 10);

  const whole = await client.chat.completions.create({
    model: served,
    messages: [{ role: 'system', content: 'Tell a story.' }, { role: 'user', content: 'Lily went' }],
    max_tokens: 10, temperature: 0,
  });
  assert.equal(whole.object, 'chat.completion');
  assert.equal(whole.choices[0].message.role, 'assistant');
  assert.equal(whole.choices[0].message.content, content);
  assert.equal(whole.choices[0].finish_reason, 'length');
});

await check('API errors surface as openai error classes', async () => {
  await assert.rejects(
    client.completions.create({ model: 'gpt-4', prompt: 'x', max_tokens: 2 }),
    (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.code === 'model_not_found'
      && e.param === 'model');
  await assert.rejects(
    client.completions.create({ model: served, prompt: 'x', max_tokens: 'many' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_tokens');
  const bad = new OpenAI({ baseURL: process.env.SINKD_BASE_URL, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(bad.models.list(), (e) => e instanceof OpenAI.AuthenticationError);
});

console.log(failures ? `${failures} failed` : 'all passed');
process.exit(failures ? 1 : 0);
