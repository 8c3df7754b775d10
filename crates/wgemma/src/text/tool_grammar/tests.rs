use super::*;
use llguidance::api::TopLevelGrammar;
use llguidance::toktrie::ApproximateTokEnv;
use llguidance::{Matcher, ParserFactory};
use serde_json::json;

/// A vocabulary that spells every marker as text.
const TEXT: SpecialMarkers = SpecialMarkers {
    call_start: false,
    call_end: false,
    tool_response: false,
    string: false,
};

fn decl(params: Value) -> ToolDeclaration {
    ToolDeclaration::new("f", None, Some(params)).unwrap()
}

fn grammar(params: Value) -> Result<String> {
    let d = decl(params);
    tool_call_grammar(&[(0, &d)], false, &|i| format!("tools[{i}]"), TEXT)
}

/// A compiled grammar over a vocabulary of single bytes, as the server compiles one.
fn matcher(lark: &str) -> Matcher {
    let env = ApproximateTokEnv::single_byte_env();
    let mut factory = ParserFactory::new_simple(&env).unwrap();
    factory.quiet();
    let m = Matcher::new(factory.create_parser(TopLevelGrammar::from_lark(lark.to_string())));
    assert!(m.get_error().is_none(), "{:?}\n{lark}", m.get_error());
    m
}

/// Whether `text` is a whole reply under `lark`: each byte allowed in turn, and the
/// grammar complete at the end.
fn accepts(m: &Matcher, text: &str) -> bool {
    let mut m = m.deep_clone();
    text.bytes().all(|b| m.consume_token(b as u32).is_ok()) && m.is_accepting().unwrap()
}

/// The call of `f` with `args` written in Gemma's notation, `'` standing for the mark.
fn call(args: &str) -> String {
    format!(
        "<|tool_call>call:f{}<tool_call|>",
        args.replace('\'', "<|\"|>")
    )
}

fn check(schema: Value, good: &[&str], bad: &[&str]) {
    let lark = grammar(schema.clone()).unwrap();
    let m = matcher(&lark);
    for args in good {
        assert!(
            accepts(&m, &call(args)),
            "refused {args} under {schema}\n{lark}"
        );
    }
    for args in bad {
        assert!(
            !accepts(&m, &call(args)),
            "accepted {args} under {schema}\n{lark}"
        );
    }
}

/// What Pydantic writes for a model with a nested model, an Enum and `Field` bounds.
#[test]
fn pydantic_nested_models_with_bounds() {
    let schema = json!({
        "$defs": {
            "Tribe": {"enum": ["Judah", "Levi"], "title": "Tribe", "type": "string"},
            "Son": {"properties": {"name": {"maxLength": 6, "title": "Name", "type": "string"}},
                    "required": ["name"], "title": "Son", "type": "object"}},
        "properties": {
            "name": {"type": "string", "minLength": 1, "maxLength": 8},
            "age": {"type": "integer", "minimum": 1, "maximum": 999},
            "tribe": {"$ref": "#/$defs/Tribe", "description": "of Israel"},
            "sons": {"items": {"$ref": "#/$defs/Son"}, "maxItems": 2, "type": "array"},
            "born": {"anyOf": [{"type": "string", "format": "date"}, {"type": "null"}], "default": null}},
        "required": ["name", "age", "tribe", "sons"], "title": "Person", "type": "object"});
    check(
        schema,
        &[
            "{name:'Moses',age:120,tribe:'Levi',sons:[{name:'Eli'}]}",
            "{name:'Aaron',age:1,tribe:'Levi',sons:[],born:'1200-02-29'}",
            "{name:'Dan',age:999,tribe:'Judah',sons:[{name:'A'},{name:'B'}],born:null}",
        ],
        &[
            "{name:'',age:120,tribe:'Levi',sons:[]}",
            "{name:'Moses',age:0,tribe:'Levi',sons:[]}",
            "{name:'Moses',age:1000,tribe:'Levi',sons:[]}",
            "{name:'Moses',age:12,tribe:'Dan',sons:[]}",
            "{name:'Moses',age:12,tribe:'Levi',sons:[{name:'Gershom'}]}",
            "{name:'Moses',age:12,tribe:'Levi',sons:[{name:'A'},{name:'B'},{name:'C'}]}",
            "{name:'Moses',age:12,tribe:'Levi',sons:[],born:'1200-13-01'}",
        ],
    );
}

