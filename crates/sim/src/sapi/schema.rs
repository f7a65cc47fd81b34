//! SAPI's `metadata_schema` check: `jsprim.validateJsonObject(schema,
//! metadata)` (jsprim 2.0.2), which runs the `json-schema` package's
//! draft-03 validator and reports its first error as
//! `property "<path>": <reason in lower case>`.
//!
//! Reproduced, quirks included:
//!
//! - keywords `type` (a name, a union array, or a schema), `required`,
//!   `properties`, `additionalProperties`, `items`, `minItems`/`maxItems`,
//!   `minLength`/`maxLength`, `minimum`/`maximum` (only between values of
//!   the same JavaScript type), `enum` (strict equality, so an object or
//!   array never matches), `pattern`, `disallow`, `extends`, `requires`,
//!   `maxDecimal`, and `default` (filled into the object being validated,
//!   which SAPI then stores);
//! - `integer` accepts anything JavaScript's `value % 1 === 0` accepts
//!   (`"12"`, `true`, `null`), and `object` accepts arrays and `null`;
//! - `additionalProperties: true` fails any property not listed, with
//!   "invalid schema/property definition true";
//! - an unsupported property's name is lower-cased with the reason.
//!
//! `pattern` is a JavaScript regular expression; the subset real schemas
//! use (classes, escapes, groups, alternation, quantifiers, anchors) is
//! matched here, and a pattern outside it is not checked (logged).

use serde_json::{Map, Value};

/// Validate (and fill defaults into) `input` against `schema`: `None` when
/// valid, else SAPI's SchemaValidationError message. `input` is `None`
/// when the object has no such attribute (`undefined`).
pub(crate) fn validate(schema: &Value, input: Option<&mut Value>) -> Option<String> {
    let mut errors = Vec::new();
    check_prop(input, schema, "", &Key::Str(String::new()), &mut errors);
    let first = errors.into_iter().next()?;
    let mut propname = first.property;
    let mut reason = first.message.to_lowercase();
    const START: &str = "the property ";
    const END: &str =
        " is not defined in the schema and the schema does not allow additional properties";
    if let (Some(i), Some(j)) = (reason.find(START), reason.find(END)) {
        let name = reason[i + START.len()..j].to_string();
        propname = if propname.is_empty() {
            name
        } else {
            format!("{propname}.{name}")
        };
        reason = "unsupported property".to_string();
    }
    Some(format!("property \"{propname}\": {reason}"))
}

struct SchemaError {
    property: String,
    message: String,
}

/// How a value is reached from its parent (`i` in the validator).
enum Key {
    Str(String),
    Index(usize),
    /// A schema used as a type: JavaScript appends `undefined`.
    Undefined,
}

/// The path of a child, as the validator concatenates it.
fn child_path(path: &str, key: &Key) -> String {
    match (path.is_empty(), key) {
        (false, Key::Index(i)) => format!("{path}[{i}]"),
        (false, Key::Undefined) => path.to_string(),
        (false, Key::Str(s)) => format!("{path}.{s}"),
        (true, Key::Index(i)) => i.to_string(),
        (true, Key::Undefined) => "undefined".to_string(),
        (true, Key::Str(s)) => s.clone(),
    }
}

fn typeof_js(v: Option<&Value>) -> &'static str {
    match v {
        None => "undefined",
        Some(Value::String(_)) => "string",
        Some(Value::Number(_)) => "number",
        Some(Value::Bool(_)) => "boolean",
        Some(_) => "object",
    }
}

fn truthy(v: Option<&Value>) -> bool {
    v.is_some_and(crate::params::truthy)
}

