//! Just enough JSON and base64 to read the test vectors (the SDK itself needs neither).

use std::collections::BTreeMap;

#[derive(Clone, Debug, PartialEq)]
pub enum Json {
    Null,
    Bool(bool),
    Number(f64),
    Str(String),
    Array(Vec<Json>),
    Object(BTreeMap<String, Json>),
}

impl Json {
    pub fn get(&self, key: &str) -> &Json {
        self.get_opt(key).unwrap_or_else(|| panic!("no field {key:?}"))
    }
    pub fn get_opt(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(m) => m.get(key),
            _ => None,
        }
    }
    pub fn array(&self) -> &[Json] {
        match self {
            Json::Array(a) => a,
            other => panic!("not an array: {other:?}"),
        }
    }
    pub fn object(&self) -> &BTreeMap<String, Json> {
        match self {
            Json::Object(m) => m,
            other => panic!("not an object: {other:?}"),
        }
    }
    pub fn str(&self) -> &str {
        match self {
            Json::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }
    pub fn int(&self) -> i64 {
        match self {
            Json::Number(n) => *n as i64,
            other => panic!("not a number: {other:?}"),
        }
    }
    pub fn is_null(&self) -> bool {
        matches!(self, Json::Null)
    }
}

pub fn parse(text: &str) -> Json {
    let mut p = Parser { s: text.as_bytes(), i: 0 };
    let v = p.value();
    p.ws();
    assert_eq!(p.i, p.s.len(), "trailing text after JSON");
    v
}

struct Parser<'a> {
    s: &'a [u8],
    i: usize,
}

impl Parser<'_> {
    fn ws(&mut self) {
        while self.i < self.s.len() && self.s[self.i].is_ascii_whitespace() {
            self.i += 1;
        }
    }
    fn eat(&mut self, word: &str) -> bool {
        let ok = self.s[self.i..].starts_with(word.as_bytes());
        if ok {
            self.i += word.len();
        }
        ok
    }
    fn value(&mut self) -> Json {
        self.ws();
        let c = self.s[self.i];
        match c {
            b'{' => {
                self.i += 1;
                let mut m = BTreeMap::new();
                self.ws();
                if self.eat("}") {
                    return Json::Object(m);
                }
                loop {
                    self.ws();
                    let k = self.string();
                    self.ws();
                    assert!(self.eat(":"), "expected : at {}", self.i);
                    let v = self.value();
                    m.insert(k, v);
                    self.ws();
                    if self.eat("}") {
                        return Json::Object(m);
                    }
                    assert!(self.eat(","), "expected , at {}", self.i);
                }
            }
            b'[' => {
                self.i += 1;
                let mut a = Vec::new();
                self.ws();
                if self.eat("]") {
                    return Json::Array(a);
                }
                loop {
                    a.push(self.value());
                    self.ws();
                    if self.eat("]") {
                        return Json::Array(a);
                    }
                    assert!(self.eat(","), "expected , at {}", self.i);
                }
            }
            b'"' => Json::Str(self.string()),
            _ if self.eat("null") => Json::Null,
            _ if self.eat("true") => Json::Bool(true),
            _ if self.eat("false") => Json::Bool(false),
            _ => {
                let start = self.i;
                while self.i < self.s.len() && b"+-.eE0123456789".contains(&self.s[self.i]) {
                    self.i += 1;
                }
                let text = std::str::from_utf8(&self.s[start..self.i]).unwrap();
                Json::Number(text.parse().unwrap_or_else(|_| panic!("bad number {text:?} at {start}")))
            }
        }
    }
    fn string(&mut self) -> String {
        assert!(self.eat("\""), "expected a string at {}", self.i);
        let mut out = String::new();
        loop {
            let c = self.s[self.i];
            self.i += 1;
            match c {
                b'"' => return out,
                b'\\' => {
                    let e = self.s[self.i];
                    self.i += 1;
                    match e {
                        b'n' => out.push('\n'),
                        b't' => out.push('\t'),
                        b'r' => out.push('\r'),
                        b'b' => out.push('\u{8}'),
                        b'f' => out.push('\u{c}'),
                        b'u' => {
                            let hex = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
                            self.i += 4;
                            let mut code = u32::from_str_radix(hex, 16).unwrap();
                            if (0xd800..0xdc00).contains(&code) && self.eat("\\u") {
                                let low = std::str::from_utf8(&self.s[self.i..self.i + 4]).unwrap();
                                self.i += 4;
                                code = 0x10000 + ((code - 0xd800) << 10) + (u32::from_str_radix(low, 16).unwrap() - 0xdc00);
                            }
                            out.push(char::from_u32(code).unwrap_or('\u{fffd}'));
                        }
                        other => out.push(other as char),
                    }
                }
                _ => {
                    // copy a run of plain UTF-8 bytes
                    let start = self.i - 1;
                    while self.i < self.s.len() && self.s[self.i] != b'"' && self.s[self.i] != b'\\' {
                        self.i += 1;
                    }
                    out.push_str(std::str::from_utf8(&self.s[start..self.i]).unwrap());
                }
            }
        }
    }
}

pub fn base64(text: &str) -> Vec<u8> {
    let value = |c: u8| -> u32 {
        match c {
            b'A'..=b'Z' => (c - b'A') as u32,
            b'a'..=b'z' => (c - b'a' + 26) as u32,
            b'0'..=b'9' => (c - b'0' + 52) as u32,
            b'+' => 62,
            b'/' => 63,
            _ => panic!("not base64: {text:?}"),
        }
    };
    let bytes: Vec<u8> = text.bytes().filter(|&c| c != b'=').collect();
    let mut out = Vec::with_capacity(bytes.len() * 3 / 4);
    for group in bytes.chunks(4) {
        let mut n = 0u32;
        for (k, &c) in group.iter().enumerate() {
            n |= value(c) << (18 - 6 * k);
        }
        out.extend_from_slice(&n.to_be_bytes()[1..group.len()]);
    }
    out
}

#[test]
fn base64_and_json_read_back() {
    assert_eq!(base64("4piDIMOp"), "☃ é".as_bytes());
    assert_eq!(base64("YQ=="), b"a");
    assert_eq!(base64(""), b"");
    assert_eq!(parse(r#"{"a": [1, "x\u00e9", null], "b": {}}"#).get("a").array()[1], Json::Str("xé".into()));
}
