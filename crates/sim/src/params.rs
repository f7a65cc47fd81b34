//! Request parameters the way restify 4 builds `req.params` for SAPI
//! (`restify.queryParser({allowDots: false, plainObjects: false})` then
//! `restify.bodyParser()`, both with `mapParams`):
//!
//! - the query string is parsed by `qs` (brackets nest: `metadata[a]=b` is
//!   `{"metadata": {"a": "b"}}`, `k[]=a&k[]=b` and repeated keys are arrays);
//! - the body is parsed by its `Content-Type` only: `application/json` as
//!   JSON, `application/x-www-form-urlencoded` by `qs` as above; any other
//!   type, or none (restify reads a missing type as
//!   `application/octet-stream`), is not parsed at all and adds nothing;
//! - a body key is mapped in unless the query already gave that key a truthy
//!   value (JavaScript truthiness: an empty string does not count).
//!
//! `qs` is reproduced for what a form or query can say: depth 5, array
//! indexes up to 20 (a larger index is an object key), at most 1000 pairs,
//! `+` read as a space and a value whose percent-escapes do not decode kept
//! as it is, holes in arrays dropped.

use serde_json::{Map, Value};

/// `qs`'s defaults, which restify 4 does not change.
const DEPTH: usize = 5;
const ARRAY_LIMIT: usize = 20;
const PARAMETER_LIMIT: usize = 1000;

/// Why a body could not become parameters (restify's 400 InvalidContent).
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct InvalidContent(pub String);

/// `req.params` from the raw query string, the `Content-Type` header and
/// the body.
pub(crate) fn restify_params(
    raw_query: Option<&str>,
    content_type: Option<&str>,
    body: &[u8],
) -> Result<Map<String, Value>, InvalidContent> {
    let mut params = raw_query.map(parse_qs).unwrap_or_default();
    if body.is_empty() {
        return Ok(params);
    }
    // restify's getContentType: up to the first `;`, lowercased.
    let media = content_type
        .map(|t| {
            t.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        })
        .unwrap_or_else(|| "application/octet-stream".to_string());
    let parsed = match media.as_str() {
        "application/json" => match serde_json::from_slice::<Value>(body) {
            Ok(Value::Object(m)) => m,
            // A JSON array or a truthy scalar replaces req.params wholesale
            // (the query's keys are lost too); a falsy one changes nothing.
            Ok(v) if truthy(&v) => return Ok(Map::new()),
            Ok(_) => return Ok(params),
            Err(e) => return Err(InvalidContent(format!("Invalid JSON: {e}"))),
        },
        "application/x-www-form-urlencoded" => parse_qs(&String::from_utf8_lossy(body)),
        _ => return Ok(params),
    };
    for (k, v) in parsed {
        if params.get(&k).is_some_and(truthy) {
            continue;
        }
        params.insert(k, v);
    }
    Ok(params)
}

/// JavaScript truthiness of a JSON value.
pub(crate) fn truthy(v: &Value) -> bool {
    match v {
        Value::Null => false,
        Value::Bool(b) => *b,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && !f.is_nan()),
        Value::String(s) => !s.is_empty(),
        Value::Array(_) | Value::Object(_) => true,
    }
}

/// `Object.keys(v)` paired with the values, as SAPI's attribute updates
/// iterate a change: an object's keys, an array's (and a string's) indexes;
/// nothing for other values.
pub(crate) fn js_entries(v: &Value) -> Vec<(String, Value)> {
    match v {
        Value::Object(o) => o.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        Value::Array(a) => a
            .iter()
            .enumerate()
            .map(|(i, v)| (i.to_string(), v.clone()))
            .collect(),
        // JavaScript indexes strings by UTF-16 code unit; a character
        // outside the BMP is one index here (no SAPI key is that long).
        Value::String(s) => s
            .chars()
            .enumerate()
            .map(|(i, c)| (i.to_string(), Value::String(c.to_string())))
            .collect(),
        _ => Vec::new(),
    }
}

