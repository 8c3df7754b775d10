//! CPU references for subtraction: wrapping for integers, IEEE for f32.

pub fn sub_i32_ref(a: &[i32], b: &[i32]) -> Vec<i32> {
    a.iter().zip(b).map(|(x, y)| x.wrapping_sub(*y)).collect()
}

pub fn sub_u32_ref(a: &[u32], b: &[u32]) -> Vec<u32> {
    a.iter().zip(b).map(|(x, y)| x.wrapping_sub(*y)).collect()
}

pub fn sub_f32_ref(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x - y).collect()
}
