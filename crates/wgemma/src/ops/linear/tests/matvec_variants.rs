//! Tests of the Q4 matvec variant table.

use crate::ops::linear::matvec_variants::*;

#[test]
fn the_table_holds_every_combination_under_its_name() {
    for family in [MatvecFamily::Decode, MatvecFamily::Wide, MatvecFamily::Int8] {
        for norm in [false, true] {
            for sg in [false, true] {
                let v = matvec_variant(family, norm, sg);
                assert_eq!((v.family, v.norm_prologue, v.subgroup), (family, norm, sg));
                let name = format!(
                    "{}{}{}",
                    match family {
                        MatvecFamily::Decode => "q4_matvec",
                        MatvecFamily::Wide => "q4_matvec_wide",
                        MatvecFamily::Int8 => "q4q8_matvec",
                    },
                    if norm { "_norm" } else { "" },
                    if sg { "_sg" } else { "" },
                );
                assert_eq!(v.name, name);
            }
        }
    }
}

#[test]
fn x_is_an_input_exactly_without_the_prologue() {
    for v in MATVEC_VARIANTS {
        let src = v.entry_source();
        let input = match v.family {
            MatvecFamily::Int8 => "#include \"q4_matvec_q8_input.wgsli\"",
            _ => "binding(1) var<storage, read> x",
        };
        assert_eq!(src.contains(input), !v.norm_prologue, "{}", v.name);
        assert_eq!(src.contains("norm_prologue(flat, lid);"), v.norm_prologue);
        // The int8 accumulation stages x with the whole workgroup: it takes `lid`.
        assert_eq!(
            src.contains("first, lid))"),
            v.family == MatvecFamily::Int8,
            "{}",
            v.name
        );
    }
}
