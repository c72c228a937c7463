// openai_sdk.mjs SDK_DIR PORT KEY: the official openai SDK against the
// Sanbox gateway (through tests/gwbridge) with the run's virtual key: the
// Responses API whole, streamed (raw events and the SDK's stream helper),
// the stub's scripted function calls in that API's format, a refused
// field, and a stream cut by the budget. Prints one line per check.
import { createRequire } from "node:module";
import path from "node:path";

const [sdkDir, port, key] = process.argv.slice(2);
const require = createRequire(path.join(sdkDir, "package.json"));
const OpenAI = require("openai").default ?? require("openai");
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: key, maxRetries: 0 });

const tools = [
  { type: "function", name: "shell", description: "run a command",
    parameters: { type: "object", properties: { command: { type: "array", items: { type: "string" } } },
                  required: ["command"] } },
  { type: "function", name: "write_file", description: "write a file",
    parameters: { type: "object", properties: { path: { type: "string" }, content: { type: "string" } },
                  required: ["path", "content"] } },
];
let failed = 0;
const check = (ok, what, detail) => {
  console.log(`${ok ? "PASS" : "FAIL"} ${what}${ok ? "" : ": " + JSON.stringify(detail).slice(0, 400)}`);
  if (!ok) failed++;
};

// whole: turn 0 writes the file, with the tool the request offers
const r0 = await client.responses.create({ model: "stub/harness", input: "write hello.txt", tools });
const call0 = r0.output.find((o) => o.type === "function_call");
check(r0.status === "completed" && call0?.name === "write_file" &&
      JSON.parse(call0.arguments).path === "/workspace/hello.txt" &&
      r0.output_text.includes("write the file") && r0.usage.input_tokens > 0 &&
      r0.usage.output_tokens > 0, "responses.create: a function call", r0);

// streamed raw events: turn 1 (the call and its output in the input) runs a command
const input1 = [
  { role: "user", content: "write hello.txt" },
  { type: "function_call", call_id: call0.call_id, name: call0.name, arguments: call0.arguments },
  { type: "function_call_output", call_id: call0.call_id, output: "ok" },
];
const types = [];
let done1;
for await (const ev of await client.responses.create({ model: "stub/harness", input: input1, tools, stream: true })) {
  types.push(ev.type);
  if (ev.type === "response.completed") done1 = ev.response;
}
const call1 = done1?.output.find((o) => o.type === "function_call");
check(types[0] === "response.created" && types.includes("response.function_call_arguments.delta") &&
      types.at(-1) === "response.completed" && call1?.name === "shell" &&
      JSON.parse(call1.arguments).command.join(" ").includes("ran.txt") && done1.usage.output_tokens > 0,
      "responses stream: events and a function call", { types, done1 });

// the SDK's stream helper accumulates the events into the final response
const s2 = client.responses.stream({ model: "stub/harness", tools,
  input: [...input1, { type: "function_call", call_id: "c2", name: "shell", arguments: "{}" },
          { type: "function_call_output", call_id: "c2", output: "ok" }] });
let text = "";
s2.on("response.output_text.delta", (e) => { text += e.delta; });
const f2 = await s2.finalResponse();
check(f2.output[0]?.content?.[0]?.text === "done" && text === "done" && f2.usage.total_tokens > 0,
      "responses.stream: finalResponse", { text, ot: f2.output_text });

// a field the gateway refuses: the SDK sees a 400 with its reason
try {
  await client.responses.create({ model: "stub/harness", input: "x", previous_response_id: "resp_1" });
  check(false, "previous_response_id refused", "answered");
} catch (e) {
  check(e.status === 400 && /refused by the gateway/.test(e.message), "previous_response_id refused (400)", e.message);
}

// a stream past its grant is cut with an error event the SDK raises
try {
  const s3 = await client.responses.create({ model: "stub/long", input: "x", max_output_tokens: 16, stream: true });
  const seen = [];
  for await (const ev of s3) seen.push(ev.type);
  check(seen.includes("error") && !seen.includes("response.completed"), "a stream past its grant is cut", seen);
} catch (e) {
  check(/budget/.test(e.message), "a stream past its grant is cut (raised)", e.message);
}
process.exit(failed ? 1 : 0);
