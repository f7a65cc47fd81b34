//! CNAPI's `ensureParamsValid` (lib/validation/endpoints.js) as ServerSetup
//! and ServerFactoryReset use it: each parameter's rule, checked with
//! JavaScript's loose coercions (`isNaN`, `String(v)`), every failure in
//! one HTTP 500 InvalidParameters answer. The real CNAPI showed these in
//! the real-Triton harness (api-refusals); the simulator answered 204 or
//! started a job.

use axum::http::StatusCode;
use axum::response::Response;
use serde_json::{Map, Value};

use super::invalid_parameters;

/// One parameter's rule, as CNAPI names them.
#[derive(Clone, Copy, Debug)]
pub(super) enum Rule {
    /// `isStringType`
    String,
    /// `isArrayType`
    Array,
    /// `isNumberGreaterThanEqualZeroType`
    NonNegativeNumber,
    /// `isBooleanString`
    BooleanString,
}

/// `Number(v)` in JavaScript, `None` for NaN.
fn js_number(v: &Value) -> Option<f64> {
    match v {
        Value::Null => Some(0.0),
        Value::Bool(b) => Some(f64::from(u8::from(*b))),
        Value::Number(n) => n.as_f64(),
        Value::String(s) => {
            let t = s.trim();
            if t.is_empty() {
                Some(0.0)
            } else {
                t.parse::<f64>().ok().filter(|n| !n.is_nan())
            }
        }
        // `Number([])` is 0 and `Number([x])` is `Number(String(x))`.
        Value::Array(a) => match a.as_slice() {
            [] => Some(0.0),
            [one] => js_number(&Value::String(js_string(one))),
            _ => None,
        },
        Value::Object(_) => None,
    }
}

/// `String(v)` in JavaScript, for the values JSON carries.
fn js_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::String(s) => s.clone(),
        Value::Array(a) => a
            .iter()
            .map(|x| {
                if x.is_null() {
                    String::new()
                } else {
                    js_string(x)
                }
            })
            .collect::<Vec<_>>()
            .join(","),
        Value::Object(_) => "[object Object]".into(),
        other => other.to_string(),
    }
}

/// The message CNAPI's assertion gives when `v` breaks `rule`.
fn broken(rule: Rule, v: &Value) -> Option<&'static str> {
    match rule {
        Rule::String => (!v.is_string()).then_some("value was not a string"),
        Rule::Array => (!v.is_array()).then_some("value was not an array"),
        Rule::NonNegativeNumber => match js_number(v) {
            None => Some("value was not a number"),
            Some(n) if n < 0.0 => Some("value was not greater than or equal to zero"),
            Some(_) => None,
        },
        Rule::BooleanString => {
            let s = js_string(v).to_ascii_lowercase();
            (s != "true" && s != "false").then_some("value was not 'true' or 'false'")
        }
    }
}

/// Every present parameter against its rule (all of them optional here but
/// `server_uuid`, which the path always gives); `Err` is CNAPI's 500.
pub(super) fn params_valid(p: &Map<String, Value>, rules: &[(&str, Rule)]) -> Result<(), Response> {
    let errors: Vec<(&str, String)> = rules
        .iter()
        .filter_map(|(name, rule)| {
            let v = p.get(*name)?;
            broken(*rule, v).map(|m| (*name, m.to_string()))
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(invalid_parameters(
            StatusCode::INTERNAL_SERVER_ERROR,
            errors,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn javascript_coercions() {
        assert_eq!(js_number(&json!("12")), Some(12.0));
        assert_eq!(js_number(&json!("x")), None);
        assert_eq!(js_number(&json!(true)), Some(1.0));
        assert_eq!(js_number(&json!(null)), Some(0.0));
        assert_eq!(js_number(&json!([3])), Some(3.0));
        assert_eq!(js_number(&json!({})), None);
        assert_eq!(
            broken(Rule::NonNegativeNumber, &json!(-1)),
            Some("value was not greater than or equal to zero")
        );
        assert_eq!(broken(Rule::BooleanString, &json!(true)), None);
        assert_eq!(broken(Rule::BooleanString, &json!("TRUE")), None);
        assert!(broken(Rule::BooleanString, &json!(1)).is_some());
        assert!(broken(Rule::String, &json!(5)).is_some());
    }
}
