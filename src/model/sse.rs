//! Server-sent events: `data:` lines grouped into events by blank lines, fed as bytes arrive.

/// Longest line accepted; a model that sends more in one event is not speaking SSE.
const LINE_MAX: usize = 4 * 1024 * 1024;

#[derive(Debug, Default)]
pub struct SseParser {
    line: Vec<u8>,
    data: String,
    has_data: bool,
}

impl SseParser {
    /// Feed bytes; `emit` gets the data of each complete event.
    pub fn feed(&mut self, mut input: &[u8], mut emit: impl FnMut(&str)) -> Result<(), String> {
        while let Some(nl) = input.iter().position(|&b| b == b'\n') {
            self.line.extend_from_slice(&input[..nl]);
            input = &input[nl + 1..];
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            self.on_line(&line, &mut emit)?;
            line.clear();
            self.line = line;
        }
        self.line.extend_from_slice(input);
        if self.line.len() > LINE_MAX {
            return Err("malformed event stream: line longer than 4 MiB".into());
        }
        Ok(())
    }

    fn on_line(&mut self, line: &[u8], emit: &mut impl FnMut(&str)) -> Result<(), String> {
        if line.is_empty() {
            if self.has_data {
                emit(&self.data);
            }
            self.data.clear();
            self.has_data = false;
            return Ok(());
        }
        if line[0] == b':' {
            return Ok(()); // comment / keep-alive
        }
        let text = std::str::from_utf8(line)
            .map_err(|_| "malformed event stream: invalid UTF-8".to_string())?;
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (text, ""),
        };
        if field == "data" {
            if self.has_data {
                self.data.push('\n');
            }
            self.data.push_str(value);
            self.has_data = true;
        }
        Ok(())
    }

    /// End of the stream: an event not yet closed by a blank line still counts.
    pub fn finish(&mut self, mut emit: impl FnMut(&str)) {
        if !self.line.is_empty() {
            let line = std::mem::take(&mut self.line);
            let _ = self.on_line(&line, &mut emit);
        }
        if self.has_data {
            emit(&self.data);
            self.has_data = false;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_split_anywhere_are_reassembled() {
        let stream = b": keep-alive\r\ndata: {\"a\":1}\r\n\r\nevent: x\ndata: line1\ndata: line2\n\ndata: [DONE]\n\n";
        for split in 1..stream.len() {
            let mut p = SseParser::default();
            let mut got = Vec::new();
            p.feed(&stream[..split], |d| got.push(d.to_string()))
                .unwrap();
            p.feed(&stream[split..], |d| got.push(d.to_string()))
                .unwrap();
            assert_eq!(
                got,
                vec!["{\"a\":1}", "line1\nline2", "[DONE]"],
                "split {split}"
            );
        }
    }

    #[test]
    fn an_unterminated_last_event_counts_at_the_end() {
        let mut p = SseParser::default();
        let mut got = Vec::new();
        p.feed(b"data: tail", |d| got.push(d.to_string())).unwrap();
        assert!(got.is_empty());
        p.finish(|d| got.push(d.to_string()));
        assert_eq!(got, vec!["tail"]);
    }
}