/// A value as `qs` builds it, before holes are dropped.
#[derive(Clone, Debug, PartialEq)]
enum Q {
    Str(String),
    /// What merging a plain value into an object gives (`obj[v] = true`).
    True,
    /// Sparse: `None` is a hole.
    Arr(Vec<Option<Q>>),
    Obj(Vec<(String, Q)>),
}

impl Q {
    fn is_container(&self) -> bool {
        matches!(self, Q::Arr(_) | Q::Obj(_))
    }

    fn truthy(&self) -> bool {
        match self {
            Q::Str(s) => !s.is_empty(),
            _ => true,
        }
    }

    fn into_value(self) -> Value {
        match self {
            Q::Str(s) => Value::String(s),
            Q::True => Value::Bool(true),
            Q::Arr(a) => Value::Array(a.into_iter().flatten().map(Q::into_value).collect()),
            Q::Obj(o) => Value::Object(o.into_iter().map(|(k, v)| (k, v.into_value())).collect()),
        }
    }
}

fn obj_get_mut<'a>(o: &'a mut [(String, Q)], key: &str) -> Option<&'a mut Q> {
    o.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
}

/// Parse a query string or form body as `qs.parse` does.
pub(crate) fn parse_qs(raw: &str) -> Map<String, Value> {
    // parseValues: pairs in order, a repeated whole key becomes an array.
    let mut pairs: Vec<(String, Q)> = Vec::new();
    for part in raw.split('&').take(PARAMETER_LIMIT) {
        let pos = match part.find("]=") {
            Some(p) => Some(p + 1),
            None => part.find('='),
        };
        let (key, val) = match pos {
            Some(p) => (decode(&part[..p]), decode(&part[p + 1..])),
            None => (decode(part), String::new()),
        };
        match pairs.iter_mut().find(|(k, _)| *k == key) {
            Some((_, existing)) => {
                let mut items = match std::mem::replace(existing, Q::True) {
                    Q::Arr(a) => a,
                    other => vec![Some(other)],
                };
                items.push(Some(Q::Str(val)));
                *existing = Q::Arr(items);
            }
            None => pairs.push((key, Q::Str(val))),
        }
    }
    let mut root = Q::Obj(Vec::new());
    for (key, val) in pairs {
        if let Some(obj) = parse_keys(&key, val) {
            root = merge(root, obj);
        }
    }
    match root.into_value() {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

/// `qs`'s decoder: `+` is a space, then `decodeURIComponent`; a string
/// that does not decode (a bad escape, bytes that are not UTF-8) is kept
/// whole, with only the `+` replaced.
fn decode(s: &str) -> String {
    let spaced = s.replace('+', " ");
    let bytes = spaced.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match hex {
                Some(b) => {
                    out.push(b);
                    i += 3;
                }
                None => return spaced,
            }
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).unwrap_or(spaced)
}

/// The properties of `Object.prototype`: `qs` drops a key naming one
/// (`plainObjects` and `allowPrototypes` are off).
const PROTOTYPE_KEYS: [&str; 12] = [
    "constructor",
    "__defineGetter__",
    "__defineSetter__",
    "hasOwnProperty",
    "__lookupGetter__",
    "__lookupSetter__",
    "isPrototypeOf",
    "propertyIsEnumerable",
    "toString",
    "valueOf",
    "__proto__",
    "toLocaleString",
];

/// `parseKeys`: split `a[b][c]` into its segments (at most [`DEPTH`]
/// children, the rest kept as one segment) and build the nested value.
fn parse_keys(key: &str, val: Q) -> Option<Q> {
    if key.is_empty() {
        return None;
    }
    let segments = bracket_segments(key);
    let parent = match segments.first() {
        Some((start, _)) => &key[..*start],
        None => key,
    };
    let mut chain: Vec<String> = Vec::new();
    if !parent.is_empty() {
        if PROTOTYPE_KEYS.contains(&parent) {
            return None;
        }
        chain.push(parent.to_string());
    }
    for (used, (start, end)) in segments.iter().enumerate() {
        if used == DEPTH {
            chain.push(format!("[{}]", &key[*start..]));
            break;
        }
        let segment = &key[*start..*end];
        if PROTOTYPE_KEYS.contains(&&segment[1..segment.len() - 1]) {
            return None;
        }
        chain.push(segment.to_string());
    }
    Some(parse_object(&chain, val))
}

/// The `[...]` segments (no nested brackets) of a key, as byte ranges.
fn bracket_segments(key: &str) -> Vec<(usize, usize)> {
    let b = key.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'[' {
            let mut j = i + 1;
            while j < b.len() && b[j] != b'[' && b[j] != b']' {
                j += 1;
            }
            if j < b.len() && b[j] == b']' {
                out.push((i, j + 1));
                i = j + 1;
                continue;
            }
        }
        i += 1;
    }
    out
}

