//! The Q4 matvec kernels' variant table. Twelve kernels differ only in which pieces they
//! include: the family (decode: M <= 4 at the base geometry; wide: M <= 9 and every tuning
//! geometry; int8: the wide geometry with int8 activations and integer dot products), where
//! x comes from (a storage input, or the RMSNorm prologue that builds it
//! in workgroup memory) and how a unit's lanes are reduced (subgroup operations, or
//! workgroup memory). `build.rs` writes each entry shader from this table
//! ([`MatvecVariant::entry_source`]) into the shader registry; the op picks one with
//! [`matvec_variant`]. The contracts live in the included files
//! (`q4_matvec_io.wgsli`, the families' `*_common.wgsli`, `q4_matvec_norm_prologue.wgsli`).
//!
//! This file is compiled twice (as a module of build.rs and of the library), so it depends
//! on nothing but `std`.

/// Which accumulation a kernel runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatvecFamily {
    /// `q4_matvec_common.wgsli`: M <= 4, 4 rows x 32 lanes per unit (the decode path).
    Decode,
    /// `q4_matvec_wide_common.wgsli` + `q4_matvec_wide_accumulate.wgsli`: M <= 9, any
    /// geometry of the tuning table.
    Wide,
    /// `q4_matvec_wide_common.wgsli` + `int8_stage.wgsli` + `q4_matvec_q8_accumulate.wgsli`:
    /// the wide geometry
    /// with the activations quantised to int8 per block of 32 and integer dot products.
    Int8,
}

/// One Q4 matvec kernel of the registry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatvecVariant {
    /// The registry name: `q4_matvec[_wide][_norm][_sg]` or `q4q8_matvec[_norm][_sg]`.
    pub name: &'static str,
    pub family: MatvecFamily,
    /// x is built by every workgroup from the residual stream (norm, or add + norm).
    pub norm_prologue: bool,
    /// Lanes reduced with subgroup operations (32-lane subgroups) instead of workgroup
    /// memory.
    pub subgroup: bool,
}

const fn variant(
    name: &'static str,
    family: MatvecFamily,
    norm_prologue: bool,
    subgroup: bool,
) -> MatvecVariant {
    MatvecVariant {
        name,
        family,
        norm_prologue,
        subgroup,
    }
}

/// Every Q4 matvec kernel: each family, x source and reduction once.
pub const MATVEC_VARIANTS: [MatvecVariant; 12] = {
    use MatvecFamily::{Decode, Int8, Wide};
    [
        variant("q4_matvec", Decode, false, false),
        variant("q4_matvec_sg", Decode, false, true),
        variant("q4_matvec_norm", Decode, true, false),
        variant("q4_matvec_norm_sg", Decode, true, true),
        variant("q4_matvec_wide", Wide, false, false),
        variant("q4_matvec_wide_sg", Wide, false, true),
        variant("q4_matvec_wide_norm", Wide, true, false),
        variant("q4_matvec_wide_norm_sg", Wide, true, true),
        variant("q4q8_matvec", Int8, false, false),
        variant("q4q8_matvec_sg", Int8, false, true),
        variant("q4q8_matvec_norm", Int8, true, false),
        variant("q4q8_matvec_norm_sg", Int8, true, true),
    ]
};

/// The kernel of `family` with or without the norm prologue and subgroup reduction.
pub fn matvec_variant(
    family: MatvecFamily,
    norm_prologue: bool,
    subgroup: bool,
) -> &'static MatvecVariant {
    // The table holds every combination (tested), so the search cannot fail; indexing
    // by the three bits keeps it panic-free all the same.
    let family_index = match family {
        MatvecFamily::Decode => 0,
        MatvecFamily::Wide => 1,
        MatvecFamily::Int8 => 2,
    };
    let index = family_index * 4 + norm_prologue as usize * 2 + subgroup as usize;
    &MATVEC_VARIANTS[index]
}