/// `checkProp(value, schema, path, i)`.
fn check_prop(
    mut value: Option<&mut Value>,
    schema: &Value,
    path: &str,
    key: &Key,
    errors: &mut Vec<SchemaError>,
) {
    let path = child_path(path, key);
    let add = |errors: &mut Vec<SchemaError>, message: String| {
        errors.push(SchemaError {
            property: path.clone(),
            message,
        })
    };
    let Value::Object(s) = schema else {
        // Not a schema: an error unless it is falsy. (A `null` schema
        // throws in the real validator and crashes SAPI; it is skipped.)
        if !schema.is_null() && crate::params::truthy(schema) {
            add(
                errors,
                format!("Invalid schema/property definition {}", js_string(schema)),
            );
        }
        return;
    };
    if let Some(ext) = s.get("extends").filter(|e| truthy(Some(e))) {
        check_prop(value.as_deref_mut(), ext, &path, key, errors);
    }
    let Some(v) = value else {
        if truthy(s.get("required")) {
            add(errors, "is missing and it is required".into());
        }
        return;
    };
    let type_errors = check_type(s.get("type"), v, &path);
    errors.extend(type_errors);
    if let Some(d) = s.get("disallow").filter(|d| truthy(Some(d)))
        && check_type(Some(d), v, &path).is_empty()
    {
        add(errors, " disallowed value was matched".into());
    }
    if v.is_null() {
        return;
    }
    if let Value::Array(items) = &mut *v {
        if let Some(item_schema) = s.get("items").filter(|i| truthy(Some(i))) {
            for (i, item) in items.iter_mut().enumerate() {
                let def = match item_schema {
                    Value::Array(defs) => defs.get(i).unwrap_or(&Value::Null),
                    one => one,
                };
                check_prop(Some(item), def, &path, &Key::Index(i), errors);
            }
        }
        let len = items.len() as f64;
        if let Some(min) = s.get("minItems").filter(|m| truthy(Some(m)))
            && len < to_number(min)
        {
            add(
                errors,
                format!("There must be a minimum of {} in the array", js_string(min)),
            );
        }
        if let Some(max) = s.get("maxItems").filter(|m| truthy(Some(m)))
            && len > to_number(max)
        {
            add(
                errors,
                format!("There must be a maximum of {} in the array", js_string(max)),
            );
        }
    } else if truthy(s.get("properties")) || truthy(s.get("additionalProperties")) {
        check_obj(
            v,
            s.get("properties"),
            &path,
            s.get("additionalProperties"),
            errors,
        );
    }
    if let (Some(p), Value::String(text)) = (s.get("pattern").filter(|p| truthy(Some(p))), &*v) {
        let pattern = js_string(p);
        match regex_find(&pattern, text) {
            Some(true) => {}
            Some(false) => add(
                errors,
                format!("does not match the regex pattern {pattern}"),
            ),
            None => tracing::warn!(
                pattern = %pattern,
                "sim SAPI: metadata_schema pattern not supported by the simulator; not checked"
            ),
        }
    }
    if let Value::String(text) = &*v {
        let units = text.encode_utf16().count() as f64;
        if let Some(max) = s.get("maxLength").filter(|m| truthy(Some(m)))
            && units > to_number(max)
        {
            add(
                errors,
                format!("may only be {} characters long", js_string(max)),
            );
        }
        if let Some(min) = s.get("minLength").filter(|m| truthy(Some(m)))
            && units < to_number(min)
        {
            add(
                errors,
                format!("must be at least {} characters long", js_string(min)),
            );
        }
    }
    if let Some(min) = s.get("minimum")
        && js_less(v, min)
    {
        add(
            errors,
            format!("must have a minimum value of {}", js_string(min)),
        );
    }
    if let Some(max) = s.get("maximum")
        && js_less(max, v)
    {
        add(
            errors,
            format!("must have a maximum value of {}", js_string(max)),
        );
    }
    if let Some(Value::Array(allowed)) = s.get("enum")
        && !allowed.iter().any(|a| js_strict_eq(a, v))
    {
        let list: Vec<String> = allowed.iter().map(js_join_item).collect();
        add(
            errors,
            format!(
                "does not have a value in the enumeration {}",
                list.join(", ")
            ),
        );
    }
    if let Some(Value::Number(n)) = s.get("maxDecimal") {
        let digits = n.as_f64().unwrap_or(0.0) as usize + 1;
        if has_long_decimal(&js_string(v), digits) {
            add(
                errors,
                format!(
                    "may only have {} digits of decimal places",
                    js_string(&Value::Number(n.clone()))
                ),
            );
        }
    }
}

