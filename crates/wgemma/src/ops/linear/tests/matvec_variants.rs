//! Tests of the Q4 matvec variant table.

use crate::ops::linear::matvec_variants::*;

#[test]
fn the_table_holds_every_combination_under_its_name() {
    for family in [MatvecFamily::Decode, MatvecFamily::Wide] {
        for norm in [false, true] {
            for sg in [false, true] {
                let v = matvec_variant(family, norm, sg);
                assert_eq!((v.family, v.norm_prologue, v.subgroup), (family, norm, sg));
                let name = format!(
                    "q4_matvec{}{}{}",
                    if family == MatvecFamily::Wide {
                        "_wide"
                    } else {
                        ""
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
        assert_eq!(
            src.contains("binding(1) var<storage, read> x"),
            !v.norm_prologue
        );
        assert_eq!(src.contains("norm_prologue(flat, lid);"), v.norm_prologue);
    }
}
