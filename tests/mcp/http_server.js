// A small streamable HTTP MCP server for the gateway's tests (Node, no packages), as the MCP
// specification (2025-06-18) describes the transport. Arguments: the log file (one JSON line
// per request it gets: method, JSON-RPC method, session and version headers) and a marker.
// It prints its port on stdout. Tools (two pages of tools/list): echo (a JSON answer), slow
// (an SSE stream: progress notifications, then the answer), drop (closes the connection
// mid-answer), html (a wrong content type), flood (an SSE stream that never ends), expire
// (forgets the session: the next requests get 404 until the client initialises again),
// hang (progress, then nothing).
const http = require("http");
const fs = require("fs");
const log = process.argv[2];
const marker = process.argv[3] || "";
let session = null;
let sessions = 0;
const tools = [
  { name: "echo", description: "Say it back", inputSchema: { type: "object", properties: { text: { type: "string" } } } },
  { name: "slow", description: "Progress, then the answer", inputSchema: { type: "object" } },
  { name: "drop", description: "Close mid-answer", inputSchema: { type: "object" } },
  { name: "html", description: "Wrong content type", inputSchema: { type: "object" } },
  { name: "flood", description: "An endless stream", inputSchema: { type: "object" } },
  { name: "expire", description: "Forget the session", inputSchema: { type: "object" } },
  { name: "hang", description: "Progress, then never an answer", inputSchema: { type: "object" } },
];
function note(entry) { fs.appendFileSync(log, JSON.stringify(entry) + "\n"); }
function json(res, status, body, headers) {
  res.writeHead(status, Object.assign({ "Content-Type": "application/json" }, headers || {}));
  res.end(body === undefined ? "" : JSON.stringify(body));
}
function text(id, t) { return { jsonrpc: "2.0", id, result: { content: [{ type: "text", text: t }] } }; }
function event(res, msg) { res.write("event: message\ndata: " + JSON.stringify(msg) + "\n\n"); }
function call(msg, res) {
  const name = msg.params.name, args = msg.params.arguments || {};
  const token = msg.params._meta && msg.params._meta.progressToken;
  if (name === "echo") return json(res, 200, text(msg.id, "echo: " + args.text + marker + " (session " + sessions + ")"));
  if (name === "html") { res.writeHead(200, { "Content-Type": "text/html" }); return res.end("<html>hi</html>"); }
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  if (name === "slow") {
    let n = 0;
    const timer = setInterval(() => {
      n += 1;
      event(res, { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: n, total: 2, message: "step " + n } });
      if (n >= 2) { clearInterval(timer); event(res, text(msg.id, "slow done")); res.end(); }
    }, 30);
  } else if (name === "drop") {
    event(res, { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: 1, message: "about to drop" } });
    setTimeout(() => res.socket.destroy(), 30);
  } else if (name === "flood") {
    const junk = ": " + "x".repeat(1 << 20) + "\n";
    const more = () => { while (res.write(junk)) {} };
    res.on("drain", more);
    res.on("close", () => res.removeListener("drain", more));
    more();
  } else if (name === "hang") {
    event(res, { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: 1, message: "hanging" } });
  } else if (name === "expire") {
    session = null;
    res.socket.destroy();
  }
}
const server = http.createServer((req, res) => {
  let body = "";
  req.on("data", (c) => { body += c; });
  req.on("end", () => {
    let msg = {};
    try { msg = body ? JSON.parse(body) : {}; } catch (e) { return json(res, 400, { error: "bad json" }); }
    const sid = req.headers["mcp-session-id"] || null;
    note({ http: req.method, method: msg.method || null, request: (msg.params && msg.params.requestId) || null, session: sid, version: req.headers["mcp-protocol-version"] || null, accept: req.headers["accept"] || null });
    if (req.headers["authorization"] !== "Bearer t0k") return json(res, 401, { error: "no token" });
    if (req.method === "GET") return json(res, 405, { error: "no listening stream" });
    if (req.method === "DELETE") { if (sid && sid === session) session = null; return json(res, 200); }
    if (msg.method === "initialize") {
      sessions += 1;
      session = "sess-" + sessions;
      return json(res, 200, { jsonrpc: "2.0", id: msg.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: { listChanged: true } }, serverInfo: { name: "fake-http", version: "1" } } }, { "Mcp-Session-Id": session });
    }
    if (sid !== session || session === null) return json(res, sid ? 404 : 400, { error: "unknown session" });
    if (req.headers["mcp-protocol-version"] !== "2025-06-18") return json(res, 400, { error: "no protocol version" });
    if (msg.id === undefined) { res.writeHead(202); return res.end(); }
    if (msg.method === "tools/list") {
      if (!msg.params || !msg.params.cursor) return json(res, 200, { jsonrpc: "2.0", id: msg.id, result: { tools: tools.slice(0, 3), nextCursor: "p2" } });
      return json(res, 200, { jsonrpc: "2.0", id: msg.id, result: { tools: tools.slice(3) } });
    }
    if (msg.method === "tools/call") return call(msg, res);
    return json(res, 200, { jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "no such method" } });
  });
});
server.listen(0, "127.0.0.1", () => { process.stdout.write(server.address().port + "\n"); });
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
