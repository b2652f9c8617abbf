//! Hermes' V4A multi-file patches (`patch` mode `patch`):
//!
//! ```text
//! *** Begin Patch
//! *** Update File: src/a.py
//! @@ def f(): @@
//!  context
//! -removed
//! +added
//! *** Add File: new.txt
//! +its lines
//! *** Delete File: old.txt
//! *** Move File: from.txt -> to.txt
//! *** End Patch
//! ```
//!
//! Parsed whole, then every operation is checked against the files before any is written.

/// One hunk: its `@@ hint @@` and its lines (`' '`, `'-'`, `'+'`).
#[derive(Debug, Default, PartialEq)]
pub struct Hunk {
    pub hint: Option<String>,
    pub lines: Vec<(char, String)>,
}

impl Hunk {
    /// What must be in the file (context and removed lines).
    pub fn search(&self) -> String {
        self.text(|p| p != '+')
    }

    /// What replaces it (context and added lines).
    pub fn replacement(&self) -> String {
        self.text(|p| p != '-')
    }

    pub fn changes(&self) -> bool {
        self.lines.iter().any(|(p, _)| *p != ' ')
    }

    fn text(&self, keep: impl Fn(char) -> bool) -> String {
        self.lines
            .iter()
            .filter(|(p, _)| keep(*p))
            .map(|(_, l)| l.as_str())
            .collect::<Vec<_>>()
            .join("\n")
    }
}

#[derive(Debug, PartialEq)]
pub enum Op {
    Update { path: String, hunks: Vec<Hunk> },
    Add { path: String, content: String },
    Delete { path: String },
    Move { from: String, to: String },
}

fn marker<'a>(line: &'a str, word: &str) -> Option<&'a str> {
    let rest = line.strip_prefix("***")?.trim_start();
    let rest = rest.strip_prefix(word)?.trim_start();
    let rest = rest.strip_prefix("File:")?;
    Some(rest.trim())
}

/// The operations of a patch, or what is wrong with it.
pub fn parse(text: &str) -> Result<Vec<Op>, String> {
    let lines: Vec<&str> = text.lines().collect();
    let begin = lines
        .iter()
        .position(|l| l.contains("*** Begin Patch") || l.contains("***Begin Patch"));
    let start = begin.map_or(0, |i| i + 1);
    let end = lines[start..]
        .iter()
        .position(|l| l.contains("*** End Patch") || l.contains("***End Patch"))
        .map_or(lines.len(), |i| start + i);
    let mut ops = Vec::new();
    // The operation being read: Update's hunks, or Add's lines.
    let mut update: Option<(String, Vec<Hunk>)> = None;
    let mut add: Option<(String, Vec<String>)> = None;
    let flush = |ops: &mut Vec<Op>,
                 update: &mut Option<(String, Vec<Hunk>)>,
                 add: &mut Option<(String, Vec<String>)>| {
        if let Some((path, mut hunks)) = update.take() {
            hunks.retain(|h| !h.lines.is_empty());
            ops.push(Op::Update { path, hunks });
        }
        if let Some((path, lines)) = add.take() {
            let mut content = lines.join("\n");
            if !lines.is_empty() {
                content.push('\n');
            }
            ops.push(Op::Add { path, content });
        }
    };
    for line in &lines[start..end] {
        if let Some(path) = marker(line, "Update") {
            flush(&mut ops, &mut update, &mut add);
            update = Some((path.to_string(), vec![Hunk::default()]));
        } else if let Some(path) = marker(line, "Add") {
            flush(&mut ops, &mut update, &mut add);
            add = Some((path.to_string(), Vec::new()));
        } else if let Some(path) = marker(line, "Delete") {
            flush(&mut ops, &mut update, &mut add);
            ops.push(Op::Delete {
                path: path.to_string(),
            });
        } else if let Some(spec) = marker(line, "Move") {
            flush(&mut ops, &mut update, &mut add);
            let Some((from, to)) = spec.split_once("->") else {
                return Err(format!(
                    "Parse error: MOVE {spec:?}: missing destination path (expected 'src -> dst')"
                ));
            };
            ops.push(Op::Move {
                from: from.trim().to_string(),
                to: to.trim().to_string(),
            });
        } else if let Some((_, lines)) = add.as_mut() {
            if let Some(l) = line.strip_prefix('+') {
                lines.push(l.to_string());
            } else if !line.is_empty() {
                lines.push(line.to_string());
            }
        } else if let Some((_, hunks)) = update.as_mut() {
            if line.starts_with("@@") {
                let hint = line.trim_start_matches('@').trim_end_matches('@').trim();
                hunks.push(Hunk {
                    hint: (!hint.is_empty()).then(|| hint.to_string()),
                    lines: Vec::new(),
                });
            } else if line.starts_with('\\') || line.starts_with("*** End of File") {
                // "\ No newline at end of file", end-of-file markers: nothing to match.
            } else if let Some(hunk) = hunks.last_mut() {
                let (prefix, rest) = match line.chars().next() {
                    Some(c @ ('+' | '-' | ' ')) => (c, &line[1..]),
                    _ => (' ', *line),
                };
                hunk.lines.push((prefix, rest.to_string()));
            }
        }
    }
    flush(&mut ops, &mut update, &mut add);
    let mut errors = Vec::new();
    for op in &ops {
        match op {
            Op::Update { path, .. } | Op::Add { path, .. } | Op::Delete { path }
                if path.is_empty() =>
            {
                errors.push("Operation with empty file path".to_string());
            }
            Op::Update { path, hunks } if hunks.is_empty() => {
                errors.push(format!("UPDATE {path:?}: no hunks found"));
            }
            _ => {}
        }
    }
    if !errors.is_empty() {
        return Err(format!("Parse error: {}", errors.join("; ")));
    }
    Ok(ops)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multi_file_patch_parses_into_its_operations() {
        let ops = parse(
            "*** Begin Patch\n*** Update File: a.py\n@@ def f(): @@\n ctx\n-old\n+new\n\
             *** Add File: b.txt\n+one\n+two\n*** Delete File: c.txt\n\
             *** Move File: d.txt -> e.txt\n*** End Patch\n",
        )
        .unwrap();
        assert_eq!(ops.len(), 4);
        match &ops[0] {
            Op::Update { path, hunks } => {
                assert_eq!(path, "a.py");
                assert_eq!(hunks[0].hint.as_deref(), Some("def f():"));
                assert_eq!(hunks[0].search(), "ctx\nold");
                assert_eq!(hunks[0].replacement(), "ctx\nnew");
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            ops[1],
            Op::Add {
                path: "b.txt".into(),
                content: "one\ntwo\n".into()
            }
        );
        assert!(parse("*** Begin Patch\n*** Update File: x\n*** End Patch").is_err());
        assert!(parse("*** Move File: a").is_err());
        assert_eq!(parse("nothing here").unwrap(), vec![]);
    }
}
