#!/usr/bin/env python3
"""`ping` while an MCP server floods progress notices (issue 30, item 3).

    cargo build --release
    python3 benches/mcp_progress_flood.py target/release/tui-gateway [OTHER_BINARY ...]

For each binary: a fresh HERMES_HOME whose config.yaml runs tests/mcp/fake_server.js, a session
whose prompt calls its `slow` tool with `flood: 100000` (100,000 notifications/progress at once,
then the result), and a `ping` every 2 ms until the turn ends. Prints the pings' round trips and
how many tool.progress / tool.output events reached the client. Not run by CI (needs node).
"""
import json, os, shutil, subprocess, sys, tempfile, threading, time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SERVER = os.path.join(ROOT, "tests", "mcp", "fake_server.js")
NOTICES = 100_000


def measure(binary):
    home = tempfile.mkdtemp(prefix="tuigw-progress-flood-")
    try:
        with open(os.path.join(home, "config.yaml"), "w") as f:
            f.write(f'mcp_servers:\n  fake:\n    command: node\n    args: ["{SERVER}", "good", "", "{home}/notes"]\n')
        env = {k: v for k, v in os.environ.items() if not k.startswith(("HERMES_", "TUI_GATEWAY_"))}
        env["HERMES_HOME"] = home
        p = subprocess.Popen([os.path.abspath(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, env=env, cwd=home)
        lock, answers, sent = threading.Lock(), {}, {}
        rtts, counts = [], {"tool.progress": 0, "tool.output": 0}
        ended = threading.Event()
        next_id = [0]

        def send(method, params):
            with lock:
                next_id[0] += 1
                i = next_id[0]
                sent[i] = time.perf_counter()
                p.stdin.write((json.dumps({"jsonrpc": "2.0", "id": i, "method": method, "params": params}) + "\n").encode())
                p.stdin.flush()
            return i

        def read():
            for line in p.stdout:
                at = time.perf_counter()
                f = json.loads(line)
                if f.get("method") == "event":
                    kind = f["params"]["type"]
                    if kind in counts:
                        counts[kind] += 1
                    if kind == "message.complete":
                        ended.set()
                elif "id" in f:
                    answers[f["id"]] = (at, f)

        threading.Thread(target=read, daemon=True).start()

        def call(method, params):
            i = send(method, params)
            deadline = time.time() + 30
            while i not in answers:
                if time.time() > deadline:
                    raise SystemExit(f"no answer to {method}")
                time.sleep(0.001)
            return answers.pop(i)[1]

        sid = call("session.create", {})["result"]["session_id"]
        deadline = time.time() + 30
        while "mcp__fake__slow" not in json.dumps(call("tools.show", {"session_id": sid})):
            if time.time() > deadline:
                raise SystemExit("the fake MCP server's tools never appeared")
        send("prompt.submit", {"session_id": sid, "text": "%mcp__fake__slow " + json.dumps({"flood": NOTICES})})
        pings = []
        while not ended.is_set():
            pings.append(send("ping", {}))
            time.sleep(0.002)
        deadline = time.time() + 10
        while any(i not in answers for i in pings) and time.time() < deadline:
            time.sleep(0.001)
        rtts = sorted(answers[i][0] - sent[i] for i in pings if i in answers)
        q = lambda x: rtts[min(len(rtts) - 1, int(len(rtts) * x))] * 1000
        print(f"{binary}: {len(rtts)} pings, p50 {q(0.5):.2f} ms, p99 {q(0.99):.2f} ms, max {rtts[-1] * 1000:.2f} ms; "
              f"{counts['tool.progress']} tool.progress and {counts['tool.output']} tool.output for {NOTICES} notices")
        p.stdin.close()
        p.wait(timeout=30)
    finally:
        shutil.rmtree(home, ignore_errors=True)


for b in sys.argv[1:] or [os.path.join(ROOT, "target", "release", "tui-gateway")]:
    measure(b)