/// `checkType(type, value)`: the errors of one type check.
fn check_type(t: Option<&Value>, v: &mut Value, path: &str) -> Vec<SchemaError> {
    let Some(t) = t.filter(|t| truthy(Some(t))) else {
        return Vec::new();
    };
    match t {
        Value::String(name) if name != "any" => {
            let mismatch = if name == "null" {
                !v.is_null()
            } else {
                typeof_js(Some(v)) != name
            };
            let ok = !mismatch
                || (v.is_array() && name == "array")
                || (name == "integer" && js_mod1_is_zero(v));
            if ok {
                Vec::new()
            } else {
                vec![SchemaError {
                    property: path.to_string(),
                    message: format!(
                        "{} value found, but a {name} is required",
                        typeof_js(Some(v))
                    ),
                }]
            }
        }
        Value::Array(union) => {
            let mut last = Vec::new();
            for member in union {
                last = check_type(Some(member), v, path);
                if last.is_empty() {
                    break;
                }
            }
            last
        }
        Value::Object(_) => {
            let mut own = Vec::new();
            check_prop(Some(v), t, path, &Key::Undefined, &mut own);
            own
        }
        _ => Vec::new(),
    }
}

/// `checkObj(instance, properties, path, additionalProperties)`.
fn check_obj(
    instance: &mut Value,
    props: Option<&Value>,
    path: &str,
    additional: Option<&Value>,
    errors: &mut Vec<SchemaError>,
) {
    let push = |errors: &mut Vec<SchemaError>, message: String| {
        errors.push(SchemaError {
            property: path.to_string(),
            message,
        })
    };
    if let Some(Value::Object(defs)) = props {
        if !instance.is_object() {
            push(errors, "an object is required".into());
        }
        for k in js_keys(defs) {
            let def = &defs[k];
            let default = def.get("default").filter(|d| truthy(Some(d))).cloned();
            match &mut *instance {
                Value::Object(o) => {
                    if !o.contains_key(k)
                        && let Some(d) = default
                    {
                        o.insert(k.clone(), d);
                    }
                    check_prop(o.get_mut(k), def, path, &Key::Str(k.clone()), errors);
                }
                other => {
                    let mut v = primitive_prop(other, k).or(default);
                    check_prop(v.as_mut(), def, path, &Key::Str(k.clone()), errors);
                }
            }
        }
    }
    let Value::Object(o) = instance else { return };
    let keys: Vec<String> = js_keys(o).into_iter().cloned().collect();
    for k in keys {
        let def = props.and_then(|p| p.get(&k));
        if !k.starts_with("__")
            && props.is_some_and(|p| truthy(Some(p)))
            && !truthy(def)
            && additional == Some(&Value::Bool(false))
        {
            push(
                errors,
                format!(
                    "{}The property {k} is not defined in the schema and the schema does not allow additional properties",
                    typeof_js(o.get(&k))
                ),
            );
        }
        if let Some(req) = def
            .and_then(|d| d.get("requires"))
            .filter(|r| truthy(Some(r)))
        {
            let name = js_string(req);
            if !o.contains_key(&name) {
                push(
                    errors,
                    format!(
                        "the presence of the property {k} requires that {name} also be present"
                    ),
                );
            }
        }
        let listed = matches!(props, Some(Value::Object(p)) if p.contains_key(&k));
        if let Some(add) = additional.filter(|a| truthy(Some(a)))
            && !listed
        {
            check_prop(o.get_mut(&k), add, path, &Key::Str(k.clone()), errors);
        }
    }
}

/// A property of a primitive (`"abc"[1]`, `"abc".length`).
fn primitive_prop(v: &Value, key: &str) -> Option<Value> {
    let Value::String(s) = v else { return None };
    if key == "length" {
        return Some(Value::from(s.encode_utf16().count()));
    }
    let i: usize = key.parse().ok().filter(|i: &usize| i.to_string() == key)?;
    s.chars().nth(i).map(|c| Value::String(c.to_string()))
}

/// Object keys in JavaScript's `for...in` order: array indexes ascending,
/// then the rest in insertion order.
fn js_keys(o: &Map<String, Value>) -> Vec<&String> {
    let index = |k: &str| {
        k.parse::<u32>()
            .ok()
            .filter(|i| i.to_string() == k && *i < u32::MAX)
    };
    let mut ints: Vec<&String> = o.keys().filter(|k| index(k).is_some()).collect();
    ints.sort_by_key(|k| index(k));
    ints.extend(o.keys().filter(|k| index(k).is_none()));
    ints
}

