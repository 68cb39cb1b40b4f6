//! Counters for the supervisor's end-of-run summary (docs/protocol.md: reports).

use std::fmt::Write as _;
use std::fs;
use std::io;
use std::path::Path;

/// A JSON object of numbers, or of one level of named numbers, counting from the start
/// of this process: `Report::new().count("valid", 12).named("invalid", "GENERR004", 2)`;
/// and, for a loader, where it loads: `.output("out/batches")`.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Report {
    entries: Vec<(String, Value)>,
}

#[derive(Clone, Debug, PartialEq)]
enum Value {
    Number(String),
    Named(Vec<(String, String)>),
    Text(String),
}

/// A number a report may hold.
pub trait Number {
    fn json(&self) -> String;
}

macro_rules! integer {
    ($($t:ty),*) => {$(impl Number for $t { fn json(&self) -> String { self.to_string() } })*};
}
integer!(i32, i64, u32, u64, usize);

impl Number for f64 {
    fn json(&self) -> String {
        if self.is_finite() {
            format!("{self:?}")
        } else {
            "null".to_string()
        }
    }
}

impl Report {
    pub fn new() -> Self {
        Report::default()
    }

    /// Set the counter `name`.
    pub fn count(mut self, name: &str, value: impl Number) -> Self {
        self.entries.retain(|(k, _)| k != name);
        self.entries.push((name.to_string(), Value::Number(value.json())));
        self
    }

    /// Set the counter `key` inside the group `name`.
    pub fn named(mut self, name: &str, key: &str, value: impl Number) -> Self {
        let at = self.entries.iter().position(|(k, v)| k == name && matches!(v, Value::Named(_)));
        let at = at.unwrap_or_else(|| {
            self.entries.retain(|(k, _)| k != name);
            self.entries.push((name.to_string(), Value::Named(Vec::new())));
            self.entries.len() - 1
        });
        if let Value::Named(group) = &mut self.entries[at].1 {
            group.retain(|(k, _)| k != key);
            group.push((key.to_string(), value.json()));
        }
        self
    }

    /// Where the worker loads (a path, a table, a topic): the run's summary names it, and
    /// `etlstage check-worker --batch-id` measures it when it is a file or folder.
    pub fn output(mut self, place: &str) -> Self {
        self.entries.retain(|(k, _)| k != "output");
        self.entries.push(("output".to_string(), Value::Text(place.to_string())));
        self
    }

    pub fn to_json(&self) -> String {
        let mut s = String::from("{");
        for (i, (k, v)) in self.entries.iter().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            quote(&mut s, k);
            s.push_str(": ");
            match v {
                Value::Number(n) => s.push_str(n),
                Value::Text(t) => quote(&mut s, t),
                Value::Named(group) => {
                    s.push('{');
                    for (j, (gk, gv)) in group.iter().enumerate() {
                        if j > 0 {
                            s.push_str(", ");
                        }
                        quote(&mut s, gk);
                        s.push_str(": ");
                        s.push_str(gv);
                    }
                    s.push('}');
                }
            }
        }
        s.push('}');
        s
    }

    /// `report-<instance>-<pid>.json` in `state_dir`, replaced atomically.
    pub fn write_to(&self, state_dir: &str, instance: u32) -> io::Result<()> {
        let path = Path::new(state_dir).join(format!("report-{instance}-{}.json", std::process::id()));
        let tmp = path.with_extension("json.tmp");
        fs::write(&tmp, self.to_json())?;
        fs::rename(&tmp, &path)
    }
}

fn quote(s: &mut String, text: &str) {
    s.push('"');
    for c in text.chars() {
        match c {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(s, "\\u{:04x}", c as u32);
            }
            c => s.push(c),
        }
    }
    s.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_one_level_of_named_numbers() {
        let r = Report::new().count("valid", 12).named("invalid", "GEN\"1", 2).named("invalid", "B", 0.5).count("valid", 13);
        assert_eq!(r.to_json(), r#"{"invalid": {"GEN\"1": 2, "B": 0.5}, "valid": 13}"#);
    }

    #[test]
    fn the_output_is_text_and_set_once() {
        let r = Report::new().output("old").count("loaded", 3).output("out/\"b\"");
        assert_eq!(r.to_json(), r#"{"loaded": 3, "output": "out/\"b\""}"#);
    }
}
