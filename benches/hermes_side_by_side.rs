//! Side by side with Hermes' Python gateway: what each gateway sends the model for the same
//! scripted conversation, and what a session of it costs on Claude with prompt caching.
//!
//! Run it through its script, which first installs the Python gateway (hermes-agent 0.18.2 from
//! PyPI, every package pinned with its hash in `benches/hermes/requirements.txt`) into
//! `target/hermes-venv`:
//!
//! ```text
//! bash benches/hermes_side_by_side.sh                     # both wires
//! bash benches/hermes_side_by_side.sh --wire anthropic    # anthropic | openrouter
//! bash benches/hermes_side_by_side.sh --dump /tmp/bodies  # every request body kept as a file
//! bash benches/hermes_side_by_side.sh --quiet-s 10        # the quiet period after the last turn
//! cargo bench --bench hermes_side_by_side -- --hermes-python PATH   # a Python of your own
//! ```
//!
//! Each gateway runs in turn, spawned as the TUI spawns it (`-m tui_gateway.entry`, stdio,
//! `HERMES_HOME`, `HERMES_CWD`), with a fresh `HERMES_HOME` holding the same `config.yaml` and
//! `.env`, a fresh copy of the same workspace (at a path of the same length), and the same
//! minimal environment. It is driven as the TUI drives it: `session.create`, then one
//! `prompt.submit` per user turn, waiting for `message.complete`. Each gateway has its own fake
//! model server (`tests/mockai`, a thread of this process) that records every request body and
//! answers from the same script: 10 user turns, 30 model calls, 20 of them asking for tools
//! (`terminal` and `read_file` on the workspace's files, some two at once), 10 answering. The
//! bench checks that each gateway ran the tools (each result must carry what the file holds)
//! and ended each turn with the scripted answer.
//!
//! Two wires, each a route on which Hermes puts Claude's cache breakpoints
//! (`anthropic_prompt_cache_policy`):
//!
//! - `anthropic`: `provider: anthropic`, model `claude-sonnet-4-5`, the fake at
//!   `ANTHROPIC_BASE_URL` (Messages API, "native" breakpoints);
//! - `openrouter`: `provider: openrouter`, model `anthropic/claude-sonnet-4.5`, Chat Completions
//!   at `OPENROUTER_BASE_URL=http://openrouter.ai/api/v1` reached through the fake as the
//!   `http_proxy` (Hermes only marks breakpoints when the host is `openrouter.ai`; nothing
//!   leaves the machine).
//!
//! Measured per model call: the request body's bytes, and its input tokens, estimated for both
//! gateways by one rule: the prompt (the model id, every tool definition, the system prompt,
//! every message block, in the order the API caches them: tools, system, messages) written as
//! compact JSON without its `cache_control` markers, one token per 4 bytes, rounded up. The
//! body's other bytes (`max_tokens`, `stream`, JSON punctuation around the prompt, the markers
//! themselves) are not tokens.
//!
//! Cost: the fake simulates Anthropic's prompt cache. The prefix of the prompt up to each block
//! that carries `cache_control` (at least 1,024 tokens, Sonnet's minimum) is a cache write the
//! first time a request has it and a cache read when a later request repeats it byte for byte;
//! a request reads its longest cached breakpoint prefix, writes the rest up to its last
//! breakpoint, and pays the remainder as uncached input (the 5-minute TTL is not simulated).
//! The cost is also given with the API's lookback simulated (a breakpoint also hits a prefix
//! written up to 20 blocks before it). Output tokens are the scripted answer's (its text and tool
//! inputs, bytes / 4), the same for both. Prices are Hermes' table for `claude-sonnet-4-5`
//! (`src/model/pricing.rs`; Anthropic's prices, which OpenRouter passes on). The fake reports
//! these counts back in each answer's usage, as the API would.
//!
//! Calls outside the script (Hermes' session title, its skill and memory reviews) are answered
//! with a short text, measured the same way and reported apart. Hermes makes some of them from
//! threads of its own after a turn has ended, with nothing to say when they are done, so after
//! the last turn each gateway is left running until its fake has had no request for a quiet
//! period (`--quiet-s`, default 5 s; the report gives how long after the last turn the last
//! request came). Results are printed as ratios ours / Hermes'.
//! Targets: every call smaller than Hermes' matching call; the session at most half Hermes' cost.

// The bench reads and writes its own fixtures with std's plain calls (clippy.toml is for src/).
#![allow(clippy::disallowed_methods)]

mod common;
#[path = "../tests/mockai/mod.rs"]
mod mockai;

use std::collections::HashSet;
use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::Hasher;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use common::{Client, TempDir, arg_string, event_type, gateway_bin};
use mockai::anthropic as msgs;
use mockai::{MockAi, Recorded, Reply, Stream};
use tui_gateway::model::TokenUsage;
use tui_gateway::model::pricing;

/// How long the gateway may take to say it is ready (Hermes imports a lot).
const READY: Duration = Duration::from_secs(180);
/// How long one user turn may take.
const TURN: Duration = Duration::from_secs(300);
/// How long the wait for a gateway's own calls after the last turn may take in all (the quiet
/// period itself is `--quiet-s`, default 5 s).
const QUIET_MAX: Duration = Duration::from_secs(120);
/// Sonnet's smallest cacheable prefix, in tokens.
const MIN_CACHE_TOKENS: u64 = 1024;
const MODEL_PRICED: &str = "claude-sonnet-4-5";

// ---------------------------------------------------------------------------------------------
// The script
// ---------------------------------------------------------------------------------------------

struct ToolCall {
    id: String,
    name: &'static str,
    input: Value,
    /// Text the tool's result must hold (a tool that did not run would not have it).
    expect: Option<&'static str>,
}

/// One model answer: tool calls (after an optional short text), or the turn's final text.
struct Call {
    text: &'static str,
    tools: Vec<ToolCall>,
}

impl Call {
    /// Output tokens: the answer's text and tool calls, bytes / 4.
    fn output_tokens(&self) -> u64 {
        let bytes = self.text.len()
            + self
                .tools
                .iter()
                .map(|t| t.name.len() + t.input.to_string().len())
                .sum::<usize>();
        tokens(bytes)
    }
}

struct Turn {
    prompt: &'static str,
    calls: Vec<Call>,
}

/// Numbers the script's tool calls (`toolu_bench_01`, …) in the order they are written.
struct Ids(usize);

impl Ids {
    fn tool(&mut self, name: &'static str, input: Value, expect: Option<&'static str>) -> ToolCall {
        self.0 += 1;
        ToolCall {
            id: format!("toolu_bench_{:02}", self.0),
            name,
            input,
            expect,
        }
    }

    fn sh(&mut self, command: &str, expect: Option<&'static str>) -> ToolCall {
        self.tool("terminal", json!({ "command": command }), expect)
    }

    fn read(&mut self, path: &str, expect: Option<&'static str>) -> ToolCall {
        self.tool("read_file", json!({ "path": path }), expect)
    }
}