/// JavaScript `ToNumber`.
fn to_number(v: &Value) -> f64 {
    match v {
        Value::Null => 0.0,
        Value::Bool(b) => f64::from(u8::from(*b)),
        Value::Number(n) => n.as_f64().unwrap_or(f64::NAN),
        Value::String(s) => {
            let t = s.trim();
            if t.is_empty() {
                0.0
            } else if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
                u64::from_str_radix(hex, 16)
                    .map(|n| n as f64)
                    .unwrap_or(f64::NAN)
            } else if t.chars().all(|c| c.is_ascii_digit() || "+-.eE".contains(c)) {
                t.parse().unwrap_or(f64::NAN)
            } else {
                f64::NAN
            }
        }
        // [] is "" is 0, [x] is x, anything longer is NaN; objects are NaN.
        Value::Array(a) => match a.as_slice() {
            [] => 0.0,
            [one] if !one.is_object() => to_number(&Value::String(js_string(one))),
            _ => f64::NAN,
        },
        Value::Object(_) => f64::NAN,
    }
}

fn js_mod1_is_zero(v: &Value) -> bool {
    let n = to_number(v);
    n.is_finite() && n.fract() == 0.0
}

/// JavaScript `String(v)`.
fn js_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 1e21 => format!("{f:.0}"),
            Some(f) => f.to_string(),
            None => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(a) => a.iter().map(js_join_item).collect::<Vec<_>>().join(","),
        Value::Object(_) => "[object Object]".into(),
    }
}

/// An element as `Array.prototype.join` writes it.
fn js_join_item(v: &Value) -> String {
    match v {
        Value::Null => String::new(),
        other => js_string(other),
    }
}

/// `a < b` for two values of the same JavaScript type (the validator only
/// compares those).
fn js_less(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => {
            x.as_f64().unwrap_or(f64::NAN) < y.as_f64().unwrap_or(f64::NAN)
        }
        (Value::String(x), Value::String(y)) => x.encode_utf16().lt(y.encode_utf16()),
        (Value::Bool(x), Value::Bool(y)) => !x & y,
        _ => false,
    }
}

/// `===`: objects and arrays are never equal to a parsed copy.
fn js_strict_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(_) | Value::Object(_), _) | (_, Value::Array(_) | Value::Object(_)) => false,
        _ => a == b,
    }
}

/// Whether `text` has a `.` followed by at least `digits` digits.
fn has_long_decimal(text: &str, digits: usize) -> bool {
    text.match_indices('.').any(|(i, _)| {
        text[i + 1..]
            .chars()
            .take_while(char::is_ascii_digit)
            .count()
            >= digits
    })
}

// ---------------------------------------------------------------------------
// A JavaScript regular expression subset, for `pattern`.

#[derive(Debug)]
enum Node {
    Char(char),
    /// `.`: anything but a line terminator.
    Any,
    Class {
        negated: bool,
        items: Vec<ClassItem>,
    },
    Start,
    End,
    Group(Vec<Vec<Piece>>),
}

#[derive(Debug)]
enum ClassItem {
    Range(char, char),
    Digit(bool),
    Word(bool),
    Space(bool),
}

#[derive(Debug)]
struct Piece {
    node: Node,
    min: usize,
    max: usize,
    greedy: bool,
}

/// Whether `pattern` matches somewhere in `text` (`text.match(pattern)`);
/// `None` when the pattern uses syntax this subset lacks.
fn regex_find(pattern: &str, text: &str) -> Option<bool> {
    let chars: Vec<char> = pattern.chars().collect();
    let mut pos = 0;
    let alt = parse_alt(&chars, &mut pos)?;
    if pos != chars.len() {
        return None;
    }
    let text: Vec<char> = text.chars().collect();
    Some((0..=text.len()).any(|start| match_alt(&alt, &text, start, &mut |_| true)))
}

fn parse_alt(p: &[char], pos: &mut usize) -> Option<Vec<Vec<Piece>>> {
    let mut alts = vec![parse_seq(p, pos)?];
    while p.get(*pos) == Some(&'|') {
        *pos += 1;
        alts.push(parse_seq(p, pos)?);
    }
    Some(alts)
}

