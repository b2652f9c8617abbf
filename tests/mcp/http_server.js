// A small streamable HTTP MCP server for the gateway's tests (Node, no packages), as the MCP
// specification (2025-06-18) describes the transport. Arguments: the log file (one JSON line
// per request it gets: method, JSON-RPC method, session, version, Accept and Last-Event-ID
// headers, the connection's number), a marker, and a mode: "no-get" to answer the listening
// GET with 405, "short-keepalive" to close a connection idle for 100 ms (and log
// {http: "closed", connection}). It prints its port on stdout. Tools (two pages of tools/list): echo (a JSON answer),
// slow (an SSE stream: progress notifications, then the answer), drop (closes the connection
// mid-answer), html (a wrong content type), flood (an SSE stream that never ends), expire
// (forgets the session: the next requests get 404 until the client initialises again),
// hang (progress, then nothing), announce (adds the tool "late" and says so on the listening
// stream), cut (drops the listening stream, then adds "after_cut": the list_changed is only
// replayed to a GET whose Last-Event-ID names an earlier event), resume (an SSE answer cut
// after an event with an id, after a `retry: 300`; the answer comes to a GET resuming from
// that id; the cut is logged with its time, as every request is).
// Events of the listening stream have ids L-1, L-2, …; an answer's stream P<request>-1, -2.
// A DELETE is answered 200 ms late; "DELETE answered" is logged if the client was still there.
const http = require("http");
const fs = require("fs");
const log = process.argv[2];
const marker = process.argv[3] || "";
const noGet = process.argv[4] === "no-get";
const shortKeepAlive = process.argv[4] === "short-keepalive";
let session = null;
let sessions = 0;
let connections = 0;
// The listening stream, and every event sent (or due) on it: [id, message].
let listener = null;
const listened = [];
// Cut answers' remaining events, by the id of their last event sent.
const cutAnswers = {};
const tools = [
  { name: "echo", description: "Say it back", inputSchema: { type: "object", properties: { text: { type: "string" } } } },
  { name: "slow", description: "Progress, then the answer", inputSchema: { type: "object" } },
  { name: "drop", description: "Close mid-answer", inputSchema: { type: "object" } },
  { name: "html", description: "Wrong content type", inputSchema: { type: "object" } },
  { name: "flood", description: "An endless stream", inputSchema: { type: "object" } },
  { name: "expire", description: "Forget the session", inputSchema: { type: "object" } },
  { name: "hang", description: "Progress, then never an answer", inputSchema: { type: "object" } },
  { name: "announce", description: "Add a tool, say so on the listening stream", inputSchema: { type: "object" } },
  { name: "cut", description: "Drop the listening stream, add a tool", inputSchema: { type: "object" } },
  { name: "resume", description: "An answer cut after an event with an id", inputSchema: { type: "object" } },
];
function note(entry) { fs.appendFileSync(log, JSON.stringify(entry) + "\n"); }
function json(res, status, body, headers) {
  res.writeHead(status, Object.assign({ "Content-Type": "application/json" }, headers || {}));
  res.end(body === undefined ? "" : JSON.stringify(body));
}
function text(id, t) { return { jsonrpc: "2.0", id, result: { content: [{ type: "text", text: t }] } }; }
function event(res, msg, id) { res.write((id ? "id: " + id + "\n" : "") + "event: message\ndata: " + JSON.stringify(msg) + "\n\n"); }
function announce(msg) {
  const id = "L-" + (listened.length + 1);
  listened.push([id, msg]);
  if (listener) event(listener, msg, id);
}
const listChanged = { jsonrpc: "2.0", method: "notifications/tools/list_changed" };
function addTool(name) {
  if (!tools.some((t) => t.name === name)) tools.push({ name, description: "Added later", inputSchema: { type: "object" } });
}
function listen(req, res) {
  if (!(req.headers["accept"] || "").includes("text/event-stream")) return json(res, 406, { error: "not acceptable" });
  const last = req.headers["last-event-id"] || null;
  res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
  if (last && cutAnswers[last]) {
    // Resuming a cut answer: the rest of its stream, then the end.
    const [id, msg] = cutAnswers[last];
    delete cutAnswers[last];
    event(res, msg, id);
    return res.end();
  }
  res.write("retry: 50\n\n");
  listener = res;
  res.on("close", () => { if (listener === res) listener = null; });
  const from = last ? listened.findIndex(([id]) => id === last) + 1 : listened.length;
  for (const [id, msg] of listened.slice(from)) event(res, msg, id);
}
function call(msg, res) {
  const name = msg.params.name, args = msg.params.arguments || {};
  const token = msg.params._meta && msg.params._meta.progressToken;
  if (name === "echo") return json(res, 200, text(msg.id, "echo: " + args.text + marker + " (session " + sessions + ")"));
  if (name === "late") return json(res, 200, text(msg.id, "late tool here"));
  if (name === "after_cut") return json(res, 200, text(msg.id, "after the cut"));
  if (name === "announce") {
    addTool("late");
    announce(listChanged);
    return json(res, 200, text(msg.id, "announced"));
  }
  if (name === "cut") {
    if (listener) listener.socket.destroy();
    listener = null;
    addTool("after_cut");
    announce(listChanged);
    return json(res, 200, text(msg.id, "cut"));
  }
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
  } else if (name === "resume") {
    const id = "P" + msg.id + "-1";
    cutAnswers[id] = ["P" + msg.id + "-2", text(msg.id, "resumed after " + id)];
    // Asks to be left alone 300 ms before the client resumes (the cut's time is logged).
    res.write("retry: 300\n\n");
    event(res, { jsonrpc: "2.0", method: "notifications/progress", params: { progressToken: token, progress: 1, message: "before the cut" } }, id);
    setTimeout(() => { note({ http: "cut", last_event_id: id, at: Date.now() }); res.socket.destroy(); }, 30);
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
    note({ http: req.method, method: msg.method || null, request: (msg.params && msg.params.requestId) || null, session: sid, version: req.headers["mcp-protocol-version"] || null, accept: req.headers["accept"] || null, last_event_id: req.headers["last-event-id"] || null, connection: req.socket.number, at: Date.now() });
    if (req.headers["authorization"] !== "Bearer t0k") return json(res, 401, { error: "no token" });
    if (req.method === "GET" && noGet) return json(res, 405, { error: "no listening stream" });
    if (req.method === "DELETE") {
      // Answered a little later, and logged only if the client still waits for it then.
      if (sid && sid === session) session = null;
      return setTimeout(() => {
        if (res.socket && !res.socket.destroyed) note({ http: "DELETE answered", session: sid });
        json(res, 200);
      }, 200);
    }
    if (msg.method === "initialize") {
      sessions += 1;
      session = "sess-" + sessions;
      return json(res, 200, { jsonrpc: "2.0", id: msg.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: { listChanged: true } }, serverInfo: { name: "fake-http", version: "1" } } }, { "Mcp-Session-Id": session });
    }
    if (sid !== session || session === null) return json(res, sid ? 404 : 400, { error: "unknown session" });
    if (req.headers["mcp-protocol-version"] !== "2025-06-18") return json(res, 400, { error: "no protocol version" });
    if (req.method === "GET") return listen(req, res);
    if (msg.id === undefined) { res.writeHead(202); return res.end(); }
    if (msg.method === "tools/list") {
      if (!msg.params || !msg.params.cursor) return json(res, 200, { jsonrpc: "2.0", id: msg.id, result: { tools: tools.slice(0, 3), nextCursor: "p2" } });
      return json(res, 200, { jsonrpc: "2.0", id: msg.id, result: { tools: tools.slice(3) } });
    }
    if (msg.method === "tools/call") return call(msg, res);
    return json(res, 200, { jsonrpc: "2.0", id: msg.id, error: { code: -32601, message: "no such method" } });
  });
});
server.on("connection", (socket) => {
  connections += 1;
  socket.number = connections;
  if (shortKeepAlive) socket.on("close", () => note({ http: "closed", connection: socket.number }));
});
if (shortKeepAlive) server.keepAliveTimeout = 100;
server.listen(0, "127.0.0.1", () => { process.stdout.write(server.address().port + "\n"); });
process.stdin.on("end", () => process.exit(0));
process.stdin.resume();