#[test]
fn recursive_references_and_tagged_unions() {
    let tree = json!({"$defs": {"Node": {"type": "object", "properties": {
            "v": {"type": "integer"}, "kids": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            "required": ["v"]}},
        "$ref": "#/$defs/Node"});
    check(
        tree,
        &["{v:1,kids:[{v:2,kids:[{v:3}]},{v:-4}]}", "{v:0}"],
        &["{kids:[]}", "{v:1,kids:[{}]}"],
    );
    let union = json!({"type": "object", "properties": {"pet": {"oneOf": [
            {"type": "object", "properties": {"kind": {"const": "cat"}, "lives": {"type": "integer", "exclusiveMinimum": 0}},
             "required": ["kind", "lives"]},
            {"type": "object", "properties": {"kind": {"const": "dog"}, "name": {"type": "string"}},
             "required": ["kind"]}],
        "discriminator": {"propertyName": "kind"}}}, "required": ["pet"]});
    check(
        union,
        &["{pet:{kind:'cat',lives:9}}", "{pet:{kind:'dog'}}"],
        &["{pet:{kind:'cat',lives:0}}", "{pet:{kind:'cow'}}"],
    );
    let root = json!({"type": "object", "properties": {"next": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["next"]});
    check(root, &["{next:{next:null}}"], &["{next:{}}"]);
}

#[test]
fn strings_numbers_arrays_and_maps() {
    let schema = json!({"type": "object", "properties": {
        "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "word": {"type": "string", "pattern": "\\d/x"},
        "at": {"type": "string", "format": "date-time"},
        "id": {"type": "string", "format": "uuid"},
        "mail": {"type": "string", "format": "email"},
        "p": {"type": "number", "minimum": 0, "maximum": 1},
        "pair": {"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}], "minItems": 2, "maxItems": 2},
        "counts": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
        "few": {"type": "array", "items": {"type": "boolean"}, "minItems": 1, "maxItems": 2},
        "one": {"type": "array", "items": {"type": "integer"}, "maxItems": 1},
        "two": {"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 2}}});
    check(
        schema,
        &[
            "{code:'ABC'}",
            "{word:'a1/xz'}",
            "{at:'2026-12-07T10:00:00Z',id:'123e4567-e89b-12d3-a456-426614174000'}",
            "{mail:'moses@sinai.org',p:0.25}",
            "{p:1,pair:[3,'x'],counts:{a:1,'two words':2}}",
            "{few:[true]}",
            "{few:[true,false]}",
            "{one:[],two:[1,2]}",
            "{one:[7]}",
        ],
        &[
            "{code:'ABCD'}",
            "{code:'abc'}",
            "{word:'ax'}",
            "{at:'2026-12-07'}",
            "{id:'123'}",
            "{mail:'moses'}",
            "{p:1.5}",
            "{p:-0.1}",
            "{pair:[3]}",
            "{counts:{a:-1}}",
            "{few:[]}",
            "{few:[true,true,true]}",
            "{one:[1,2]}",
            "{two:[1]}",
            "{two:[1,2,3]}",
        ],
    );
    // An integer without bounds has at most 18 digits.
    check(
        json!({"type": "object", "properties": {"n": {"type": "integer"}}}),
        &["{n:-999999999999999999}"],
        &["{n:9999999999999999999}", "{n:01}"],
    );
}

#[test]
fn unenforceable_keywords_are_refused_by_path() {
    for (schema, path) in [
        (
            json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}}),
            "tools[0].function.parameters.properties.a.uniqueItems",
        ),
        (
            json!({"type": "object", "properties": {"a": {"$ref": "https://x/y"}}}),
            "tools[0].function.parameters.properties.a.$ref",
        ),
        (
            json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}}),
            "tools[0].function.parameters.properties.a.$ref",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "format": "binary"}}}),
            "tools[0].function.parameters.properties.a.format",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "string", "pattern": "a^b"}}}),
            "tools[0].function.parameters.properties.a.pattern",
        ),
        (
            json!({"type": "object", "properties": {"a": {"allOf": [{"type": "string"}, {"minLength": 2}]}}}),
            "tools[0].function.parameters.properties.a.allOf",
        ),
        (
            json!({"type": "object", "properties": {"a": {"type": "date"}}}),
            "tools[0].function.parameters.properties.a.type",
        ),
        (
            json!({"type": "object", "properties": {}, "required": ["b"]}),
            "tools[0].function.parameters.required",
        ),
        (
            json!({"type": "object", "properties": {"a": {"enum": []}}}),
            "tools[0].function.parameters.properties.a.enum",
        ),
    ] {
        let e = grammar(schema).unwrap_err().to_string();
        assert!(e.contains(path), "{path}: {e}");
    }
}

