//! WGSL metadata extraction shared by `build.rs` (which generates the shader registry) and
//! the library (whose tests prove the registry is current).
//!
//! Comments are stripped BEFORE any attribute is parsed, so a commented-out
//! `@workgroup_size` can never win. Workgroup sizes may be integer literals (`64`, `64u`,
//! `0x40`) or identifiers naming a module-scope `const` or an `override` with a default.
//!
//! This file is compiled twice (as a module of build.rs and of the library), so it depends
//! on nothing but `std` and `sha2`.

use sha2::{Digest, Sha256};

/// One `@compute` entry point of a shader and its workgroup size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EntryMeta {
    pub name: String,
    pub workgroup_size: [u32; 3],
}

/// Why a shader's metadata could not be extracted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetaError(pub String);

impl std::fmt::Display for MetaError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Hex SHA-256 of the shader source: the registry's content hash.
pub fn content_hash(source: &str) -> String {
    Sha256::digest(source.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// Expands `#include "name.wgsli"` lines: each is replaced by the named file's text (itself
/// expanded), read through `read`. WGSL has no include; this lets a shader and its subgroup
/// twin share one copy of everything but their reductions. Includes nest at most 8 deep
/// (a cycle is an error naming the chain).
pub fn expand_includes(
    source: &str,
    read: &mut dyn FnMut(&str) -> Result<String, MetaError>,
) -> Result<String, MetaError> {
    expand_at(source, read, &mut Vec::new())
}

fn expand_at(
    source: &str,
    read: &mut dyn FnMut(&str) -> Result<String, MetaError>,
    chain: &mut Vec<String>,
) -> Result<String, MetaError> {
    let mut out = String::with_capacity(source.len());
    for line in source.split_inclusive('\n') {
        let Some(rest) = line.trim().strip_prefix("#include") else {
            out.push_str(line);
            continue;
        };
        let name = rest
            .trim()
            .strip_prefix('"')
            .and_then(|r| r.strip_suffix('"'))
            .ok_or_else(|| {
                MetaError(format!(
                    "malformed include `{}`: expected #include \"file\"",
                    line.trim()
                ))
            })?;
        if chain.len() >= 8 || chain.iter().any(|c| c == name) {
            return Err(MetaError(format!(
                "include cycle or depth > 8: {} -> {name}",
                chain.join(" -> ")
            )));
        }
        chain.push(name.to_string());
        let text = read(name)?;
        out.push_str(&expand_at(&text, read, chain)?);
        chain.pop();
        if !out.ends_with('\n') {
            out.push('\n');
        }
    }
    Ok(out)
}

/// Reads the shader at `path` with its includes (paths relative to its folder) expanded.
/// Used by build.rs and the registry's staleness test; the library itself reads no files.
#[cfg_attr(not(test), allow(dead_code))]
pub fn read_expanded(path: &std::path::Path) -> Result<String, MetaError> {
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    let source = std::fs::read_to_string(path)
        .map_err(|e| MetaError(format!("cannot read {}: {e}", path.display())))?;
    expand_includes(&source, &mut |name| {
        std::fs::read_to_string(dir.join(name))
            .map_err(|e| MetaError(format!("include `{name}` of {}: {e}", path.display())))
    })
}

/// Removes `//` line comments and (nested) `/* */` block comments. Newlines inside block
/// comments are kept so that positions stay meaningful for error messages.
pub fn strip_comments(source: &str) -> Result<String, MetaError> {
    let bytes = source.as_bytes();
    let mut out = String::with_capacity(source.len());
    let mut i = 0;
    let mut depth = 0usize;
    while i < bytes.len() {
        let two = bytes.get(i..i + 2);
        if depth == 0 && two == Some(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if two == Some(b"/*") {
            depth += 1;
            i += 2;
        } else if depth > 0 && two == Some(b"*/") {
            depth -= 1;
            i += 2;
            out.push(' ');
        } else {
            if depth == 0 || bytes[i] == b'\n' {
                // Safe: we only split at ASCII bytes, so char boundaries are preserved.
                let ch_len = utf8_len(bytes[i]);
                if depth == 0 {
                    out.push_str(&source[i..i + ch_len]);
                } else {
                    out.push('\n');
                }
                i += ch_len;
            } else {
                i += 1;
            }
        }
    }
    if depth > 0 {
        return Err(MetaError("unterminated /* block comment".into()));
    }
    Ok(out)
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Token {
    Ident(String),
    Number(String),
    Punct(char),
}

fn tokenize(code: &str) -> Vec<Token> {
    let chars: Vec<char> = code.chars().collect();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(Token::Ident(chars[start..i].iter().collect()));
        } else if c.is_ascii_digit() {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '.') {
                i += 1;
            }
            tokens.push(Token::Number(chars[start..i].iter().collect()));
        } else {
            tokens.push(Token::Punct(c));
            i += 1;
        }
    }
    tokens
}

fn parse_u32_literal(text: &str) -> Option<u32> {
    let t = text.trim_end_matches(['u', 'i']);
    if let Some(hex) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        u32::from_str_radix(hex, 16).ok()
    } else {
        t.parse().ok()
    }
}

