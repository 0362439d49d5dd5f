// Structured output and tools through the clients people use: the `openai`
// package (chat.completions with tools and with response_format json_schema,
// responses.create streaming), the Vercel AI SDK (generateObject with a zod
// schema over chat completions and over the Responses API, streamText with a
// tool) and LangChain (withStructuredOutput, bindTools).  stories260K writes
// nonsense, but the constrained decoder must make it valid JSON of the schema.
// Env: SINKD_BASE_URL (https://127.0.0.1:PORT/v1), SINKD_API_KEY,
// SINKD_MODEL (the served model's name, stories260K when unset); the test
// certificate comes in through NODE_EXTRA_CA_CERTS.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { z } from 'zod';
import { createOpenAI } from '@ai-sdk/openai';
import * as ai from 'ai';
import { ChatOpenAI } from '@langchain/openai';
import { tool as lcTool } from '@langchain/core/tools';

const baseURL = process.env.SINKD_BASE_URL;
const apiKey = process.env.SINKD_API_KEY;
const model = process.env.SINKD_MODEL || 'stories260K';
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
const provider = createOpenAI({ baseURL, apiKey });

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

// A nested schema: objects in arrays in objects, an enum, an integer, a
// nullable string; small bounds so a nonsense model finishes in time.
const Trip = z.object({
  destination: z.string().max(24),
  mode: z.enum(['car', 'train', 'bike']),
  stops: z.array(z.object({ name: z.string().max(16), minutes: z.number().int() })).max(2),
  note: z.string().max(16).nullable(),
});
const tripJsonSchema = z.toJSONSchema(Trip);

const weatherParams = {
  type: 'object',
  properties: {
    city: { type: 'string', maxLength: 20 },
    unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
  },
  required: ['city', 'unit'],
  additionalProperties: false,
};
const Weather = z.object({ city: z.string().max(20), unit: z.enum(['celsius', 'fahrenheit']) });
const tools = [{
  type: 'function',
  function: { name: 'get_weather', description: 'The weather in a city', parameters: weatherParams },
}];

await check('openai: chat.completions response_format json_schema gives JSON of the schema', async () => {
  for (const seed of [1, 2, 3]) {
    const c = await client.chat.completions.create({
      model, seed, max_tokens: 300,
      messages: [{ role: 'user', content: 'Plan a trip.' }],
      response_format: { type: 'json_schema', json_schema: { name: 'trip', schema: tripJsonSchema, strict: true } },
    });
    assert.equal(c.choices[0].finish_reason, 'stop');
    Trip.parse(JSON.parse(c.choices[0].message.content));
  }
});

await check('openai: response_format json_object gives a JSON object', async () => {
  const c = await client.chat.completions.create({
    model, seed: 7, max_tokens: 200, messages: [{ role: 'user', content: 'Any JSON.' }],
    response_format: { type: 'json_object' },
  });
  if (c.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(c.choices[0].message.content);
    assert.equal(typeof v, 'object');
    assert.ok(v !== null && !Array.isArray(v));
  } else {
    assert.equal(c.choices[0].finish_reason, 'length');
  }
});

await check('openai: chat.completions with tools, tool_choice required: a valid call', async () => {
  const c = await client.chat.completions.create({
    model, seed: 4, max_tokens: 200, tools, tool_choice: 'required',
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
  });
  const ch = c.choices[0];
  assert.equal(ch.finish_reason, 'tool_calls');
  assert.equal(ch.message.tool_calls.length, 1);
  const call = ch.message.tool_calls[0];
  assert.match(call.id, /^call_/);
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  Weather.parse(JSON.parse(call.function.arguments));
});