fn script() -> Vec<Turn> {
    let mut ids = Ids(0);
    let ask = |text: &'static str, tools: Vec<ToolCall>| Call { text, tools };
    let say = |text: &'static str| Call {
        text,
        tools: Vec::new(),
    };
    vec![
        Turn {
            prompt: "Give me an overview of this project.",
            calls: vec![
                ask(
                    "I'll look at the layout first.",
                    vec![ids.sh("ls -R", Some("store.py"))],
                ),
                ask("", vec![ids.read("README.md", Some("stock levels"))]),
                say(ANSWERS[0]),
            ],
        },
        Turn {
            prompt: "How does the store keep items?",
            calls: vec![
                ask(
                    "",
                    vec![ids.read("src/inventory/store.py", Some("class Store"))],
                ),
                ask(
                    "Let me list its methods.",
                    vec![ids.sh("grep -n 'def ' src/inventory/store.py", Some("def add"))],
                ),
                say(ANSWERS[1]),
            ],
        },
        Turn {
            prompt: "Which tests cover the store?",
            calls: vec![
                ask(
                    "",
                    vec![
                        ids.sh("ls tests", Some("test_store.py")),
                        ids.read("tests/test_store.py", Some("def test_add")),
                    ],
                ),
                ask(
                    "",
                    vec![ids.sh("grep -c 'def test_' tests/test_store.py", Some("14"))],
                ),
                say(ANSWERS[2]),
            ],
        },
        Turn {
            prompt: "What does the report module print?",
            calls: vec![
                ask(
                    "",
                    vec![ids.read("src/inventory/report.py", Some("def render"))],
                ),
                ask(
                    "And how large each module is:",
                    vec![ids.sh("wc -l src/inventory/*.py", Some("total"))],
                ),
                say(ANSWERS[3]),
            ],
        },
        Turn {
            prompt: "Where is the configuration read?",
            calls: vec![
                ask(
                    "",
                    vec![ids.sh("grep -rn 'config' src", Some("load_config"))],
                ),
                ask(
                    "",
                    vec![ids.read("pyproject.toml", Some("[tool.inventory]"))],
                ),
                say(ANSWERS[4]),
            ],
        },
        Turn {
            prompt: "What changed in the last release?",
            calls: vec![
                ask("", vec![ids.read("CHANGELOG.md", Some("## 2.4.0"))]),
                ask(
                    "",
                    vec![ids.sh("head -n 5 CHANGELOG.md", Some("Changelog"))],
                ),
                say(ANSWERS[5]),
            ],
        },
        Turn {
            prompt: "Show me the app's entry point.",
            calls: vec![
                ask("", vec![ids.read("src/inventory/app.py", Some("def main"))]),
                ask(
                    "",
                    vec![ids.sh("grep -n -A 3 'def main' src/inventory/app.py", Some("argv"))],
                ),
                say(ANSWERS[6]),
            ],
        },
        Turn {
            prompt: "Are there any TODOs left?",
            calls: vec![
                ask(
                    "I'll search the whole tree.",
                    vec![ids.sh("grep -rn TODO src tests", Some("TODO"))],
                ),
                ask(
                    "",
                    vec![ids.tool(
                        "read_file",
                        json!({"path": "src/inventory/report.py", "offset": 1, "limit": 20}),
                        None,
                    )],
                ),
                say(ANSWERS[7]),
            ],
        },
        Turn {
            prompt: "How big is the code base?",
            calls: vec![
                ask(
                    "",
                    vec![
                        ids.sh("find . -name '*.py' | sort", Some("app.py")),
                        ids.sh(
                            "wc -c README.md CHANGELOG.md pyproject.toml",
                            Some("README.md"),
                        ),
                    ],
                ),
                ask(
                    "",
                    vec![ids.sh("cat src/inventory/__init__.py", Some("__version__"))],
                ),
                say(ANSWERS[8]),
            ],
        },
        Turn {
            prompt: "Summarize what we found, with the riskiest spot first.",
            calls: vec![
                ask(
                    "",
                    vec![ids.tool(
                        "read_file",
                        json!({"path": "src/inventory/store.py", "offset": 1, "limit": 30}),
                        None,
                    )],
                ),
                ask(
                    "",
                    vec![ids.sh("grep -n 'raise' src/inventory/*.py", Some("raise"))],
                ),
                say(ANSWERS[9]),
            ],
        },
    ]
}

const ANSWERS: [&str; 10] = [
    "This is `inventory`, a small Python package that tracks stock levels for a warehouse. \
     The code lives in `src/inventory/`: `store.py` holds the items, `report.py` prints \
     summaries and `app.py` is the command-line entry point. Tests are in `tests/`, and \
     `pyproject.toml` carries the package metadata and its settings.",
    "`Store` keeps its items in a dict keyed by SKU, each an `Item` with a name, a quantity and \
     a reorder level. `add` creates or tops up an item, `remove` takes stock out and raises \
     `OutOfStock` when there is not enough, and `below_reorder` lists what needs ordering. \
     Nothing is persisted: `save` and `load` write and read a JSON file when asked.",
    "`tests/test_store.py` has 14 tests. They cover adding new and existing items, removing \
     stock (including the `OutOfStock` error), the reorder list, and a save/load round trip \
     through a temporary file. Nothing tests `report.py` or the command line yet.",
    "`report.py` renders a fixed-width table: one row per item with its SKU, name, quantity \
     and reorder level, items under their reorder level flagged with `!`, and a total line. \
     `render` returns the text and `print_report` writes it to stdout. At about 80 lines it \
     is the smallest of the three modules.",
    "Configuration is read in `app.py` by `load_config`, which takes the `[tool.inventory]` \
     table of `pyproject.toml`: the data file's path, the default reorder level and the \
     report's width. Nothing else reads configuration; the store and the report get their \
     settings as arguments.",
    "Version 2.4.0 added the reorder list and the `--below` flag, made `remove` raise \
     `OutOfStock` instead of going negative, and fixed the report's column widths for long \
     names. 2.3.x were bug fixes to loading older data files.",
    "`main(argv)` in `app.py` parses the arguments (`add`, `remove`, `report`, `--below`), \
     loads the configuration and the store, runs the command, saves the store when it \
     changed, and returns the exit code. `python -m inventory` calls it through `__main__`.",
    "There are three TODOs: `report.py` wants a CSV output and a sort order option, and \
     `tests/test_store.py` notes that concurrent saves are not tested. None of them marks a \
     known bug.",
    "The package is small: six Python files of a few hundred lines in all, with the README, \
     the changelog and `pyproject.toml` beside them. `__init__.py` only exports the version \
     and the two main classes.",
    "Riskiest first: `Store.save` writes the data file in place, so a crash mid-write can \
     lose the stock list (writing to a temporary file and renaming would fix it). Then: no \
     tests for the report or the command line, and three TODOs in the report. The store \
     itself is simple and well covered.",
];

// ---------------------------------------------------------------------------------------------
// The workspace both gateways work in
// ---------------------------------------------------------------------------------------------

