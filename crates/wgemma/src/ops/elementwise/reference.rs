//! CPU references for the elementwise ops.

pub fn add_ref(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x + y).collect()
}

pub fn mul_ref(a: &[f32], b: &[f32]) -> Vec<f32> {
    a.iter().zip(b).map(|(x, y)| x * y).collect()
}

pub fn scale_ref(a: &[f32], s: f32) -> Vec<f32> {
    a.iter().map(|x| x * s).collect()
}