impl MatvecVariant {
    /// The entry shader's WGSL, `#include` lines unexpanded (the includes sit beside this
    /// file in `ops/linear/`). build.rs and the registry's staleness test call it.
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn entry_source(&self) -> String {
        let (includes, finish, lanes, family): (&[&str], _, _, _) = match self.family {
            MatvecFamily::Decode => (
                &["q4_matvec_common.wgsli"],
                "q4_matvec_finish",
                "LANES",
                "decode family (M <= 4, 4 rows x 32 lanes per unit)",
            ),
            MatvecFamily::Wide => (
                &[
                    "q4_matvec_wide_common.wgsli",
                    "q4_matvec_wide_accumulate.wgsli",
                ],
                "q4_matvec_wide_finish",
                "LPR",
                "wide family (M <= 9, the tuning table's geometries)",
            ),
            MatvecFamily::Int8 => (
                &[
                    "q4_matvec_wide_common.wgsli",
                    "int8_stage.wgsli",
                    "q4_matvec_q8_accumulate.wgsli",
                ],
                "q4_matvec_wide_finish",
                "LPR",
                "int8 family (M <= 9, the wide geometries, int8 activations, dot4I8Packed)",
            ),
        };
        let int8 = self.family == MatvecFamily::Int8;
        let reduction = if self.subgroup {
            ("sg", "lanes reduced with subgroup operations")
        } else {
            ("wg", "lanes reduced through workgroup memory")
        };
        let mut s = format!(
            "// {}: generated by build.rs from the variant table in ops/linear/matvec_variants.rs.\n\
             // The Q4 matvec of the {family}, x {}, {}.\n\
             // Contract: q4_matvec_io.wgsli; geometry and accumulation: {}.\n\n",
            self.name,
            if self.norm_prologue {
                "built by the RMSNorm prologue"
            } else {
                "read from storage"
            },
            reduction.1,
            includes.join(", "),
        );
        if !self.norm_prologue {
            if int8 {
                s.push_str("#include \"q4_matvec_q8_input.wgsli\"\n");
            } else {
                s.push_str("@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;\n\n");
            }
        }
        for include in includes {
            s.push_str(&format!("#include \"{include}\"\n"));
        }
        if self.norm_prologue {
            // The subgroup variants sum the norm with subgroup operations too.
            s.push_str(&format!(
                "#include \"../rmsnorm/workgroup_sum{}.wgsli\"\n",
                if self.subgroup { "_sg" } else { "" }
            ));
            s.push_str(if int8 {
                "#include \"q4_matvec_q8_norm_prologue.wgsli\"\n"
            } else {
                "#include \"q4_matvec_norm_prologue.wgsli\"\n"
            });
        }
        s.push_str(&format!("#include \"{finish}_{}.wgsli\"\n", reduction.0));
        if int8 {
            s.push_str(&format!(
                "#include \"q4_matvec_q8_quantize_{}.wgsli\"\n",
                reduction.0
            ));
        }
        s.push('\n');
        s.push_str(
            "@compute @workgroup_size(WG)\n\
             fn main(\n\
             \x20   @builtin(workgroup_id) wid: vec3<u32>,\n\
             \x20   @builtin(num_workgroups) nwg: vec3<u32>,\n\
             \x20   @builtin(local_invocation_index) lid: u32,\n\
             ) {\n\
             \x20   let flat = wid.x + wid.y * nwg.x;\n",
        );
        if self.norm_prologue {
            s.push_str(
                "    // The first weights are requested before the prologue: they arrive while it runs.\n",
            );
        }
        s.push_str(&format!(
            "    let rows = unit_rows(flat, lid / {lanes} / KSPLIT);\n\
             \x20   let part = (lid / {lanes}) % KSPLIT;\n\
             \x20   let first = first_words(rows, part, lid % {lanes});\n"
        ));
        if self.norm_prologue {
            s.push_str("    norm_prologue(flat, lid);\n");
        }
        // The int8 accumulation stages x chunk by chunk with every thread of the workgroup.
        let lid_arg = if int8 { ", lid" } else { "" };
        s.push_str(&format!(
            "    finish(flat, lid, rows, accumulate(rows, part, lid % {lanes}, first{lid_arg}));\n}}\n"
        ));
        s
    }
}
