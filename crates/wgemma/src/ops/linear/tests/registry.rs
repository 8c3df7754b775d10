//! The shader registry's Q4 matvec entries are this op's variant table, freshly expanded
//! (the registry's own staleness test covers the `.wgsl` files; these entries come from
//! `matvec_variants.rs`, which only this op reads).

use crate::gpu::registry::{shader, SHADERS};
use crate::gpu::shader_meta;
use crate::ops::linear::matvec_variants::MATVEC_VARIANTS;

#[test]
fn the_registry_holds_the_variant_table_freshly_expanded() {
    let table_path = "src/ops/linear/matvec_variants.rs";
    let registered: Vec<&str> = SHADERS
        .iter()
        .filter(|s| s.path == table_path)
        .map(|s| s.name)
        .collect();
    let table: Vec<&str> = MATVEC_VARIANTS.iter().map(|v| v.name).collect();
    assert_eq!(registered, table, "registry entries from {table_path}");
    let linear_dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/ops/linear");
    for v in MATVEC_VARIANTS {
        let entry = shader(v.name).unwrap_or_else(|| panic!("{} missing from registry", v.name));
        let source = shader_meta::expand_includes(&v.entry_source(), &mut |name| {
            std::fs::read_to_string(linear_dir.join(name))
                .map_err(|e| shader_meta::MetaError(e.to_string()))
        })
        .unwrap();
        assert_eq!(entry.source, source, "{}: registry source is stale", v.name);
    }
}
