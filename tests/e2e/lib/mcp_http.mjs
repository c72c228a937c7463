// mcp_http.mjs - drives `sanbox mcp --http` with the official MCP
// TypeScript SDK's StreamableHTTPClientTransport: initialize (a session
// id), tools/list, tool calls answered as JSON and as an SSE stream
// (run_start, stop, then wait with its progress notifications), a subscription
// by run id prefix told on the GET stream, the session ended by DELETE;
// and by plain fetch: no token and a wrong token 401, a bad session 404,
// a foreign Origin 403, an unknown MCP-Protocol-Version 400, a request
// without a session 400. Prints "PASS name" / "FAIL name: why" lines;
// exits 1 on a failure.
// Usage: node mcp_http.mjs SDK_DIR URL TOKEN
import { createRequire } from "node:module";

const [sdkDir, url, token] = process.argv.slice(2);
const require = createRequire(sdkDir + "/package.json");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } =
	require("@modelcontextprotocol/sdk/client/streamableHttp.js");
const { ResourceUpdatedNotificationSchema } = require("@modelcontextprotocol/sdk/types.js");

let failures = 0;
const ok = (name) => console.log(`PASS ${name}`);
const bad = (name, why) => { console.log(`FAIL ${name}: ${why}`); failures++; };
const check = (name, cond, why) => (cond ? ok(name) : bad(name, why));
const auth = { Authorization: `Bearer ${token}` };

const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: auth } });
const client = new Client({ name: "sanbox-http-test", version: "1.0.0" });
const updated = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updated.push(n.params.uri));
await client.connect(transport);
const sid = transport.sessionId;
check("http initialize", client.getServerVersion()?.name === "sanbox" &&
	/^[0-9a-f]{32}$/.test(sid ?? ""), `${JSON.stringify(client.getServerVersion())} ${sid}`);
const tools = (await client.listTools()).tools.map((t) => t.name);
check("http tools/list", tools.length === 13 && tools.includes("run_start"), tools.join(","));
const call = async (name, args, opts) => client.callTool({ name, arguments: args }, undefined, opts);
let r = await call("runs_list", {});
check("http tools/call", Array.isArray(r.structuredContent?.runs), JSON.stringify(r));
r = await call("run_start", { command: ["true"], name: "http-one" });
const run = r.structuredContent?.run;
check("http run_start", !r.isError && /^[0-9a-f]{12}$/.test(run ?? ""), JSON.stringify(r));
// the GET stream carries resource updates: subscribed by a prefix of the
// id; the run stays up (no guest) until stopped
await client.subscribeResource({ uri: `sanbox://run/${run.slice(0, 6)}` });
r = await call("stop", { run });
check("http stop", !r.isError, JSON.stringify(r));
const progress = [];
r = await call("wait", { runs: [run], timeout_s: 60 }, { onprogress: (p) => progress.push(p) });
check("http wait over SSE", r.structuredContent?.done === true &&
	progress.at(-1)?.progress === 1, `${JSON.stringify(r).slice(0, 300)} ${JSON.stringify(progress)}`);
await new Promise((res) => setTimeout(res, 1500));
check("http subscription by prefix", updated.includes(`sanbox://run/${run}`), JSON.stringify(updated));

const post = (headers, body) => fetch(url, { method: "POST", body: JSON.stringify(body),
	headers: { "Content-Type": "application/json", Accept: "application/json, text/event-stream",
		...headers } });
const ping = { jsonrpc: "2.0", id: 9, method: "ping" };
let res = await post({ "Mcp-Session-Id": sid }, ping);
const none = await res.text();
check("no token: 401", res.status === 401 && none === "", `${res.status} ${none}`);
res = await post({ Authorization: `Bearer ${"0".repeat(64)}`, "Mcp-Session-Id": sid }, ping);
check("wrong token: 401", res.status === 401, `${res.status}`);
res = await post({ ...auth, "Mcp-Session-Id": "f".repeat(32) }, ping);
check("bad session: 404", res.status === 404, `${res.status}`);
res = await post({ ...auth }, ping);
check("no session: 400", res.status === 400, `${res.status}`);
res = await post({ ...auth, "Mcp-Session-Id": sid, Origin: "http://evil.example" }, ping);
check("foreign Origin: 403", res.status === 403, `${res.status}`);
res = await post({ ...auth, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "1999-01-01" }, ping);
check("unknown revision: 400", res.status === 400, `${res.status}`);
res = await post({ ...auth, "Mcp-Session-Id": sid }, ping);
check("ping as JSON", res.status === 200 && (await res.json())?.id === 9, `${res.status}`);

await transport.terminateSession();
res = await post({ ...auth, "Mcp-Session-Id": sid }, ping);
check("DELETE ends the session", res.status === 404, `${res.status}`);
await client.close();
process.exit(failures ? 1 : 0);