/// Module-scope `const NAME [: T] = LIT;` and `override NAME [: T] [= LIT];` declarations.
/// An `override` without a default maps to `None` (known, but unresolvable at build time).
fn scalar_constants(tokens: &[Token]) -> Vec<(String, Option<u32>)> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    for (i, tok) in tokens.iter().enumerate() {
        match tok {
            Token::Punct('{') => depth += 1,
            Token::Punct('}') => depth -= 1,
            Token::Ident(kw) if depth == 0 && (kw == "const" || kw == "override") => {
                let Some(Token::Ident(name)) = tokens.get(i + 1) else {
                    continue;
                };
                // Find '=' or ';' after the (optional) type.
                let mut j = i + 2;
                while j < tokens.len()
                    && tokens[j] != Token::Punct('=')
                    && tokens[j] != Token::Punct(';')
                {
                    j += 1;
                }
                let value = match (tokens.get(j), tokens.get(j + 1), tokens.get(j + 2)) {
                    (Some(Token::Punct('=')), Some(Token::Number(n)), Some(Token::Punct(';'))) => {
                        parse_u32_literal(n)
                    }
                    _ => None,
                };
                out.push((name.clone(), value));
            }
            _ => {}
        }
    }
    out
}

/// Parses every `@compute` entry point and resolves its `@workgroup_size`.
pub fn compute_entries(source: &str) -> Result<Vec<EntryMeta>, MetaError> {
    let code = strip_comments(source)?;
    let tokens = tokenize(&code);
    let constants = scalar_constants(&tokens);
    let resolve = |tok: &Token| -> Result<u32, MetaError> {
        match tok {
            Token::Number(n) => parse_u32_literal(n)
                .ok_or_else(|| MetaError(format!("workgroup size `{n}` is not a u32 literal"))),
            Token::Ident(id) => match constants.iter().find(|(name, _)| name == id) {
                Some((_, Some(v))) => Ok(*v),
                Some((_, None)) => Err(MetaError(format!(
                    "workgroup size `{id}` is an override or const without a literal default"
                ))),
                None => Err(MetaError(format!(
                    "workgroup size `{id}` names no module-scope const or override"
                ))),
            },
            Token::Punct(p) => Err(MetaError(format!("unexpected `{p}` in @workgroup_size"))),
        }
    };

    let mut entries = Vec::new();
    let mut is_compute = false;
    let mut size: Option<[u32; 3]> = None;
    let mut i = 0;
    while i < tokens.len() {
        match &tokens[i] {
            Token::Punct('@') => {
                let Some(Token::Ident(attr)) = tokens.get(i + 1) else {
                    i += 1;
                    continue;
                };
                if attr == "compute" {
                    is_compute = true;
                } else if attr == "workgroup_size" {
                    let mut dims = Vec::new();
                    let mut j = i + 3; // skip `@ workgroup_size (`
                    while j < tokens.len() && tokens[j] != Token::Punct(')') {
                        if tokens[j] != Token::Punct(',') {
                            dims.push(resolve(&tokens[j])?);
                        }
                        j += 1;
                    }
                    if dims.is_empty() || dims.len() > 3 {
                        return Err(MetaError(format!(
                            "@workgroup_size takes 1 to 3 dimensions, found {}",
                            dims.len()
                        )));
                    }
                    let mut s = [1u32; 3];
                    s[..dims.len()].copy_from_slice(&dims);
                    size = Some(s);
                    i = j;
                }
                i += 1;
            }
            Token::Ident(kw) if kw == "fn" => {
                if let Some(Token::Ident(name)) = tokens.get(i + 1) {
                    if is_compute {
                        let workgroup_size = size.ok_or_else(|| {
                            MetaError(format!("@compute fn `{name}` has no @workgroup_size"))
                        })?;
                        entries.push(EntryMeta {
                            name: name.clone(),
                            workgroup_size,
                        });
                    }
                }
                is_compute = false;
                size = None;
                i += 2;
            }
            _ => i += 1,
        }
    }
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commented_out_attributes_never_win() {
        let src = "// @compute @workgroup_size(999)\n\
                   /* @workgroup_size(7) /* nested @workgroup_size(5) */ still comment @workgroup_size(3) */\n\
                   @compute @workgroup_size(64, 2) // @workgroup_size(1)\n\
                   fn main() {}";
        let entries = compute_entries(src).unwrap();
        assert_eq!(
            entries,
            vec![EntryMeta {
                name: "main".into(),
                workgroup_size: [64, 2, 1]
            }]
        );
    }

    #[test]
    fn identifier_sizes_resolve_from_const_and_override() {
        let src = "const WG: u32 = 128u;\noverride ROWS: u32 = 0x4;\n\
                   @workgroup_size(WG, ROWS) @compute fn a() {}\n\
                   @compute @workgroup_size(32) fn b() { let WG = 3; }\n\
                   fn helper() {}";
        let entries = compute_entries(src).unwrap();
        assert_eq!(entries.len(), 2);
        assert_eq!(entries[0].workgroup_size, [128, 4, 1]);
        assert_eq!(entries[1].name, "b");
        assert_eq!(entries[1].workgroup_size, [32, 1, 1]);
    }

    #[test]
    fn unresolvable_identifier_is_an_error() {
        let err = compute_entries("override WG: u32;\n@compute @workgroup_size(WG) fn m() {}")
            .unwrap_err();
        assert!(err.0.contains("WG"), "{err}");
        let err = compute_entries("@compute @workgroup_size(NOPE) fn m() {}").unwrap_err();
        assert!(err.0.contains("NOPE"), "{err}");
    }

    #[test]
    fn compute_without_size_and_unterminated_comment_are_errors() {
        assert!(compute_entries("@compute fn m() {}").is_err());
        assert!(compute_entries("/* /* */ @compute @workgroup_size(1) fn m() {}").is_err());
    }

    #[test]
    fn includes_expand_nest_and_fail_clearly() {
        let files = |name: &str| -> Result<String, MetaError> {
            match name {
                "a.wgsli" => Ok("const A = 1u;\n#include \"b.wgsli\"\n".into()),
                "b.wgsli" => Ok("const B = 2u;".into()),
                "loop.wgsli" => Ok("#include \"loop.wgsli\"\n".into()),
                other => Err(MetaError(format!("no file {other}"))),
            }
        };
        let out = expand_includes("x\n  #include \"a.wgsli\"\ny\n", &mut { files }).unwrap();
        assert_eq!(out, "x\nconst A = 1u;\nconst B = 2u;\ny\n");
        let err = expand_includes("#include \"loop.wgsli\"\n", &mut { files }).unwrap_err();
        assert!(err.0.contains("cycle"), "{err}");
        let err = expand_includes("#include \"none.wgsli\"\n", &mut { files }).unwrap_err();
        assert!(err.0.contains("none.wgsli"), "{err}");
        assert!(expand_includes("#include a.wgsli\n", &mut { files }).is_err());
    }

    #[test]
    fn hash_changes_with_source() {
        assert_ne!(content_hash("a"), content_hash("b"));
        assert_eq!(content_hash("a").len(), 64);
    }
}