fn write_workspace(ws: &Path) {
    let file = |rel: &str, text: String| {
        let path = ws.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    };
    file(
        "README.md",
        "# inventory\n\nA small tool that tracks stock levels for a warehouse: items by SKU, \
         quantities, reorder levels, and a printed report.\n\n## Use\n\n```sh\n\
         python -m inventory add SKU-001 \"Hex bolts M6\" 500\npython -m inventory remove \
         SKU-001 20\npython -m inventory report --below\n```\n\n## Layout\n\n\
         - `src/inventory/store.py`: the items and their quantities\n\
         - `src/inventory/report.py`: the printed report\n\
         - `src/inventory/app.py`: the command line\n\
         - `tests/`: the tests (pytest)\n\n## Configuration\n\nThe `[tool.inventory]` table \
         of `pyproject.toml`: `data_file`, `reorder_level`, `report_width`.\n"
            .to_string(),
    );
    file(
        "pyproject.toml",
        "[project]\nname = \"inventory\"\nversion = \"2.4.0\"\nrequires-python = \">=3.10\"\n\
         dependencies = []\n\n[project.scripts]\ninventory = \"inventory.app:main\"\n\n\
         [tool.inventory]\ndata_file = \"stock.json\"\nreorder_level = 10\nreport_width = 72\n\n\
         [tool.pytest.ini_options]\ntestpaths = [\"tests\"]\n"
            .to_string(),
    );
    let mut changelog = String::from(
        "# Changelog\n\n## 2.4.0\n\n- Reorder list and `--below`.\n- `remove` raises `OutOfStock` instead of going negative.\n- Report columns fit long names.\n",
    );
    for minor in (0..4).rev() {
        changelog.push_str(&format!(
            "\n## 2.3.{minor}\n\n- Load data files written by 2.{minor}.x.\n- Fix a crash on an empty store (case {minor}).\n"
        ));
    }
    for minor in (0..3).rev() {
        changelog.push_str(&format!(
            "\n## 2.{minor}.0\n\n- Items gained reorder levels in step {minor}.\n- The report prints totals.\n"
        ));
    }
    file("CHANGELOG.md", changelog);
    file(
        "src/inventory/__init__.py",
        "\"\"\"Stock levels for a warehouse.\"\"\"\n\nfrom .store import Item, Store\n\n\
         __version__ = \"2.4.0\"\n__all__ = [\"Item\", \"Store\", \"__version__\"]\n"
            .to_string(),
    );
    file(
        "src/inventory/__main__.py",
        "import sys\n\nfrom .app import main\n\nsys.exit(main(sys.argv[1:]))\n".to_string(),
    );
    let mut store = String::from(
        "\"\"\"The items and their quantities.\"\"\"\n\nimport json\nfrom dataclasses import dataclass, asdict\n\n\n\
         class OutOfStock(Exception):\n    \"\"\"Raised when more is removed than is held.\"\"\"\n\n\n\
         @dataclass\nclass Item:\n    sku: str\n    name: str\n    quantity: int = 0\n    reorder_level: int = 10\n\n\n\
         class Store:\n    \"\"\"Items by SKU.\"\"\"\n\n    def __init__(self, reorder_level=10):\n        self.items = {}\n        self.reorder_level = reorder_level\n\n\
             def add(self, sku, name, quantity):\n        \"\"\"Creates the item or tops it up.\"\"\"\n        item = self.items.get(sku)\n        if item is None:\n            item = Item(sku, name, 0, self.reorder_level)\n            self.items[sku] = item\n        item.quantity += quantity\n        return item\n\n\
             def remove(self, sku, quantity):\n        item = self.items[sku]\n        if quantity > item.quantity:\n            raise OutOfStock(f\"{sku}: {item.quantity} held, {quantity} asked\")\n        item.quantity -= quantity\n        return item\n\n\
             def below_reorder(self):\n        return sorted((i for i in self.items.values() if i.quantity < i.reorder_level), key=lambda i: i.sku)\n\n\
             def save(self, path):\n        with open(path, \"w\") as f:\n            json.dump([asdict(i) for i in self.items.values()], f, indent=2)\n\n\
             @classmethod\n    def load(cls, path, reorder_level=10):\n        store = cls(reorder_level)\n        with open(path) as f:\n            for row in json.load(f):\n                store.items[row[\"sku\"]] = Item(**row)\n        return store\n",
    );
    for (i, what) in ["count", "value", "skus", "names"].iter().enumerate() {
        store.push_str(&format!(
            "\n\ndef total_{what}(store):\n    \"\"\"The store's total {what} (helper {i}).\"\"\"\n    \
             values = [getattr(item, \"quantity\") for item in store.items.values()]\n    \
             if not values:\n        raise ValueError(\"empty store\")\n    return sum(values)\n"
        ));
    }
    file("src/inventory/store.py", store);
    let mut report = String::from(
        "\"\"\"The printed report.\"\"\"\n\n# TODO: a CSV output.\n# TODO: a sort order option.\n\n\
         HEADER = (\"SKU\", \"Name\", \"Qty\", \"Reorder\")\n\n\n\
         def render(store, width=72, below_only=False):\n    \"\"\"The report as text.\"\"\"\n    items = store.below_reorder() if below_only else sorted(store.items.values(), key=lambda i: i.sku)\n    name_width = max(10, width - 32)\n    lines = [f\"{HEADER[0]:<12}{HEADER[1]:<{name_width}}{HEADER[2]:>8}{HEADER[3]:>10}\"]\n    lines.append(\"-\" * width)\n    for item in items:\n        flag = \"!\" if item.quantity < item.reorder_level else \" \"\n        lines.append(f\"{item.sku:<12}{item.name[:name_width]:<{name_width}}{item.quantity:>8}{item.reorder_level:>9}{flag}\")\n    lines.append(\"-\" * width)\n    lines.append(f\"{len(items)} items, {sum(i.quantity for i in items)} units\")\n    return \"\\n\".join(lines)\n\n\n\
         def print_report(store, width=72, below_only=False):\n    print(render(store, width, below_only))\n",
    );
    for col in ["sku", "name", "quantity"] {
        report.push_str(&format!(
            "\n\ndef column_{col}(store):\n    return [getattr(item, \"{col}\") for item in store.items.values()]\n"
        ));
    }
    file("src/inventory/report.py", report);
    file(
        "src/inventory/app.py",
        "\"\"\"The command line.\"\"\"\n\nimport argparse\nimport os\nimport tomllib\n\n\
         from .report import print_report\nfrom .store import OutOfStock, Store\n\n\n\
         def load_config(path=\"pyproject.toml\"):\n    \"\"\"The [tool.inventory] table, with defaults.\"\"\"\n    config = {\"data_file\": \"stock.json\", \"reorder_level\": 10, \"report_width\": 72}\n    if os.path.exists(path):\n        with open(path, \"rb\") as f:\n            config.update(tomllib.load(f).get(\"tool\", {}).get(\"inventory\", {}))\n    return config\n\n\n\
         def parser():\n    p = argparse.ArgumentParser(prog=\"inventory\")\n    sub = p.add_subparsers(dest=\"command\", required=True)\n    add = sub.add_parser(\"add\")\n    add.add_argument(\"sku\")\n    add.add_argument(\"name\")\n    add.add_argument(\"quantity\", type=int)\n    remove = sub.add_parser(\"remove\")\n    remove.add_argument(\"sku\")\n    remove.add_argument(\"quantity\", type=int)\n    report = sub.add_parser(\"report\")\n    report.add_argument(\"--below\", action=\"store_true\")\n    return p\n\n\n\
         def main(argv):\n    args = parser().parse_args(argv)\n    config = load_config()\n    path = config[\"data_file\"]\n    store = Store.load(path, config[\"reorder_level\"]) if os.path.exists(path) else Store(config[\"reorder_level\"])\n    if args.command == \"add\":\n        store.add(args.sku, args.name, args.quantity)\n    elif args.command == \"remove\":\n        try:\n            store.remove(args.sku, args.quantity)\n        except OutOfStock as e:\n            print(f\"error: {e}\")\n            return 1\n    else:\n        print_report(store, config[\"report_width\"], args.below)\n        return 0\n    store.save(path)\n    return 0\n"
            .to_string(),
    );
    let mut tests = String::from(
        "import pytest\n\nfrom inventory.store import OutOfStock, Store\n\n# TODO: concurrent saves are not tested.\n\n\n\
         def test_add_new():\n    s = Store()\n    assert s.add(\"A\", \"a\", 5).quantity == 5\n\n\n\
         def test_add_existing():\n    s = Store()\n    s.add(\"A\", \"a\", 5)\n    assert s.add(\"A\", \"a\", 2).quantity == 7\n\n\n\
         def test_remove_too_much():\n    s = Store()\n    s.add(\"A\", \"a\", 1)\n    with pytest.raises(OutOfStock):\n        s.remove(\"A\", 2)\n\n\n\
         def test_save_load(tmp_path):\n    s = Store()\n    s.add(\"A\", \"a\", 3)\n    s.save(tmp_path / \"s.json\")\n    assert Store.load(tmp_path / \"s.json\").items[\"A\"].quantity == 3\n",
    );
    for i in 0..10 {
        tests.push_str(&format!(
            "\n\ndef test_remove_{i}():\n    s = Store()\n    s.add(\"S{i}\", \"item {i}\", {q})\n    s.remove(\"S{i}\", {i})\n    assert s.items[\"S{i}\"].quantity == {r}\n    assert (s.items[\"S{i}\"] in s.below_reorder()) == ({r} < 10)\n",
            q = 10 + i * 3,
            r = 10 + i * 2,
        ));
    }
    file("tests/test_store.py", tests);
}

// ---------------------------------------------------------------------------------------------
// The prompt as the API caches it, and the cache
// ---------------------------------------------------------------------------------------------

fn tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