await check('openai: streamed tool call arrives in pieces that join to valid arguments', async () => {
  const stream = await client.chat.completions.create({
    model, seed: 5, max_tokens: 200, tools, stream: true,
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
    messages: [{ role: 'user', content: 'Weather in Oslo?' }],
  });
  let args = '', name = '', id = '', finish = null, pieces = 0;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    for (const tc of ch.delta.tool_calls || []) {
      assert.equal(tc.index, 0);
      if (tc.id) id = tc.id;
      if (tc.function && tc.function.name) name = tc.function.name;
      if (tc.function && tc.function.arguments) { args += tc.function.arguments; pieces++; }
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(name, 'get_weather');
  assert.match(id, /^call_/);
  assert.ok(pieces > 1, `arguments came in ${pieces} piece(s)`);
  Weather.parse(JSON.parse(args));
});

await check('openai: a tool result goes back into the conversation', async () => {
  const c = await client.chat.completions.create({
    model, seed: 6, max_tokens: 8, tools,
    messages: [
      { role: 'user', content: 'Weather in Rome?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'get_weather', arguments: '{"city":"Rome","unit":"celsius"}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 21}' },
    ],
  });
  assert.ok(['stop', 'length', 'tool_calls'].includes(c.choices[0].finish_reason));
  assert.ok(c.usage.prompt_tokens > 20);
});

await check('openai: responses.create streaming with text.format json_schema', async () => {
  const stream = await client.responses.create({
    model, max_output_tokens: 300, stream: true,
    input: 'Plan a trip.',
    text: { format: { type: 'json_schema', name: 'trip', schema: tripJsonSchema, strict: true } },
  });
  const types = [];
  let text = '', done = null, completed = null;
  for await (const ev of stream) {
    types.push(ev.type);
    if (ev.type === 'response.output_text.delta') text += ev.delta;
    if (ev.type === 'response.output_text.done') done = ev.text;
    if (ev.type === 'response.completed') completed = ev.response;
  }
  assert.equal(types[0], 'response.created');
  assert.equal(types[types.length - 1], 'response.completed');
  assert.equal(done, text);
  Trip.parse(JSON.parse(text));
  assert.equal(completed.status, 'completed');
  assert.equal(completed.output_text ?? completed.output[0].content[0].text, text);
});

await check('openai: responses.create with a function tool, tool_choice required', async () => {
  const r = await client.responses.create({
    model, max_output_tokens: 200, input: 'Weather in Lima?', tool_choice: 'required',
    tools: [{ type: 'function', name: 'get_weather', description: 'The weather', parameters: weatherParams, strict: true }],
  });
  const call = r.output.find((o) => o.type === 'function_call');
  assert.ok(call, JSON.stringify(r.output));
  assert.equal(call.name, 'get_weather');
  Weather.parse(JSON.parse(call.arguments));
});

const generateObject = ai.generateObject;
for (const [label, m] of [['chat completions', provider.chat(model)], ['Responses API', provider(model)]]) {
  await check(`AI SDK: generateObject with a zod schema over ${label}`, async () => {
    const { object, finishReason } = await generateObject({
      model: m, schema: Trip, prompt: 'Plan a trip.', maxOutputTokens: 300, seed: 11,
    });
    assert.equal(finishReason, 'stop');
    Trip.parse(object);
  });
}

await check('AI SDK: streamText with a tool calls it with valid arguments', async () => {
  const result = ai.streamText({
    model: provider.chat(model), prompt: 'Weather in Tokyo?', maxOutputTokens: 200, seed: 12,
    toolChoice: 'required',
    tools: { get_weather: ai.tool({ description: 'The weather in a city', inputSchema: Weather }) },
  });
  const calls = [];
  for await (const part of result.fullStream) {
    if (part.type === 'tool-call') calls.push(part);
    if (part.type === 'error') throw part.error;
  }
  assert.equal(calls.length, 1);
  assert.equal(calls[0].toolName, 'get_weather');
  Weather.parse(calls[0].input);
  assert.equal(await result.finishReason, 'tool-calls');
});

const lc = new ChatOpenAI({
  model, apiKey, maxRetries: 0, maxTokens: 300, temperature: 1,
  configuration: { baseURL },
});

await check('LangChain: withStructuredOutput gives an object of the schema', async () => {
  const structured = lc.withStructuredOutput(Trip, { name: 'trip', method: 'jsonSchema' });
  Trip.parse(await structured.invoke('Plan a trip.'));
});

await check('LangChain: bindTools with tool_choice makes a valid tool call', async () => {
  const weather = lcTool(async () => 'sunny', { name: 'get_weather', description: 'The weather in a city', schema: Weather });
  const bound = lc.bindTools([weather], { tool_choice: 'get_weather' });
  const msg = await bound.invoke('Weather in Cairo?');
  assert.equal(msg.tool_calls.length, 1);
  assert.equal(msg.tool_calls[0].name, 'get_weather');
  Weather.parse(msg.tool_calls[0].args);
});

console.log(failures ? `${failures} check(s) failed` : 'all structured-output checks passed');
process.exit(failures ? 1 : 0);
