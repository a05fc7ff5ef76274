// The Vercel AI SDK against the loopwire api service: generateText, streamText and a tool round
// trip (a zod-typed function tool the SDK executes, its result sent back for the final answer),
// through one provider. Prints one JSON line of what happened; tests/e2e/test_ai_sdk_client.py
// judges it. The calls run one after another (the api replays its recorded turns in order).
//
//   LOOPWIRE_BASE_URL=http://HOST:PORT/v1 LOOPWIRE_API_KEY=... node run.mjs PROVIDER
//
// PROVIDER: open-responses (@ai-sdk/open-responses, POST /responses), openai-responses
// (@ai-sdk/openai's Responses model) or openai-chat (@ai-sdk/openai's chat completions model).
// The AI SDK 6 line is pinned (package.json): AI SDK 7 needs Node.js 22, the tests run on Node.js 20 too.
import { createOpenResponses } from '@ai-sdk/open-responses';
import { createOpenAI } from '@ai-sdk/openai';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

const baseURL = process.env.LOOPWIRE_BASE_URL;
const apiKey = process.env.LOOPWIRE_API_KEY;
const provider = process.argv[2];
if (!baseURL || !apiKey || !provider) {
  console.error('usage: LOOPWIRE_BASE_URL=... LOOPWIRE_API_KEY=... node run.mjs PROVIDER');
  process.exit(2);
}

function model(name) {
  if (name === 'open-responses') {
    return createOpenResponses({ name: 'loopwire', url: `${baseURL}/responses`, apiKey })('loopwire');
  }
  const openai = createOpenAI({ baseURL, apiKey });
  if (name === 'openai-responses') return openai.responses('loopwire');
  if (name === 'openai-chat') return openai.chat('loopwire');
  throw new Error(`unknown provider ${name}`);
}

function errorInfo(e) {
  return { name: e?.name, message: String(e?.message ?? e), status: e?.statusCode, body: e?.responseBody };
}

async function run(fn) {
  try {
    return { ok: true, ...(await fn()) };
  } catch (e) {
    return { ok: false, error: errorInfo(e) };
  }
}

const m = model(provider);
const common = { model: m, maxRetries: 0 };
const results = { provider };

results.generate = await run(async () => {
  const r = await generateText({ ...common, system: 'Be brief.', prompt: 'Capital of France?' });
  return { text: r.text, finishReason: r.finishReason, usage: r.usage };
});

results.stream = await run(async () => {
  const r = streamText({ ...common, prompt: 'Say something about Paris.' });
  const deltas = [];
  for await (const delta of r.textStream) deltas.push(delta);
  return { deltas, text: await r.text, finishReason: await r.finishReason, usage: await r.usage };
});

const weatherInput = z.object({ city: z.string().min(1).describe('The city, e.g. Paris') }).strict();
const executed = [];
results.tool = await run(async () => {
  const r = await generateText({
    ...common,
    prompt: 'What is the weather in Paris? Use the tool.',
    tools: {
      get_weather: tool({
        description: 'The weather of a city.',
        inputSchema: weatherInput,
        execute: async ({ city }) => {
          executed.push({ city });
          return `sunny in ${city}`;
        },
      }),
    },
    stopWhen: stepCountIs(3),
  });
  return {
    text: r.text,
    finishReason: r.finishReason,
    executed,
    steps: r.steps.map((s) => ({
      text: s.text,
      finishReason: s.finishReason,
      toolCalls: s.toolCalls.map((c) => ({
        toolName: c.toolName,
        toolCallId: c.toolCallId,
        input: c.input,
        invalid: c.invalid ?? false,
        schemaValid: weatherInput.safeParse(c.input).success,
      })),
      toolResults: s.toolResults.map((t) => ({ toolName: t.toolName, toolCallId: t.toolCallId, output: t.output })),
      toolErrors: s.content.filter((p) => p.type === 'tool-error').map((p) => String(p.error)),
      // What the SDK sent for this step: the second step's request carries the tool's result.
      requestBody: typeof s.request?.body === 'string' ? JSON.parse(s.request.body) : s.request?.body,
    })),
  };
});

console.log(JSON.stringify(results));