fn parse_seq(p: &[char], pos: &mut usize) -> Option<Vec<Piece>> {
    let mut seq = Vec::new();
    while let Some(&c) = p.get(*pos) {
        let node = match c {
            '|' | ')' => break,
            '^' => {
                *pos += 1;
                Node::Start
            }
            '$' => {
                *pos += 1;
                Node::End
            }
            '.' => {
                *pos += 1;
                Node::Any
            }
            '(' => {
                *pos += 1;
                if p.get(*pos) == Some(&'?') {
                    if p.get(*pos + 1) != Some(&':') {
                        return None;
                    }
                    *pos += 2;
                }
                let inner = parse_alt(p, pos)?;
                if p.get(*pos) != Some(&')') {
                    return None;
                }
                *pos += 1;
                Node::Group(inner)
            }
            '[' => parse_class(p, pos)?,
            '\\' => {
                *pos += 1;
                let e = *p.get(*pos)?;
                *pos += 1;
                match class_escape(e) {
                    Some(item) => Node::Class {
                        negated: false,
                        items: vec![item],
                    },
                    None => Node::Char(literal_escape(e)?),
                }
            }
            '*' | '+' | '?' | '{' => return None,
            other => {
                *pos += 1;
                Node::Char(other)
            }
        };
        let (min, max) = match p.get(*pos) {
            Some('*') => (0, usize::MAX),
            Some('+') => (1, usize::MAX),
            Some('?') => (0, 1),
            Some('{') => {
                // A `{` that is no quantifier is a literal: not in the subset.
                let (min, max, end) = parse_braces(p, *pos)?;
                *pos = end - 1;
                (min, max)
            }
            _ => {
                seq.push(Piece {
                    node,
                    min: 1,
                    max: 1,
                    greedy: true,
                });
                continue;
            }
        };
        *pos += 1;
        let greedy = if p.get(*pos) == Some(&'?') {
            *pos += 1;
            false
        } else {
            true
        };
        seq.push(Piece {
            node,
            min,
            max,
            greedy,
        });
    }
    Some(seq)
}

/// `{n}`, `{n,}`, `{n,m}` at `start`: (min, max, index after `}`).
fn parse_braces(p: &[char], start: usize) -> Option<(usize, usize, usize)> {
    let close = p[start..].iter().position(|c| *c == '}')? + start;
    let body: String = p[start + 1..close].iter().collect();
    let (min, max) = match body.split_once(',') {
        None => {
            let n = body.parse().ok()?;
            (n, n)
        }
        Some((a, "")) => (a.parse().ok()?, usize::MAX),
        Some((a, b)) => (a.parse().ok()?, b.parse().ok()?),
    };
    Some((min, max, close + 1))
}

fn class_escape(e: char) -> Option<ClassItem> {
    Some(match e {
        'd' => ClassItem::Digit(true),
        'D' => ClassItem::Digit(false),
        'w' => ClassItem::Word(true),
        'W' => ClassItem::Word(false),
        's' => ClassItem::Space(true),
        'S' => ClassItem::Space(false),
        _ => return None,
    })
}

fn literal_escape(e: char) -> Option<char> {
    Some(match e {
        'n' => '\n',
        't' => '\t',
        'r' => '\r',
        'f' => '\u{c}',
        'v' => '\u{b}',
        '0' => '\0',
        c if !c.is_ascii_alphanumeric() => c,
        // \b, \B, back references, \u, \x, \c...: not in the subset.
        _ => return None,
    })
}

fn parse_class(p: &[char], pos: &mut usize) -> Option<Node> {
    *pos += 1;
    let negated = p.get(*pos) == Some(&'^');
    if negated {
        *pos += 1;
    }
    let mut items = Vec::new();
    let mut first = true;
    loop {
        let c = *p.get(*pos)?;
        if c == ']' && !first {
            *pos += 1;
            break;
        }
        if c == ']' {
            // `[]` matches nothing in JavaScript; not in the subset.
            return None;
        }
        first = false;
        let lo = if c == '\\' {
            let e = *p.get(*pos + 1)?;
            *pos += 2;
            if let Some(item) = class_escape(e) {
                items.push(item);
                continue;
            }
            if e == 'b' {
                '\u{8}'
            } else {
                literal_escape(e)?
            }
        } else {
            *pos += 1;
            c
        };
        if p.get(*pos) == Some(&'-') && p.get(*pos + 1).is_some_and(|n| *n != ']') {
            let hi = match p[*pos + 1] {
                '\\' => {
                    let e = *p.get(*pos + 2)?;
                    *pos += 3;
                    literal_escape(e)?
                }
                h => {
                    *pos += 2;
                    h
                }
            };
            items.push(ClassItem::Range(lo, hi));
        } else {
            items.push(ClassItem::Range(lo, lo));
        }
    }
    Some(Node::Class { negated, items })
}

