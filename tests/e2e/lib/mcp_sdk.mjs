// mcp_sdk.mjs - drives `sanbox mcp` with the official MCP TypeScript SDK's
// client (tests/e2e/vm_mcp.sh installs it, pinned): initialize (the client
// refuses a revision it does not list), tools/list,
// a run started with input files and waited for with progress notifications, its events, a
// file and a directory of its disk (and one at an offset, as `sanbox fs ls --at`), a resource and a subscription, a
// 4-run group from examples/acquisition.yaml, a fork, and tool errors.
// Prints "PASS name" / "FAIL name: why" lines; exits 1 on a failure.
// Usage: node mcp_sdk.mjs SDK_DIR SANBOX REPO
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";

const [sdkDir, sanbox, repo] = process.argv.slice(2);
const require = createRequire(sdkDir + "/package.json");
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StdioClientTransport } = require("@modelcontextprotocol/sdk/client/stdio.js");
const { ResourceUpdatedNotificationSchema } =
	require("@modelcontextprotocol/sdk/types.js");

let failures = 0;
const ok = (name) => console.log(`PASS ${name}`);
const bad = (name, why) => { console.log(`FAIL ${name}: ${why}`); failures++; };
const check = (name, cond, why) => (cond ? ok(name) : bad(name, why));
const long = { timeout: 600000, resetTimeoutOnProgress: true };

const transport = new StdioClientTransport({ command: sanbox, args: ["mcp"], env: process.env,
	stderr: "inherit" });
const client = new Client({ name: "sanbox-test", version: "1.0.0" });
const updated = [];
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updated.push(n.params.uri));
await client.connect(transport);
check("initialize", client.getServerVersion()?.name === "sanbox" &&
	client.getServerCapabilities()?.resources?.subscribe === true,
	JSON.stringify(client.getServerVersion()));

const tools = (await client.listTools()).tools.map((t) => t.name).sort();
const want = ["diff", "events_read", "fork", "fs_list", "fs_read", "group_start",
	"groups_list", "resume", "run_start", "runs_list", "snapshot", "stop", "wait"];
check("tools/list", JSON.stringify(tools) === JSON.stringify(want), tools.join(","));

const call = async (name, args, opts) => client.callTool({ name, arguments: args }, undefined, opts);
const data = (r) => r.structuredContent;

// a run with input files (text and base64), waited for with progress
let r = await call("run_start", { command: ["sh", "-c",
	"mkdir -p /workspace/d; printf 'hello mcp\\n' > /workspace/out.txt; echo done-marker; " +
	"cat /workspace/in/hello.txt; od -An -tx1 /workspace/bin.dat; stat -c %a /workspace/in/hello.txt"],
	name: "mcp-one", memory_mib: 128, timeout_s: 300,
	inputs: [{ path: "in/hello.txt", content: "from-mcp-input\n", mode: 0o600 },
		{ path: "/workspace/bin.dat", content_base64: Buffer.from([0, 255, 16]).toString("base64") }] });
const run = data(r)?.run;
check("run_start", !r.isError && /^[0-9a-f]{12}$/.test(run ?? ""), JSON.stringify(r));
await client.subscribeResource({ uri: `sanbox://run/${run}` });
const progress = [];
r = await call("wait", { runs: [run], timeout_s: 240 },
	{ ...long, onprogress: (p) => progress.push(p) });
const st = data(r)?.runs?.[0];
check("wait", data(r)?.done === true && st?.status === "exited" && st?.exit_status === 0,
	JSON.stringify(r));
check("wait progress", progress.length >= 1 && progress.at(-1).progress === 1 &&
	progress.at(-1).total === 1, JSON.stringify(progress));
await new Promise((res) => setTimeout(res, 500));
check("resource subscription", updated.includes(`sanbox://run/${run}`), JSON.stringify(updated));

r = await call("events_read", { run, types: ["agent.output"] });
check("events_read", JSON.stringify(data(r)?.events ?? []).includes("done-marker") &&
	data(r)?.next > 0, JSON.stringify(r).slice(0, 400));
const outs = JSON.stringify(data(r)?.events ?? []);
check("run_start inputs", outs.includes("from-mcp-input") && outs.includes("00 ff 10") &&
	outs.includes("600"), outs.slice(0, 600));
r = await call("events_read", { run, from: 1, limit: 2 });
check("events_read pages", data(r)?.events?.length === 2 && data(r)?.next === 3 &&
	data(r)?.end === false, JSON.stringify(data(r)).slice(0, 300));