/// `v` without its `cache_control` key (an object), else `v`.
fn unmarked(v: &Value) -> (Value, bool) {
    match v {
        Value::Object(m) if m.contains_key("cache_control") => {
            let mut m = m.clone();
            m.remove("cache_control");
            (Value::Object(m), true)
        }
        _ => (v.clone(), false),
    }
}

/// The prompt of a request as a list of pieces in cache order (model, tools, system, messages),
/// each its compact JSON and whether a breakpoint closes it.
fn prompt_pieces(body: &Value) -> Vec<(String, bool)> {
    let mut out: Vec<(String, bool)> = Vec::new();
    out.push((json!({"model": body["model"]}).to_string(), false));
    for tool in body["tools"].as_array().into_iter().flatten() {
        let (t, marked) = unmarked(tool);
        out.push((t.to_string(), marked));
    }
    // A string is a single text block to the API: the same tokens, the same cache prefix.
    let text_block = |s: &Value| json!({"type": "text", "text": s});
    match &body["system"] {
        Value::String(_) => out.push((
            json!({"system": text_block(&body["system"])}).to_string(),
            false,
        )),
        Value::Array(blocks) => {
            for b in blocks {
                let (b, marked) = unmarked(b);
                out.push((json!({"system": b}).to_string(), marked));
            }
        }
        _ => {}
    }
    for m in body["messages"].as_array().into_iter().flatten() {
        let role = &m["role"];
        let (_, whole_marked) = unmarked(m);
        let mut parts: Vec<(Value, bool)> = match &m["content"] {
            Value::Array(blocks) => blocks.iter().map(unmarked).collect(),
            Value::Null => Vec::new(),
            Value::String(_) => vec![(text_block(&m["content"]), false)],
            other => vec![(other.clone(), false)],
        };
        // Chat Completions: the tool calls and the id a tool result answers are prompt too.
        for call in m["tool_calls"].as_array().into_iter().flatten() {
            parts.push(unmarked(call));
        }
        if parts.is_empty() {
            parts.push((Value::Null, false));
        }
        if whole_marked {
            parts.last_mut().unwrap().1 = true;
        }
        for (part, marked) in parts {
            let piece = match m.get("tool_call_id") {
                Some(id) => json!({"role": role, "tool_call_id": id, "part": part}),
                None => json!({"role": role, "part": part}),
            };
            out.push((piece.to_string(), marked));
        }
    }
    out
}

/// One model call as measured.
#[derive(Clone, Debug)]
struct Measured {
    /// Scripted call number (0-based), `None` for a call outside the script.
    step: Option<usize>,
    /// What a call outside the script is (its odd user text, or `title` without tools).
    label: String,
    body_bytes: usize,
    /// The cache as specified: a hit only at a breakpoint's own prefix.
    strict: Split,
    /// The API's lookback: a hit up to 20 pieces before a breakpoint.
    lookback: Split,
    output: u64,
    tools: usize,
    /// Each tool definition's name and bytes.
    tool_sizes: Vec<(String, usize)>,
    /// Bytes of the prompt's parts: tool definitions, system prompt, messages, tool results.
    parts: Parts,
    /// Tokens of the prompt before its first message (model, tool definitions, system prompt):
    /// what every call of a session sends again unchanged.
    prefix: u64,
}

impl Measured {
    fn usage(&self, split: &Split) -> TokenUsage {
        TokenUsage {
            input: split.input,
            output: self.output,
            cache_read: split.read,
            cache_write: split.write,
            ..TokenUsage::default()
        }
    }

    fn usd(&self) -> f64 {
        usd(&self.usage(&self.strict))
    }

    /// What the prefix (model, tools, system prompt) cost of this call: the prompt is read,
    /// then written, then uncached, in that order, so the prefix takes the read first.
    fn prefix_usd(&self, split: &Split) -> f64 {
        let read = self.prefix.min(split.read);
        let write = (self.prefix - read).min(split.write);
        usd(&TokenUsage {
            input: self.prefix,
            cache_read: read,
            cache_write: write,
            ..TokenUsage::default()
        })
    }
}

/// Bytes of the prompt before its first message, counted as [`prompt_pieces`] counts them.
fn prefix_bytes(body: &Value) -> usize {
    let mut head = body.clone();
    if let Some(messages) = head.get_mut("messages").and_then(Value::as_array_mut) {
        messages.retain(|m| m["role"] == "system");
    }
    prompt_pieces(&head)
        .iter()
        .map(|(text, _)| text.len())
        .sum()
}

/// Where a request's prompt bytes are (compact JSON, markers removed).
#[derive(Clone, Copy, Debug, Default)]
struct Parts {
    tools: usize,
    system: usize,
    messages: usize,
    tool_results: usize,
}

/// `v` with every `cache_control` key removed, at any depth.
fn without_markers(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| (k.clone(), without_markers(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(without_markers).collect()),
        other => other.clone(),
    }
}

/// Each tool definition's name and bytes (compact JSON, markers removed).
fn tool_sizes(body: &Value) -> Vec<(String, usize)> {
    body["tools"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let name = t["name"].as_str().or(t["function"]["name"].as_str());
            (
                name.unwrap_or("?").to_string(),
                without_markers(t).to_string().len(),
            )
        })
        .collect()
}

fn parts(body: &Value) -> Parts {
    let body = &without_markers(body);
    let len = |v: &Value| if v.is_null() { 0 } else { v.to_string().len() };
    let mut tool_results = 0;
    for m in body["messages"].as_array().into_iter().flatten() {
        if m["role"] == "tool" {
            tool_results += len(&m["content"]);
        }
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" {
                tool_results += len(&b["content"]);
            }
        }
    }
    let system: usize = body["messages"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|m| m["role"] == "system")
        .map(|m| len(&m["content"]))
        .sum::<usize>()
        + len(&body["system"]);
    Parts {
        tools: len(&body["tools"]),
        system,
        messages: len(&body["messages"]) - system.saturating_sub(len(&body["system"])),
        tool_results,
    }
}

/// Hermes' price of `usage` for Claude Sonnet 4.5 at Anthropic.
fn usd(usage: &TokenUsage) -> f64 {
    pricing::price(
        "anthropic",
        "https://api.anthropic.com",
        MODEL_PRICED,
        usage,
    )
    .usd
    .expect("claude-sonnet-4-5 is in the price table")
}

/// The simulated prompt cache: every breakpoint prefix written so far, as (length, hash).
/// `lookback` is how many pieces before a breakpoint a hit is also looked for (0: the
/// breakpoint's own prefix only; the API looks about 20 blocks back).
struct Cache {
    lookback: usize,
    seen: HashSet<(usize, u64)>,
}

/// How one request's input splits.
#[derive(Clone, Copy, Debug, Default)]
struct Split {
    input: u64,
    read: u64,
    write: u64,
    uncached: u64,
    breakpoints: usize,
}

impl Cache {
    fn new(lookback: usize) -> Cache {
        Cache {
            lookback,
            seen: HashSet::new(),
        }
    }