fn class_item_matches(item: &ClassItem, c: char) -> bool {
    match item {
        ClassItem::Range(lo, hi) => (*lo..=*hi).contains(&c),
        ClassItem::Digit(yes) => c.is_ascii_digit() == *yes,
        ClassItem::Word(yes) => (c.is_ascii_alphanumeric() || c == '_') == *yes,
        ClassItem::Space(yes) => c.is_whitespace() == *yes,
    }
}

type Cont<'a> = &'a mut dyn FnMut(usize) -> bool;

fn match_alt(alt: &[Vec<Piece>], t: &[char], pos: usize, k: Cont<'_>) -> bool {
    alt.iter().any(|seq| match_seq(seq, 0, t, pos, &mut *k))
}

fn match_seq(seq: &[Piece], i: usize, t: &[char], pos: usize, k: Cont<'_>) -> bool {
    match seq.get(i) {
        None => k(pos),
        Some(piece) => match_rep(piece, 0, t, pos, &mut |p| {
            match_seq(seq, i + 1, t, p, &mut *k)
        }),
    }
}

fn match_rep(piece: &Piece, count: usize, t: &[char], pos: usize, k: Cont<'_>) -> bool {
    if count < piece.min {
        return match_node(&piece.node, t, pos, &mut |p| {
            match_rep(piece, count + 1, t, p, &mut *k)
        });
    }
    let more = |k: Cont<'_>| {
        count < piece.max
            && match_node(&piece.node, t, pos, &mut |p| {
                p != pos && match_rep(piece, count + 1, t, p, &mut *k)
            })
    };
    // Greedy: one more repetition first; lazy: the rest of the pattern
    // first.
    if piece.greedy {
        if more(&mut *k) {
            return true;
        }
        k(pos)
    } else {
        if k(pos) {
            return true;
        }
        more(&mut *k)
    }
}

