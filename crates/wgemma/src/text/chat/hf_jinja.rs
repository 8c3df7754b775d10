//! The globals and filters HF's jinja2 environment gives chat templates, for minijinja:
//! `raise_exception` and a `tojson` that writes as Python's `json.dumps` does.

/// HF's `raise_exception(message)`: the template refuses its input.
pub(super) fn raise_exception(
    message: String,
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    Err(minijinja::Error::new(
        minijinja::ErrorKind::InvalidOperation,
        message,
    ))
}

/// HF's `tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False)`:
/// Python's `json.dumps`, which neither HTML-escapes (minijinja's built-in does) nor drops
/// the space after `,` and `:`, and keeps a dict's keys in insertion order (minijinja's
/// `preserve_order`).
pub(super) fn tojson(
    value: minijinja::Value,
    kwargs: minijinja::value::Kwargs,
) -> std::result::Result<minijinja::Value, minijinja::Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let bad = |e: serde_json::Error| {
        minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, e.to_string())
    };
    let mut out = Vec::new();
    match indent {
        Some(n) => {
            let pad = " ".repeat(n);
            let fmt = serde_json::ser::PrettyFormatter::with_indent(pad.as_bytes());
            let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
            serde::Serialize::serialize(&value, &mut ser).map_err(bad)?;
        }
        None => {
            let mut ser = serde_json::Serializer::with_formatter(&mut out, PythonJson);
            serde::Serialize::serialize(&value, &mut ser).map_err(bad)?;
        }
    }
    kwargs.assert_all_used()?;
    Ok(minijinja::Value::from_safe_string(
        String::from_utf8(out).expect("serde_json writes UTF-8"),
    ))
}

/// `json.dumps`' default separators: `", "` and `": "`.
struct PythonJson;

/// `", "` before every item but the first.
fn separate<W: ?Sized + std::io::Write>(writer: &mut W, first: bool) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}

impl serde_json::ser::Formatter for PythonJson {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separate(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        separate(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}