    /// The request's input split into read, written and uncached tokens (the cache updated).
    fn account(&mut self, body: &Value) -> Split {
        let pieces = prompt_pieces(body);
        // (end in bytes, hash of the prefix) after each piece.
        let mut hasher = DefaultHasher::new();
        let mut bytes = 0usize;
        let mut prefixes = Vec::with_capacity(pieces.len());
        for (text, _) in &pieces {
            hasher.write(text.as_bytes());
            bytes += text.len();
            prefixes.push((bytes, hasher.finish()));
        }
        let cacheable = |p: &(usize, u64)| tokens(p.0) >= MIN_CACHE_TOKENS;
        let marks: Vec<usize> = (0..pieces.len()).filter(|&i| pieces[i].1).collect();
        let read = marks
            .iter()
            .flat_map(|&i| (i.saturating_sub(self.lookback)..=i).map(|j| prefixes[j]))
            .filter(|p| cacheable(p) && self.seen.contains(p))
            .map(|p| p.0)
            .max()
            .unwrap_or(0);
        let written: Vec<(usize, u64)> = marks
            .iter()
            .map(|&i| prefixes[i])
            .filter(cacheable)
            .collect();
        let last = written.iter().map(|p| p.0).max().unwrap_or(0).max(read);
        self.seen.extend(written);
        let input = tokens(bytes);
        let (read_t, last_t) = (tokens(read), tokens(last));
        Split {
            input,
            read: read_t,
            write: last_t - read_t,
            uncached: input - last_t,
            breakpoints: marks.len(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The fake model
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Debug)]
enum Wire {
    Anthropic,
    OpenRouter,
}

impl Wire {
    fn name(self) -> &'static str {
        match self {
            Wire::Anthropic => "anthropic",
            Wire::OpenRouter => "openrouter",
        }
    }
}

struct FakeState {
    next: usize,
    strict: Cache,
    lookback: Cache,
    measured: Vec<Measured>,
}

/// Every user text of a request (tool results aside).
fn user_texts(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for m in body["messages"].as_array().into_iter().flatten() {
        if m["role"] != "user" {
            continue;
        }
        match &m["content"] {
            Value::String(s) => out.push(s.clone()),
            Value::Array(blocks) => {
                for b in blocks {
                    if b["type"] == "text" {
                        out.push(b["text"].as_str().unwrap_or("").to_string());
                    }
                }
            }
            _ => {}
        }
    }
    out
}

/// A call of the scripted conversation: it offers tools and every user text in it is one of the
/// script's prompts.
fn is_scripted(body: &Value, prompts: &[&str]) -> bool {
    let has_tools = body["tools"].as_array().is_some_and(|t| !t.is_empty());
    let texts = user_texts(body);
    has_tools && !texts.is_empty() && texts.iter().all(|t| prompts.iter().any(|p| t.contains(p)))
}

fn start_fake(
    wire: Wire,
    calls: Arc<Vec<Call>>,
    prompts: Vec<&'static str>,
) -> (MockAi, Arc<Mutex<FakeState>>) {
    let state = Arc::new(Mutex::new(FakeState {
        next: 0,
        strict: Cache::new(0),
        lookback: Cache::new(20),
        measured: Vec::new(),
    }));
    let st = state.clone();
    let mock = MockAi::start(move |req: &Recorded| {
        let api = req.method == "POST"
            && (req.path.ends_with("/v1/messages") || req.path.ends_with("/chat/completions"));
        if !api {
            return Reply::status(404, r#"{"error":{"message":"not here"}}"#);
        }
        let mut st = st.lock().unwrap();
        let step = if is_scripted(&req.body, &prompts) {
            let k = st.next;
            st.next += 1;
            Some(k)
        } else {
            None
        };
        let call = step.and_then(|k| calls.get(k));
        if step.is_some() && call.is_none() {
            return Reply::status(500, r#"{"error":{"message":"bench: past the script"}}"#);
        }
        let split = st.strict.account(&req.body);
        let lookback = st.lookback.account(&req.body);
        let output = call.map_or(tokens(OTHER_ANSWER.len()), Call::output_tokens);
        let label = match step {
            Some(_) => String::new(),
            None => other_label(&req.body, &prompts),
        };
        st.measured.push(Measured {
            step,
            label,
            body_bytes: req.body_raw.len(),
            strict: split,
            lookback,
            output,
            tools: req.body["tools"].as_array().map_or(0, Vec::len),
            tool_sizes: tool_sizes(&req.body),
            parts: parts(&req.body),
            prefix: tokens(prefix_bytes(&req.body)),
        });
        let Split {
            input,
            read: cache_read,
            write: cache_write,
            uncached,
            ..
        } = split;
        let streamed = req.body["stream"] == json!(true);
        let usage = (uncached, cache_read, cache_write, output);
        match (wire, call) {
            (Wire::Anthropic, Some(call)) => anthropic_answer(call, usage),
            (Wire::Anthropic, None) if streamed => msgs::reply(msgs::text_answer(
                &[OTHER_ANSWER],
                msgs::Usage(uncached, cache_read, cache_write, output),
            )),
            (Wire::Anthropic, None) => Reply::status(
                200,
                &json!({"id": "msg_other", "type": "message", "role": "assistant",
                        "model": "claude-sonnet-4-5-20250929",
                        "content": [{"type": "text", "text": OTHER_ANSWER}],
                        "stop_reason": "end_turn", "stop_sequence": null,
                        "usage": {"input_tokens": uncached, "output_tokens": output,
                                  "cache_read_input_tokens": cache_read,
                                  "cache_creation_input_tokens": cache_write}})
                .to_string(),
            ),
            (Wire::OpenRouter, Some(call)) => chat_answer(call, input, output),
            (Wire::OpenRouter, None) if streamed => Reply::Stream(Stream::new(
                mockai::text_events(&[OTHER_ANSWER], "stop", Some((input, output))),
            )),
            (Wire::OpenRouter, None) => Reply::status(
                200,
                &json!({"id": "chatcmpl-other", "object": "chat.completion", "created": 1700000000,
                        "model": "anthropic/claude-sonnet-4.5",
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": OTHER_ANSWER}}],
                        "usage": {"prompt_tokens": input, "completion_tokens": output,
                                  "total_tokens": input + output}})
                .to_string(),
            ),
        }
    });
    (mock, state)
}

/// What a call outside the script is for: `title` (no tools), else its first user text that is
/// not one of the script's prompts, cut short.
fn other_label(body: &Value, prompts: &[&str]) -> String {
    if body["tools"].as_array().is_none_or(|t| t.is_empty()) {
        return "no tools (the session title)".to_string();
    }
    let odd = user_texts(body)
        .into_iter()
        .find(|t| !prompts.iter().any(|p| t.contains(p)))
        .unwrap_or_default();
    format!("{:?}", odd.chars().take(48).collect::<String>())
}

/// What the fake answers a call outside the script.
const OTHER_ANSWER: &str = "Warehouse inventory overview";

fn anthropic_answer(call: &Call, (uncached, read, write, output): (u64, u64, u64, u64)) -> Reply {
    let mut ev = vec![msgs::message_start(uncached, read, write)];
    let mut index = 0;
    if !call.text.is_empty() {
        ev.extend([
            msgs::text_start(0),
            msgs::text_delta(0, call.text),
            msgs::block_stop(0),
        ]);
        index = 1;
    }
    for t in &call.tools {
        ev.extend([
            msgs::tool_use_start(index, &t.id, t.name),
            msgs::input_delta(index, &t.input.to_string()),
            msgs::block_stop(index),
        ]);
        index += 1;
    }
    let stop = if call.tools.is_empty() {
        "end_turn"
    } else {
        "tool_use"
    };
    ev.extend([msgs::message_delta(stop, output), msgs::message_stop()]);
    msgs::reply(ev)
}

fn chat_answer(call: &Call, input: u64, output: u64) -> Reply {
    let mut ev = vec![mockai::ev_role()];
    if !call.text.is_empty() {
        ev.push(mockai::ev_text(call.text));
    }
    for (i, t) in call.tools.iter().enumerate() {
        ev.push(mockai::ev_tool_start(
            i as u64,
            &t.id,
            t.name,
            &t.input.to_string(),
        ));
    }
    let finish = if call.tools.is_empty() {
        "stop"
    } else {
        "tool_calls"
    };
    ev.push(mockai::ev_finish(finish));
    ev.push(mockai::ev_usage(input, output));
    Reply::Stream(Stream::new(ev))
}

// ---------------------------------------------------------------------------------------------
// Driving a gateway as the TUI does
// ---------------------------------------------------------------------------------------------

struct Gateway {
    name: &'static str,
    /// The program the TUI would spawn as `HERMES_PYTHON`.
    program: PathBuf,
}

struct Run {
    measured: Vec<Measured>,
    requests: Vec<Recorded>,
    answers: Vec<String>,
    /// Spawn to the last turn's `message.complete`.
    seconds: f64,
    /// The last turn's `message.complete` to the gateway's last model request.
    after_last_turn: f64,
}

fn write_home(home: &Path, wire: Wire, mock: &MockAi) {
    fs::create_dir_all(home).unwrap();
    let (config, env) = match wire {
        Wire::Anthropic => (
            "model:\n  default: claude-sonnet-4-5\n  provider: anthropic\n".to_string(),
            format!(
                "ANTHROPIC_API_KEY=sk-ant-api03-bench\nANTHROPIC_BASE_URL=http://127.0.0.1:{}\n",
                mock.port
            ),
        ),
        Wire::OpenRouter => (
            "model:\n  default: anthropic/claude-sonnet-4.5\n  provider: openrouter\n".to_string(),
            "OPENROUTER_API_KEY=sk-or-v1-bench\nOPENROUTER_BASE_URL=http://openrouter.ai/api/v1\n"
                .to_string(),
        ),
    };
    fs::write(home.join("config.yaml"), config).unwrap();
    fs::write(home.join(".env"), env).unwrap();
}

fn run_gateway(
    gw: &Gateway,
    wire: Wire,
    dir: &Path,
    tag: &str,
    turns: &[Turn],
    calls: &Arc<Vec<Call>>,
    quiet: Duration,
) -> Result<Run, String> {
    let prompts: Vec<&'static str> = turns.iter().map(|t| t.prompt).collect();
    let (mock, state) = start_fake(wire, calls.clone(), prompts);
    // Same-length paths for both gateways: the working directory is in Hermes' system prompt.
    let root = dir.join(tag);
    let (home, ws, user_home) = (root.join("home"), root.join("ws"), root.join("user"));
    write_home(&home, wire, &mock);
    write_workspace(&ws);
    fs::create_dir_all(&user_home).unwrap();
    let stderr = fs::File::create(root.join("gateway.stderr")).map_err(|e| e.to_string())?;
    let mut cmd = Client::gateway_command(&gw.program);
    cmd.env_clear()
        .env(
            "PATH",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        )
        .env("HOME", &user_home)
        .env("LANG", "C.UTF-8")
        .env("TZ", "UTC")
        .env("HERMES_HOME", &home)
        .env("HERMES_CWD", &ws)
        .current_dir(&ws)
        .stderr(stderr);
    if wire == Wire::OpenRouter {
        cmd.env("http_proxy", format!("http://127.0.0.1:{}", mock.port));
    }
    let started = Instant::now();
    let mut client = Client::spawn(&mut cmd)
        .map_err(|e| format!("cannot start {}: {e}", gw.program.display()))?;
    let fail = |what: String| {
        format!(
            "{} ({}): {what}; its stderr is in {}",
            gw.name,
            wire.name(),
            root.join("gateway.stderr").display()
        )
    };
    client
        .wait_event("gateway.ready", Instant::now() + READY)
        .map_err(|e| fail(format!("no gateway.ready: {e}")))?;
    let created = client
        .call(
            "session.create",
            json!({"cols": 100}),
            Instant::now() + READY,
        )
        .map_err(|e| fail(format!("session.create: {e}")))?;
    let sid = created["session_id"]
        .as_str()
        .ok_or_else(|| fail(format!("session.create answered {created}")))?
        .to_string();
    let mut answers = Vec::new();
    for turn in turns {
        let id = client
            .send_request(
                "prompt.submit",
                json!({"session_id": sid, "text": turn.prompt}),
            )
            .map_err(|e| fail(format!("prompt.submit: {e}")))?;
        let deadline = Instant::now() + TURN;
        loop {
            let frame = client
                .next_frame(deadline)
                .map_err(|e| fail(format!("waiting for message.complete: {e}")))?;
            if frame.get("id") == Some(&id) && frame.get("error").is_some() {
                return Err(fail(format!("prompt.submit refused: {frame}")));
            }
            if frame.get("method").is_some() && frame.get("id").is_some() {
                return Err(fail(format!("the gateway asked something: {frame}")));
            }
            match event_type(&frame) {
                Some("approval.request" | "clarify.request" | "error") => {
                    return Err(fail(format!("unexpected event: {frame}")));
                }
                Some("message.complete") if frame["params"]["session_id"] == json!(sid) => {
                    let p = &frame["params"]["payload"];
                    if p["status"] == json!("error") || !p["error"].is_null() {
                        return Err(fail(format!("the turn failed: {p}")));
                    }
                    answers.push(p["text"].as_str().unwrap_or("").to_string());
                    break;
                }
                _ => {}
            }
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let last_turn = Instant::now();
    if !settle(&mock, quiet) {
        eprintln!(
            "{} ({}): still calling the model {} s after the last turn; measured as it stands",
            gw.name,
            wire.name(),
            QUIET_MAX.as_secs()
        );
    }
    // How long after the last turn the gateway's last request came (the quiet period's margin).
    let after_last_turn = mock.requests().last().map_or(0.0, |r| {
        r.at.saturating_duration_since(last_turn).as_secs_f64()
    });
    if client
        .close(Instant::now() + Duration::from_secs(20))
        .is_err()
    {
        eprintln!(
            "{}: did not exit within 20 s of its stdin closing; killed",
            gw.name
        );
    }
    let requests = mock.requests();
    let measured = state.lock().unwrap().measured.clone();
    Ok(Run {
        measured,
        requests,
        answers,
        seconds,
        after_last_turn,
    })
}

/// Waits until the fake has had no request for `quiet` (at most [`QUIET_MAX`] in all): the
/// calls a gateway makes on its own after a turn (Hermes' skill and memory reviews, threads of
/// their own that say nothing when they are done) belong to the session too. Woken by each
/// request as it arrives. False when the requests did not stop within [`QUIET_MAX`].
fn settle(mock: &MockAi, quiet: Duration) -> bool {
    let end = Instant::now() + QUIET_MAX;
    let mut seen = mock.request_count();
    loop {
        let left = end.saturating_duration_since(Instant::now());
        if left < quiet {
            return false;
        }
        match mock.wait_past(seen, quiet) {
            Some(n) => seen = n,
            None => return true,
        }
    }
}

/// The text of the result a request carries for tool call `id`, if any.
fn tool_result(body: &Value, id: &str) -> Option<String> {
    for m in body["messages"].as_array().into_iter().flatten() {
        if m["role"] == "tool" && m["tool_call_id"] == json!(id) {
            return Some(mockai::content_text(&m["content"]));
        }
        for b in m["content"].as_array().into_iter().flatten() {
            if b["type"] == "tool_result" && b["tool_use_id"] == json!(id) {
                return Some(match &b["content"] {
                    Value::String(s) => s.clone(),
                    other => mockai::content_text(other),
                });
            }
        }
    }
    None
}

/// Checks that the gateway followed the script: 30 scripted calls, each tool's result sent back
/// with what the tool must have found, each turn ending on the scripted answer.
fn check(name: &str, run: &Run, turns: &[Turn], calls: &[Call], prompts: &[&str]) -> Vec<String> {
    let mut problems = Vec::new();
    let scripted: Vec<&Recorded> = run
        .requests
        .iter()
        .filter(|r| r.method == "POST" && is_scripted(&r.body, prompts))
        .collect();
    if scripted.len() != calls.len() {
        problems.push(format!(
            "{name}: {} scripted calls, expected {}",
            scripted.len(),
            calls.len()
        ));
    }
    for (k, call) in calls.iter().enumerate() {
        let Some(next) = scripted.get(k + 1) else {
            break;
        };
        for t in &call.tools {
            match tool_result(&next.body, &t.id) {
                None => problems.push(format!(
                    "{name}: call {} lacks the result of {}",
                    k + 2,
                    t.id
                )),
                Some(text) => {
                    if let Some(want) = t.expect
                        && !text.contains(want)
                    {
                        problems.push(format!(
                            "{name}: {} {} gave {:?}, without {want:?}",
                            t.name,
                            t.input,
                            text.chars().take(300).collect::<String>()
                        ));
                    }
                }
            }
        }
    }
    for (i, turn) in turns.iter().enumerate() {
        let want = turn.calls.last().map_or("", |c| c.text);
        match run.answers.get(i) {
            // Ours also carries the turn's earlier texts ("I'll look at the layout first.").
            Some(got) if got.trim().ends_with(want.trim()) => {}
            got => problems.push(format!("{name}: turn {} ended with {got:?}", i + 1)),
        }
    }
    problems
}

// ---------------------------------------------------------------------------------------------
// Report
// ---------------------------------------------------------------------------------------------

fn stats(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let median = if s.is_empty() {
        0.0
    } else if s.len() % 2 == 1 {
        s[s.len() / 2]
    } else {
        (s[s.len() / 2 - 1] + s[s.len() / 2]) / 2.0
    };
    (
        s.first().copied().unwrap_or(0.0),
        median,
        s.last().copied().unwrap_or(0.0),
    )
}

struct Totals {
    usage: TokenUsage,
    uncached: u64,
    usd: f64,
    /// Of `usd`, what the prompts' prefixes (model, tools, system prompt) cost.
    prefix_usd: f64,
    calls: usize,
}

fn totals<'a>(ms: impl Iterator<Item = &'a Measured>, lookback: bool) -> Totals {
    let mut t = Totals {
        usage: TokenUsage::default(),
        uncached: 0,
        usd: 0.0,
        prefix_usd: 0.0,
        calls: 0,
    };
    for m in ms {
        let split = if lookback { &m.lookback } else { &m.strict };
        let u = m.usage(split);
        t.usage.input += u.input;
        t.usage.output += u.output;
        t.usage.cache_read += u.cache_read;
        t.usage.cache_write += u.cache_write;
        t.uncached += split.uncached;
        t.usd += usd(&u);
        t.prefix_usd += m.prefix_usd(split);
        t.calls += 1;
    }
    t
}

fn ratio(ours: f64, hermes: f64) -> String {
    if hermes == 0.0 {
        "–".to_string()
    } else {
        format!("{:.3}", ours / hermes)
    }
}

/// Prints the comparison of one wire; whether both targets are met.
fn report(wire: Wire, hermes: &Run, ours: &Run, calls: usize) -> bool {
    let scripted = |r: &Run| -> Vec<Measured> {
        let mut v: Vec<Measured> = r
            .measured
            .iter()
            .filter(|m| m.step.is_some())
            .cloned()
            .collect();
        v.sort_by_key(|m| m.step);
        v
    };
    let (h, o) = (scripted(hermes), scripted(ours));
    println!("\n## Wire: {} ({calls} scripted calls)\n", wire.name());
    println!(
        "Whole session, spawn to last `message.complete`: Hermes {:.1} s, ours {:.1} s \
         (the fake answers at once). Last model request after the last turn's end: Hermes \
         {:.1} s, ours {:.1} s.\n",
        hermes.seconds, ours.seconds, hermes.after_last_turn, ours.after_last_turn
    );
    println!(
        "| call | bytes Hermes | bytes ours | ratio | tokens Hermes | tokens ours | ratio | \
         read/write/uncached Hermes | read/write/uncached ours | USD Hermes | USD ours |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let mut every_call_smaller = true;
    for (a, b) in h.iter().zip(&o) {
        every_call_smaller &= b.body_bytes < a.body_bytes && b.strict.input < a.strict.input;
        let (x, y) = (&a.strict, &b.strict);
        println!(
            "| {} | {} | {} | {} | {} | {} | {} | {}/{}/{} | {}/{}/{} | {:.4} | {:.4} |",
            a.step.unwrap() + 1,
            a.body_bytes,
            b.body_bytes,
            ratio(b.body_bytes as f64, a.body_bytes as f64),
            x.input,
            y.input,
            ratio(y.input as f64, x.input as f64),
            x.read,
            x.write,
            x.uncached,
            y.read,
            y.write,
            y.uncached,
            a.usd(),
            b.usd(),
        );
    }
    every_call_smaller &= h.len() == o.len() && !h.is_empty();

    type Field = fn(&Measured) -> f64;
    let fields: [(&str, Field); 4] = [
        ("request body, bytes", |m| m.body_bytes as f64),
        ("input tokens (prompt bytes / 4)", |m| m.strict.input as f64),
        ("tools offered", |m| m.tools as f64),
        ("cache breakpoints", |m| m.strict.breakpoints as f64),
    ];
    println!(
        "\n| per call | Hermes min / median / max | ours min / median / max | \
         ours / Hermes, min / median / max |"
    );
    println!("|---|---|---|---|");
    for (what, f) in fields {
        let a = stats(&h.iter().map(f).collect::<Vec<_>>());
        let b = stats(&o.iter().map(f).collect::<Vec<_>>());
        let r = stats(
            &h.iter()
                .zip(&o)
                .map(|(x, y)| f(y) / f(x))
                .collect::<Vec<_>>(),
        );
        println!(
            "| {what} | {:.0} / {:.0} / {:.0} | {:.0} / {:.0} / {:.0} | {:.3} / {:.3} / {:.3} |",
            a.0, a.1, a.2, b.0, b.1, b.2, r.0, r.1, r.2
        );
    }

    if let (Some(a), Some(b)) = (h.first(), o.first()) {
        let (la, lb) = (h.last().unwrap(), o.last().unwrap());
        println!(
            "\n| where the prompt's bytes are (compact JSON, markers removed) | call 1 Hermes | call 1 ours | \
             call {calls} Hermes | call {calls} ours | ratio at call {calls} |"
        );
        println!("|---|---|---|---|---|---|");
        type Part = fn(&Parts) -> usize;
        let rows: [(&str, Part); 4] = [
            ("tool definitions", |p| p.tools),
            ("system prompt", |p| p.system),
            ("messages", |p| p.messages),
            ("  of which tool results", |p| p.tool_results),
        ];
        for (what, f) in rows {
            println!(
                "| {what} | {} | {} | {} | {} | {} |",
                f(&a.parts),
                f(&b.parts),
                f(&la.parts),
                f(&lb.parts),
                ratio(f(&lb.parts) as f64, f(&la.parts) as f64)
            );
        }
    }

    if let (Some(a), Some(b)) = (h.first(), o.first()) {
        let mut names: Vec<&(String, usize)> = b.tool_sizes.iter().collect();
        names.sort_by_key(|(_, n)| std::cmp::Reverse(*n));
        let hermes_size = |name: &str| {
            a.tool_sizes
                .iter()
                .find(|(n, _)| n == name)
                .map_or("–".to_string(), |(_, n)| n.to_string())
        };
        let listed: Vec<String> = names
            .iter()
            .map(|(n, bytes)| format!("{n} {bytes} ({})", hermes_size(n)))
            .collect();
        println!(
            "\nOur tool definitions, bytes (Hermes' for the same tool): {}.",
            listed.join(", ")
        );
        let only_hermes: Vec<String> = a
            .tool_sizes
            .iter()
            .filter(|(n, _)| !b.tool_sizes.iter().any(|(m, _)| m == n))
            .map(|(n, bytes)| format!("{n} {bytes}"))
            .collect();
        println!("Hermes' other tools, bytes: {}.", only_hermes.join(", "));
    }

    let (th, to) = (totals(h.iter(), false), totals(o.iter(), false));
    let (lh, lo) = (totals(h.iter(), true), totals(o.iter(), true));
    let others = |r: &Run| -> Vec<Measured> {
        r.measured
            .iter()
            .filter(|m| m.step.is_none())
            .cloned()
            .collect()
    };
    let (xh, xo) = (others(hermes), others(ours));
    let (oh, oo) = (totals(xh.iter(), false), totals(xo.iter(), false));
    println!("\n| session of {calls} calls, Claude Sonnet 4.5 | Hermes | ours | ours / Hermes |");
    println!("|---|---|---|---|");
    let row = |what: &str, a: f64, b: f64| {
        println!("| {what} | {a:.0} | {b:.0} | {} |", ratio(b, a));
    };
    row("input tokens", th.usage.input as f64, to.usage.input as f64);
    row(
        "  cache read",
        th.usage.cache_read as f64,
        to.usage.cache_read as f64,
    );
    row(
        "  cache write",
        th.usage.cache_write as f64,
        to.usage.cache_write as f64,
    );
    row("  uncached", th.uncached as f64, to.uncached as f64);
    row(
        "output tokens",
        th.usage.output as f64,
        to.usage.output as f64,
    );
    // Each cost, then what of it the prefixes (model, tools, system prompt) cost and the rest.
    let split_rows = |hermes: &Totals, ours: &Totals| {
        for (what, a, b) in [
            (
                "  of which the prefixes (model, tools, system prompt)",
                hermes.prefix_usd,
                ours.prefix_usd,
            ),
            (
                "  of which the rest (messages, output)",
                hermes.usd - hermes.prefix_usd,
                ours.usd - ours.prefix_usd,
            ),
        ] {
            println!("| {what} | {a:.4} | {b:.4} | {} |", ratio(b, a));
        }
    };
    println!(
        "| **cost, USD** | **{:.4}** | **{:.4}** | **{}** |",
        th.usd,
        to.usd,
        ratio(to.usd, th.usd)
    );
    split_rows(&th, &to);
    println!(
        "| cost, USD, with the API's 20-block lookback (read/write tokens {}/{} and {}/{}) | \
         {:.4} | {:.4} | {} |",
        lh.usage.cache_read,
        lh.usage.cache_write,
        lo.usage.cache_read,
        lo.usage.cache_write,
        lh.usd,
        lo.usd,
        ratio(lo.usd, lh.usd)
    );
    split_rows(&lh, &lo);
    println!(
        "| calls outside the script: count, USD | {}, {:.4} | {}, {:.4} | |",
        oh.calls, oh.usd, oo.calls, oo.usd
    );
    let (all_h, all_o) = (th.usd + oh.usd, to.usd + oo.usd);
    println!(
        "| every call of the session, USD | {all_h:.4} | {all_o:.4} | {} |",
        ratio(all_o, all_h)
    );
    for (name, xs) in [("Hermes", &xh), ("ours", &xo)] {
        for m in xs.iter() {
            println!(
                "\n{name}, outside the script: {} ({} bytes, {} tokens, {:.4} USD)",
                m.label,
                m.body_bytes,
                m.strict.input,
                m.usd()
            );
        }
    }
    // The prefix is the same in every call, so its cost scales with its size: the size at which
    // our session would cost half of Hermes', the rest (messages, output) as it is.
    if let (Some(a), Some(b)) = (h.first(), o.first())
        && to.prefix_usd > 0.0
    {
        let most = |hermes: &Totals, ours: &Totals| {
            let room = hermes.usd / 2.0 - (ours.usd - ours.prefix_usd);
            (b.prefix as f64 * room / ours.prefix_usd).max(0.0)
        };
        println!(
            "\nPrefix of each call, tokens: Hermes {}, ours {}. For our session to cost half of \
             Hermes', ours would have to be at most {:.0} tokens ({:.0} with the lookback).",
            a.prefix,
            b.prefix,
            most(&th, &to),
            most(&lh, &lo)
        );
    }
    let half = to.usd <= th.usd / 2.0;
    println!(
        "\nTargets: every call smaller than Hermes' (bytes and tokens): {}; a session at most half Hermes' cost: {} \
         (ratio {}; with the lookback {}; every call of the session {}).",
        if every_call_smaller { "met" } else { "NOT met" },
        if half { "met" } else { "NOT met" },
        ratio(to.usd, th.usd),
        ratio(lo.usd, lh.usd),
        ratio(all_o, all_h),
    );
    every_call_smaller && half
}

fn dump(dir: &Path, wire: Wire, name: &str, run: &Run) {
    let d = dir.join(wire.name()).join(name);
    fs::create_dir_all(&d).unwrap();
    for (i, r) in run.requests.iter().enumerate() {
        let file = format!(
            "{i:03}-{}.json",
            r.path.rsplit('/').next().unwrap_or("request")
        );
        fs::write(d.join(file), &r.body_raw).unwrap();
    }
}

fn main() {
    if !common::bench_mode() {
        // `cargo test --benches` runs bench binaries without `--bench`: this one needs Hermes.
        println!("hermes_side_by_side: skipped (run `bash benches/hermes_side_by_side.sh`)");
        return;
    }
    let wires = match arg_string("--wire", "both").as_str() {
        "anthropic" => vec![Wire::Anthropic],
        "openrouter" => vec![Wire::OpenRouter],
        "both" => vec![Wire::Anthropic, Wire::OpenRouter],
        other => panic!("--wire: anthropic, openrouter or both, not {other}"),
    };
    let python = arg_string("--hermes-python", "target/hermes-venv/bin/python");
    // Absolute (the gateway runs in its workspace), symlinks kept (a venv's python is one).
    let python = std::path::absolute(PathBuf::from(python)).expect("--hermes-python");
    // Imported with a throwaway home, as the runs are: nothing of the user's is read or written.
    let probe_home = TempDir::new("hermes-probe");
    let probe = Command::new(&python)
        .args(["-c", "import tui_gateway.server"])
        .env_clear()
        .env(
            "PATH",
            std::env::var("PATH").unwrap_or_else(|_| "/usr/bin:/bin".into()),
        )
        .env("HOME", probe_home.path())
        .env("HERMES_HOME", probe_home.path().join("hermes"))
        .current_dir(probe_home.path())
        .output();
    drop(probe_home);
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!(
            "error: {} cannot import Hermes' tui_gateway; run `bash benches/hermes_side_by_side.sh`, \
             which installs it (target/hermes-venv), or pass --hermes-python",
            python.display()
        );
        std::process::exit(2);
    }
    let quiet = Duration::from_secs_f64(
        arg_string("--quiet-s", "5")
            .parse::<f64>()
            .ok()
            .filter(|s| (0.1..=60.0).contains(s))
            .expect("--quiet-s: seconds, 0.1 to 60"),
    );
    let dump_dir = {
        let d = arg_string("--dump", "");
        (!d.is_empty()).then(|| PathBuf::from(d))
    };
    let hermes = Gateway {
        name: "Hermes",
        program: python,
    };
    let ours = Gateway {
        name: "ours",
        program: gateway_bin(),
    };
    let turns = script();
    let prompts: Vec<&str> = turns.iter().map(|t| t.prompt).collect();
    let calls: Arc<Vec<Call>> = Arc::new(script().into_iter().flat_map(|t| t.calls).collect());
    println!(
        "# Side by side with Hermes' Python gateway ({} user turns, {} model calls)",
        turns.len(),
        calls.len()
    );
    let mut all_met = true;
    for wire in wires {
        let dir = TempDir::new("hermes-side");
        let hermes_run = run_gateway(&hermes, wire, dir.path(), "py", &turns, &calls, quiet);
        let ours_run = run_gateway(&ours, wire, dir.path(), "rs", &turns, &calls, quiet);
        let (hermes_run, ours_run) = match (hermes_run, ours_run) {
            (Ok(h), Ok(o)) => (h, o),
            (h, o) => {
                for e in [h.err(), o.err()].into_iter().flatten() {
                    eprintln!("error: {e}");
                }
                eprintln!("(the run's files are kept in {})", dir.keep().display());
                std::process::exit(1);
            }
        };
        if let Some(d) = &dump_dir {
            dump(d, wire, "hermes", &hermes_run);
            dump(d, wire, "ours", &ours_run);
        }
        let mut problems = check("Hermes", &hermes_run, &turns, &calls, &prompts);
        problems.extend(check("ours", &ours_run, &turns, &calls, &prompts));
        for p in &problems {
            eprintln!("script not followed: {p}");
        }
        if !problems.is_empty() {
            eprintln!("(the run's files are kept in {})", dir.keep().display());
            std::process::exit(1);
        }
        all_met &= report(wire, &hermes_run, &ours_run, calls.len());
    }
    println!(
        "\nall targets {}",
        if all_met { "met" } else { "NOT all met" }
    );
}
