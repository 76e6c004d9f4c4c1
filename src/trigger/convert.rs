//! Converts an Application's JSON into rhai values. This costs far more than evaluating
//! a condition, so it is done once per evaluation pass and shared by every condition.

use rhai::{Array, Dynamic, Map};
use serde_json::Value;

/// `null` becomes `()`, integers `i64` (or `f64` when they do not fit), objects maps.
pub fn to_dynamic(v: &Value) -> Dynamic {
    match v {
        Value::Null => Dynamic::UNIT,
        Value::Bool(b) => Dynamic::from_bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => Dynamic::from_int(i),
            None => Dynamic::from_float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => Dynamic::from(rhai::ImmutableString::from(s.as_str())),
        Value::Array(items) => {
            let arr: Array = items.iter().map(to_dynamic).collect();
            Dynamic::from_array(arr)
        }
        Value::Object(fields) => {
            let map: Map = fields.iter().map(|(k, v)| (k.as_str().into(), to_dynamic(v))).collect();
            Dynamic::from_map(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_becomes_rhai_values() {
        let d = to_dynamic(&json!({"a": [1, 2.5, "x", null, true], "b": {"c": 18446744073709551615u64}}));
        let map = d.cast::<Map>();
        let a = map["a"].clone().cast::<Array>();
        assert_eq!(a[0].as_int().unwrap(), 1);
        assert_eq!(a[1].as_float().unwrap(), 2.5);
        assert_eq!(a[2].clone().into_string().unwrap(), "x");
        assert!(a[3].is_unit());
        assert!(a[4].as_bool().unwrap());
        let b = map["b"].clone().cast::<Map>();
        assert!(b["c"].is_float());
    }
}