r = await call("fs_read", { run, path: "out.txt" });
check("fs_read", data(r)?.content === "hello mcp\n" && data(r)?.eof === true, JSON.stringify(r));
r = await call("fs_read", { run, path: "/workspace/out.txt", offset: 6, length: 3 });
check("fs_read offset", data(r)?.content === "mcp" && data(r)?.next_offset === 9, JSON.stringify(r));
r = await call("fs_list", { run });
const names = (data(r)?.entries ?? []).map((e) => e.name);
check("fs_list", names.includes("out.txt") && names.includes("d"), JSON.stringify(r).slice(0, 300));
// at an offset before its only snapshot (its end's): its start with the
// record rolled forward, as `sanbox fs ls --at` lists it
const changed = execFileSync(sanbox, ["events", run, "--json", "--type", "agent.file.changed"],
	{ encoding: "utf8" }).split("\n").filter((l) => l).map((l) => JSON.parse(l));
const at = changed.find((e) => e.payload.path === "/workspace/out.txt")?.offset;
r = await call("fs_list", { run, at });
const cliLs = JSON.parse(execFileSync(sanbox, ["fs", "ls", run, "--at", String(at), "--json"],
	{ encoding: "utf8" }));
check("fs_list at an offset: as fs ls --at", !r.isError && at > 0 &&
	JSON.stringify(data(r)?.entries) === JSON.stringify(cliLs) &&
	cliLs.some((e) => e.name === "out.txt"),
	`at ${at}: ${JSON.stringify(r).slice(0, 300)} / ${JSON.stringify(cliLs).slice(0, 300)}`);
// fs_read at that offset: the file as the record has it then, as
// `sanbox fs cat --at` prints it (its only snapshot is later)
r = await call("fs_read", { run, path: "out.txt", at });
const cliCat = execFileSync(sanbox, ["fs", "cat", run, "out.txt", "--at", String(at)],
	{ encoding: "utf8" });
check("fs_read at an offset: as fs cat --at", !r.isError && data(r)?.content === cliCat &&
	cliCat === "hello mcp\n", `at ${at}: ${JSON.stringify(r).slice(0, 300)} / ${cliCat}`);
r = await call("fs_read", { run, path: "never.txt", at });
check("fs_read at an offset: a file not there", r.isError, JSON.stringify(r).slice(0, 300));
const res = await client.readResource({ uri: `sanbox://run/${run}` });
check("resources/read", JSON.parse(res.contents[0].text)?.run?.status === "exited",
	res.contents[0].text.slice(0, 200));

// a fork of the run from its newest snapshot
r = await call("fork", { run, count: 1 });
const fork = data(r)?.runs?.[0];
check("fork", !r.isError && /^[0-9a-f]{12}$/.test(fork ?? ""), JSON.stringify(r));
if (fork) {
	r = await call("wait", { runs: [fork], timeout_s: 240 }, long);
	const f = JSON.parse((await client.readResource({ uri: `sanbox://run/${fork}` })).contents[0].text);
	check("fork ran", data(r)?.done === true && f.run.parent === run,
		JSON.stringify(data(r)).slice(0, 300));
}

// a 4-run group from the example group file
const yaml = readFileSync(`${repo}/examples/acquisition.yaml`, "utf8");
r = await call("group_start", { yaml, name: "acq-mcp" });
check("group_start", !r.isError && data(r)?.group === "acq-mcp" && data(r)?.runs?.length === 4,
	JSON.stringify(r).slice(0, 400));
const gprog = [];
r = await call("wait", { group: "acq-mcp", timeout_s: 540 },
	{ ...long, onprogress: (p) => gprog.push(p.progress) });
check("group wait", data(r)?.done === true && data(r)?.runs?.length === 4,
	JSON.stringify(data(r)).slice(0, 400));
check("group progress", gprog.length >= 2 && gprog.every((v, i) => !i || v > gprog[i - 1]) &&
	gprog.at(-1) === 4, JSON.stringify(gprog));
r = await call("groups_list", {});
check("groups_list", (data(r)?.groups ?? []).some((g) => g.group.name === "acq-mcp" &&
	g.counts.live === 0), JSON.stringify(data(r)).slice(0, 300));

// tool errors a model can act on
const err = async (name, args, field) => {
	const e = await call(name, args);
	check(`error ${name} ${field}`, e.isError === true && e.content[0].text.startsWith(field),
		JSON.stringify(e));
};
await err("run_start", { name: "x" }, "prompt: missing");
await err("events_read", {}, "run: missing");
await err("run_start", { command: ["true"], memory_mib: "lots" }, "memory_mib: expected an integer");
await err("run_start", { command: ["true"], template: "no-such-template" }, "template:");
await err("run_start", { command: ["true"], group: "g".repeat(64) }, "group: 64 characters");
await err("fs_list", { run: "no-such-run" }, "run: no run 'no-such-run'");

await client.close();
process.exit(failures ? 1 : 0);
