// A small MCP stdio server for the gateway's tests (Node, no packages). Its first argument
// picks how it behaves: "good" (answers properly), "garbage" (noise on stdout and stderr,
// an answer to an unknown id, a schema that is not JSON Schema), "mute" (never answers
// initialize), "big" (two more tools: huge_line writes a 100 MB line, huge_result answers
// `mb` MB, 50 by default), "slow_start" (answers initialize after 3 s), "polite" (exits 200 ms
// after its stdin closes), "stubborn" (ignores its stdin closing and
// SIGTERM); the last two note both in the file named by the fourth argument.
// Tools: echo, slow (sleeps; progress notifications; `flood: N` sends N at once, then the
// result), die (exits mid-call).
const fs = require("fs");
const mode = process.argv[2] || "good";
const marker = process.argv[3] || "";
const noteFile = process.argv[4];
function note(what) { if (noteFile) fs.appendFileSync(noteFile, what + "\n"); }
let buf = "";
function send(msg) { process.stdout.write(JSON.stringify(msg) + "\n"); }
const tools = [
  { name: "echo", description: "Say it back", inputSchema: { type: "object", properties: { text: { type: "string" } }, required: ["text", "ghost"] } },
  { name: "slow", description: "Wait, reporting progress", inputSchema: { type: "object", properties: { ms: { type: "number" } } } },
  { name: "die", description: "Exit mid-call", inputSchema: { type: "object" } },
  { name: "weird", description: "A schema that is not one", inputSchema: "not a schema" },
];
if (mode === "big") tools.push(
  { name: "huge_line", description: "A 100 MB line", inputSchema: { type: "object" } },
  { name: "huge_result", description: "A 50 MB result", inputSchema: { type: "object" } });
const MB = "x".repeat(1 << 20);
function handle(msg) {
  if (mode === "mute") return;
  if (msg.method === "initialize" && mode === "slow_start" && !msg.delayed) {
    setTimeout(() => handle({ ...msg, delayed: true }), 3000);
    return;
  }
  if (msg.method === "initialize") {
    if (mode === "stubborn") setInterval(() => {}, 1000);
if (mode === "garbage") {
      process.stdout.write("this is not json\n");
      send({ jsonrpc: "2.0", id: 999999, result: {} });
    }
    send({ jsonrpc: "2.0", id: msg.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: { listChanged: true } }, serverInfo: { name: "fake", version: "1" } } });
  } else if (msg.method === "tools/list") {
    // Two pages: the cursor is followed.
    if (!msg.params || !msg.params.cursor) send({ jsonrpc: "2.0", id: msg.id, result: { tools: tools.slice(0, 2), nextCursor: "p2" } });
    else send({ jsonrpc: "2.0", id: msg.id, result: { tools: tools.slice(2) } });
  } else if (msg.method === "tools/call") {
    const name = msg.params.name, args = msg.params.arguments || {};
    const token = msg.params._meta && msg.params._meta.progressToken;
    if (name === "echo") {
      send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "echo: " + args.text + marker }], structuredContent: { text: args.text } } });
    } else if (name === "slow" && args.flood > 0) {
      for (let i = 1; i <= args.flood; i++) send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: i, message: "step " + i } });
      send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "slow done" }] } });
    } else if (name === "slow") {
      let n = 0;
      const timer = setInterval(() => {
        n += 1;
        send({ jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: n, total: 3, message: "step " + n } });
        if (n >= 3 && !(args.ms > 10000)) { clearInterval(timer); send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "slow done" }] } }); }
      }, 50);
    } else if (name === "die") {
      process.exit(7);
    } else if (name === "huge_line") {
      for (let i = 0; i < 100; i++) process.stdout.write(MB);
      process.stdout.write("\n");
    } else if (name === "huge_result") {
      send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "head " + marker + MB.repeat(args.mb || 50) + " tail" }] } });
    } else {
      send({ jsonrpc: "2.0", id: msg.id, result: { content: [{ type: "text", text: "ok" }] } });
    }
  } else if (msg.method === "notifications/cancelled") {
    note("cancelled " + msg.params.requestId);
  } else if (msg.id !== undefined) {
    send({ jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "no such method" } });
  }
}
process.stdin.on("data", (chunk) => {
  buf += chunk;
  let i;
  while ((i = buf.indexOf("\n")) >= 0) {
    const line = buf.slice(0, i); buf = buf.slice(i + 1);
    if (line.trim()) handle(JSON.parse(line));
  }
});
process.stdin.on("end", () => {
  note("stdin closed");
  // The polite server takes a moment to wind down, as a real one saving its state would.
  if (mode === "polite") setTimeout(() => process.exit(0), 200);
  else if (mode !== "stubborn") process.exit(0);
});
process.on("SIGTERM", () => {
  note("SIGTERM");
  if (mode !== "stubborn") process.exit(0);
});
if (mode === "stubborn") setInterval(() => {}, 1000);
if (mode === "garbage") setInterval(() => process.stderr.write("noise ".repeat(1000) + "\n"), 1);