fn match_node(node: &Node, t: &[char], pos: usize, k: Cont<'_>) -> bool {
    match node {
        Node::Char(c) => t.get(pos) == Some(c) && k(pos + 1),
        Node::Any => {
            t.get(pos)
                .is_some_and(|c| !matches!(c, '\n' | '\r' | '\u{2028}' | '\u{2029}'))
                && k(pos + 1)
        }
        Node::Class { negated, items } => {
            t.get(pos)
                .is_some_and(|c| items.iter().any(|i| class_item_matches(i, *c)) != *negated)
                && k(pos + 1)
        }
        Node::Start => pos == 0 && k(pos),
        Node::End => pos == t.len() && k(pos),
        Node::Group(alt) => match_alt(alt, t, pos, k),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn check(schema: Value, mut input: Value) -> Option<String> {
        validate(&schema, Some(&mut input))
    }

    #[test]
    fn sapi_test_schemas() {
        // sdc-sapi test/applications.test.js: "soft_schema".
        let soft = json!({"type": "object", "properties": {
            "foo": {"type": "string", "minLength": 1, "required": true}}});
        assert_eq!(
            check(soft.clone(), json!({})).as_deref(),
            Some("property \"foo\": is missing and it is required")
        );
        assert_eq!(check(soft.clone(), json!({"foo": "bar"})), None);
        assert_eq!(
            check(soft.clone(), json!({"foo": ""})).as_deref(),
            Some("property \"foo\": must be at least 1 characters long")
        );
        assert_eq!(
            check(soft, json!({"foo": 3})).as_deref(),
            Some("property \"foo\": number value found, but a string is required")
        );
        let hard = json!({"type": "object", "additionalProperties": true,
            "properties": {"foo": {"type": "string"}}});
        assert_eq!(
            check(hard, json!({"foo": "x", "Bad": 1})).as_deref(),
            Some("property \"Bad\": invalid schema/property definition true")
        );
        let closed = json!({"type": "object", "additionalProperties": false,
            "properties": {"a": {"type": "object", "additionalProperties": false,
                                 "properties": {"b": {}}}}});
        assert_eq!(
            check(closed, json!({"a": {"b": 1, "Extra": 2}})).as_deref(),
            Some("property \"a.extra\": unsupported property")
        );
    }

    #[test]
    fn the_real_sdc_app_schema() {
        // sdcadm's joyent-schemas `sdc.sdc_app` (fabric_cfg).
        let schema = json!({"type": "object", "properties": {"fabric_cfg": {
            "type": "object", "properties": {
                "default_underlay_mtu": {"type": "integer", "minimum": 576, "maximum": 9000,
                                         "required": true, "default": 9000},
                "sdc_underlay_assignment": {"type": "string", "required": true,
                                            "enum": ["manual", "automatic"]},
                "sdc_underlay_tag": {"type": "string", "required": true}}}}});
        let mut md = json!({"update_channel": "dev", "fabric_cfg": {
            "sdc_underlay_assignment": "manual", "sdc_underlay_tag": "sdc_underlay"}});
        assert_eq!(validate(&schema, Some(&mut md)), None);
        assert_eq!(
            md["fabric_cfg"]["default_underlay_mtu"], 9000,
            "default filled in"
        );
        assert_eq!(
            check(
                schema.clone(),
                json!({"fabric_cfg": {"default_underlay_mtu": 100,
                "sdc_underlay_assignment": "manual", "sdc_underlay_tag": "t"}})
            )
            .as_deref(),
            Some("property \"fabric_cfg.default_underlay_mtu\": must have a minimum value of 576")
        );
        assert_eq!(
            check(
                schema.clone(),
                json!({"fabric_cfg": {
                "sdc_underlay_assignment": "Sometimes", "sdc_underlay_tag": "t"}})
            )
            .as_deref(),
            Some(
                "property \"fabric_cfg.sdc_underlay_assignment\": does not have a value in the enumeration manual, automatic"
            )
        );
        // "integer" is `value % 1 === 0`: a numeric string passes.
        assert_eq!(
            check(
                schema,
                json!({"fabric_cfg": {"default_underlay_mtu": "1500",
                "sdc_underlay_assignment": "manual", "sdc_underlay_tag": "t"}})
            ),
            None
        );
    }

    #[test]
    fn types_unions_and_undefined() {
        assert_eq!(validate(&json!({"type": "object"}), None), None);
        assert_eq!(
            validate(&json!({"required": true}), None).as_deref(),
            Some("property \"\": is missing and it is required")
        );
        assert_eq!(check(json!({"type": "object"}), json!([1])), None);
        assert_eq!(
            check(json!({"type": ["string", "number"]}), json!(true)).as_deref(),
            Some("property \"\": boolean value found, but a number is required")
        );
        assert_eq!(
            check(json!({"items": {"type": "string"}}), json!(["a", 2])).as_deref(),
            Some("property \"1\": number value found, but a string is required")
        );
        assert_eq!(
            check(json!({"enum": [{"a": 1}]}), json!({"a": 1})).as_deref(),
            Some("property \"\": does not have a value in the enumeration [object object]")
        );
    }

    #[test]
    fn patterns() {
        let uuid = "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$";
        assert_eq!(
            regex_find(uuid, "930896af-bf8c-48d4-885c-6573a94b1853"),
            Some(true)
        );
        assert_eq!(regex_find(uuid, "930896af"), Some(false));
        let v4 = r"^(?:(?:\d|[1-9]\d|1\d\d|2[0-4]\d|25[0-5])\.){3}(?:\d|[1-9]\d|1\d\d|2[0-4]\d|25[0-5])$";
        assert_eq!(regex_find(v4, "10.99.99.7"), Some(true));
        assert_eq!(regex_find(v4, "10.99.99.256"), Some(false));
        assert_eq!(regex_find("b+c", "aabbbcc"), Some(true));
        assert_eq!(regex_find("^a.*?z$", "abcz"), Some(true));
        assert_eq!(
            regex_find(r"^[a-zA-Z][a-zA-Z0-9_\./-]{1,255}$", "my-net"),
            Some(true)
        );
        assert_eq!(regex_find(r"(?=x)", "x"), None);
        assert_eq!(
            check(json!({"pattern": uuid}), json!("nope")).as_deref(),
            Some(&*format!(
                "property \"\": does not match the regex pattern {uuid}"
            ))
        );
    }
}