/// `parseObject`: the nested value for one key chain, leaf first.
fn parse_object(chain: &[String], val: Q) -> Q {
    let mut leaf = val;
    for root in chain.iter().rev() {
        leaf = if root == "[]" {
            match leaf {
                Q::Arr(a) => Q::Arr(a),
                other => Q::Arr(vec![Some(other)]),
            }
        } else {
            let clean = root
                .strip_prefix('[')
                .and_then(|r| r.strip_suffix(']'))
                .unwrap_or(root);
            let bracketed = clean.len() != root.len();
            match clean.parse::<usize>() {
                Ok(index) if bracketed && index.to_string() == clean && index <= ARRAY_LIMIT => {
                    let mut a = vec![None; index];
                    a.push(Some(leaf));
                    Q::Arr(a)
                }
                _ => Q::Obj(vec![(clean.to_string(), leaf)]),
            }
        };
    }
    leaf
}

/// `utils.merge(target, source)`.
fn merge(target: Q, source: Q) -> Q {
    if !source.truthy() {
        return target;
    }
    if !source.is_container() {
        return match target {
            Q::Arr(mut a) => {
                a.push(Some(source));
                Q::Arr(a)
            }
            Q::Obj(mut o) => {
                let k = match source {
                    Q::Str(k) => k,
                    _ => "true".to_string(),
                };
                if !PROTOTYPE_KEYS.contains(&k.as_str()) {
                    match obj_get_mut(&mut o, &k) {
                        Some(v) => *v = Q::True,
                        None => o.push((k, Q::True)),
                    }
                }
                Q::Obj(o)
            }
            t => Q::Arr(vec![Some(t), Some(source)]),
        };
    }
    let target = match target {
        t if !t.is_container() => {
            let mut a = vec![Some(t)];
            match source {
                Q::Arr(s) => a.extend(s),
                s => a.push(Some(s)),
            }
            return Q::Arr(a);
        }
        t => t,
    };
    match (target, source) {
        (Q::Arr(mut t), Q::Arr(s)) => {
            for (i, item) in s.into_iter().enumerate() {
                let Some(item) = item else { continue };
                match t.get_mut(i) {
                    Some(Some(existing)) if existing.is_container() => {
                        let e = std::mem::replace(existing, Q::True);
                        *existing = merge(e, item);
                    }
                    Some(Some(_)) => t.push(Some(item)),
                    Some(slot @ None) => *slot = Some(item),
                    None => {
                        t.resize(i, None);
                        t.push(Some(item));
                    }
                }
            }
            Q::Arr(t)
        }
        (t, Q::Obj(s)) => {
            let mut o = match t {
                Q::Obj(o) => o,
                // arrayToObject: the array's indexes become keys.
                Q::Arr(a) => a
                    .into_iter()
                    .enumerate()
                    .filter_map(|(i, v)| v.map(|v| (i.to_string(), v)))
                    .collect(),
                _ => Vec::new(),
            };
            for (k, v) in s {
                match obj_get_mut(&mut o, &k) {
                    Some(existing) => {
                        let e = std::mem::replace(existing, Q::True);
                        *existing = merge(e, v);
                    }
                    None => o.push((k, v)),
                }
            }
            Q::Obj(o)
        }
        // An object target, an array source: the source's indexes merge in
        // as keys (Object.keys of an array).
        (Q::Obj(mut o), Q::Arr(s)) => {
            for (i, v) in s.into_iter().enumerate() {
                let Some(v) = v else { continue };
                let k = i.to_string();
                match obj_get_mut(&mut o, &k) {
                    Some(existing) => {
                        let e = std::mem::replace(existing, Q::True);
                        *existing = merge(e, v);
                    }
                    None => o.push((k, v)),
                }
            }
            Q::Obj(o)
        }
        (t, _) => t,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn qs(s: &str) -> Value {
        Value::Object(parse_qs(s))
    }

    #[test]
    fn brackets_nest_and_arrays_build() {
        assert_eq!(
            qs("service_uuid=s&params[server_uuid]=x&params[tags][role]=cn"),
            json!({"service_uuid": "s", "params": {"server_uuid": "x", "tags": {"role": "cn"}}})
        );
        assert_eq!(qs("a[]=1&a[]=2"), json!({"a": ["1", "2"]}));
        assert_eq!(qs("a=1&a=2"), json!({"a": ["1", "2"]}));
        assert_eq!(qs("a[1]=y&a[0]=x"), json!({"a": ["x", "y"]}));
        // Holes are dropped; an index past 20 is a key.
        assert_eq!(qs("a[5]=x"), json!({"a": ["x"]}));
        assert_eq!(qs("a[21]=x"), json!({"a": {"21": "x"}}));
        // A plain value merged into an object becomes a `true` key.
        assert_eq!(qs("a[b]=1&a=c"), json!({"a": {"b": "1", "c": true}}));
        assert_eq!(qs("metadata[]=FOO"), json!({"metadata": ["FOO"]}));
    }

    #[test]
    fn decoding_and_odd_keys() {
        assert_eq!(qs("a=x+y&b=%41%42"), json!({"a": "x y", "b": "AB"}));
        // A bad escape leaves the whole value undecoded.
        assert_eq!(qs("a=%41%zz"), json!({"a": "%41%zz"}));
        assert_eq!(qs("a&=v&&b=1"), json!({"a": "", "b": "1"}));
        // Depth 5: the rest is one segment.
        assert_eq!(
            qs("a[b][c][d][e][f][g]=1"),
            json!({"a": {"b": {"c": {"d": {"e": {"f": {"[g]": "1"}}}}}}})
        );
    }

    #[test]
    fn bodies_by_content_type_and_query_precedence() {
        let form = b"action=delete&metadata[]=A";
        let p = restify_params(
            Some("action=update"),
            Some("application/x-www-form-urlencoded; charset=utf-8"),
            form,
        )
        .unwrap();
        assert_eq!(
            Value::Object(p),
            json!({"action": "update", "metadata": ["A"]})
        );
        // No content type: the body is not read.
        let p = restify_params(None, None, br#"{"a": 1}"#).unwrap();
        assert!(p.is_empty());
        let p = restify_params(Some("a="), Some("application/json"), br#"{"a": 1}"#).unwrap();
        assert_eq!(p["a"], json!(1), "an empty query value does not win");
        assert!(restify_params(None, Some("application/json"), b"{").is_err());
        assert!(
            restify_params(Some("a=1"), Some("application/json"), b"[1]")
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn object_keys_of_changes() {
        assert_eq!(
            js_entries(&json!(["x", "y"])),
            vec![("0".into(), json!("x")), ("1".into(), json!("y"))]
        );
        assert!(js_entries(&json!(5)).is_empty());
        assert_eq!(js_entries(&json!({"k": 1})), vec![("k".into(), json!(1))]);
    }
}