#[test]
fn calls_or_an_answer() {
    let d = decl(
        json!({"type": "object", "properties": {"city": {"enum": ["Ur"]}}, "required": ["city"]}),
    );
    let answer = r#"%json {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": false, "x-guidance": {"whitespace_flexible": false}}"#;
    let lark =
        tool_calls_or_answer_grammar(&[(0, &d)], true, &|i| format!("tools[{i}]"), TEXT, answer)
            .unwrap();
    let m = matcher(&lark);
    assert!(accepts(&m, &call("{city:'Ur'}")));
    assert!(accepts(&m, &(call("{city:'Ur'}") + &call("{city:'Ur'}"))));
    assert!(accepts(&m, r#"{"a":1}"#));
    for bad in [
        r#"{"a":1}"#.to_string() + &call("{city:'Ur'}"),
        "Ur".into(),
        call("{city:'Uz'}"),
    ] {
        assert!(!accepts(&m, &bad), "{bad}");
    }
}

/// Under `tool_choice: "auto"` with a strict tool: any text, and a call once `<|tool_call>`
/// is written, its arguments held to the strict tool's schema (another tool's are any
/// object); no marker in text that opens no call.
#[test]
fn strict_calls_in_free_text() {
    let weather = ToolDeclaration::new(
        "weather",
        None,
        Some(
            json!({"type": "object", "properties": {"city": {"enum": ["Paris", "Rome"]}},
                    "required": ["city"]}),
        ),
    )
    .unwrap();
    let free = ToolDeclaration::new(
        "note",
        None,
        Some(json!({"type": "object", "properties": {"n": {"type": "integer"}}})),
    )
    .unwrap();
    let path = |i| format!("tools[{i}]");
    let tools = [(0, &weather, true), (1, &free, false)];
    let m = matcher(&tool_calls_in_text_grammar(&tools, true, &path, TEXT).unwrap());
    let w =
        |args: &str| format!("<|tool_call>call:weather{args}<tool_call|>").replace('\'', "<|\"|>");
    let n = |args: &str| format!("<|tool_call>call:note{args}<tool_call|>").replace('\'', "<|\"|>");
    for good in [
        String::new(),
        "Just text, with <|tool and tool_call> apart.".to_string(),
        w("{city:'Paris'}"),
        format!("Let me look. {}", w("{city:'Rome'}")),
        format!(
            "{}{} done",
            w("{city:'Rome'}"),
            n("{n:'any',x:[1,{y:null}]}")
        ),
    ] {
        assert!(accepts(&m, &good), "refused {good:?}");
    }
    for bad in [
        w("{city:'Oslo'}"),
        w("{}"),
        format!("text {}", w("{city:'Paris',extra:1}")),
        "a marker <|tool_call> opening nothing".to_string(),
        "<|tool_call>call:other{}<tool_call|>".to_string(),
    ] {
        assert!(!accepts(&m, &bad), "accepted {bad:?}");
    }
    // One call in all without parallel calls.
    let one = matcher(&tool_calls_in_text_grammar(&tools, false, &path, TEXT).unwrap());
    assert!(accepts(&one, &format!("a {} b", w("{city:'Rome'}"))));
    assert!(!accepts(
        &one,
        &format!("{}{}", w("{city:'Rome'}"), w("{city:'Paris'}"))
    ));
    // A strict schema the grammar cannot enforce is refused by its path; another tool's is
    // not read.
    let unique = decl(
        json!({"type": "object", "properties": {"a": {"type": "array", "uniqueItems": true}}}),
    );
    let e = tool_calls_in_text_grammar(&[(3, &unique, true)], true, &path, TEXT).unwrap_err();
    assert!(
        e.to_string()
            .contains("tools[3].function.parameters.properties.a.uniqueItems"),
        "{e}"
    );
    assert!(tool_calls_in_text_grammar(&[(3, &unique, false)], true, &path, TEXT).is_ok());
}
