//! MediaPipe's landmark custom ops, version 2 (the attention mesh model
//! `face_landmark_with_attention` crops eye and lip regions with them):
//! `Landmarks2TransformMatrix`, `TransformTensorBilinear`, `TransformLandmarks`.
//! LiteRT does not build them in; ferrite does, float32, on the host (every
//! backend's session runs these same kernels). The math lives in
//! [`ferrite_kernels::mediapipe`]; this file checks options and shapes.
//!
//! Options are FlexBuffers maps. A key the map lacks reads as 0 (as MediaPipe's
//! reader has it), and options that would make the definitions read out of
//! bounds or divide by zero are errors at prepare, never panics at run time.

use ferrite_format::flexbuffers::FlexMap;
use ferrite_kernels::mediapipe::{landmarks_to_transform_matrix, transform_landmarks, transform_tensor_bilinear, LandmarksToMatrixParams};

use super::{arg, typed, typed_mut, Built, CustomOp, InputDesc, OpContext};
use crate::error::{Error, Result};
use crate::model::DType;

/// Refuses versions other than 2: version 1 of these ops has other options and
/// other math (a different crop definition, no corner alignment).
fn expect_v2(op: &OpContext<'_>, name: &str) -> Result<()> {
    match op.op.version {
        2 => Ok(()),
        v => Err(op.unsupported(format!("version {v} of {name} (ferrite implements version 2)"))),
    }
}

/// The arity every one of these ops has: `inputs` inputs, one output.
fn expect_arity(op: &OpContext<'_>, inputs: usize) -> Result<()> {
    if op.inputs.len() != inputs {
        return Err(op.bad(format!("expected {inputs} inputs, found {}", op.inputs.len())));
    }
    op.expect_outputs(1)
}

fn float_input<'o, 'a>(op: &'o OpContext<'a>, i: usize, what: &str) -> Result<&'o InputDesc<'a>> {
    let d = op.input(i)?;
    if d.dtype != DType::F32 {
        return Err(op.unsupported(format!("{what} of type {} (these ops are float32)", d.dtype.name())));
    }
    Ok(d)
}

/// Input 1 of the two transform ops: a `[1, 4, 4]` float32 matrix.
fn matrix_input(op: &OpContext<'_>) -> Result<()> {
    let m = float_input(op, 1, "the transform matrix")?;
    if m.shape != [1, 4, 4] {
        return Err(op.bad(format!("the transform matrix must have shape [1, 4, 4], got {:?}", m.shape)));
    }
    Ok(())
}

/// Reads the 4x4 matrix of input `i` at run time.
fn read_matrix(ins: &[Option<&[u8]>], i: usize, at: &str) -> Result<[f32; 16]> {
    let m = typed::<f32>(arg(ins, i)?)?;
    m.get(..16).and_then(|s| <[f32; 16]>::try_from(s).ok()).ok_or_else(|| Error::Runtime(format!("{at}: the transform matrix is too short").into()))
}

fn options<'a>(op: &OpContext<'a>) -> Result<FlexMap<'a>> {
    FlexMap::root(op.custom_options).map_err(|e| op.bad(format!("custom options: {e}")))
}

/// A positive size option (`output_height`, `output_width`).
fn size_option(op: &OpContext<'_>, m: &FlexMap<'_>, key: &str) -> Result<usize> {
    let v = m.get(key).map_err(|e| op.bad(format!("custom option {key}: {e}")))?.as_i64() as i32;
    usize::try_from(v).ok().filter(|&n| n > 0).ok_or_else(|| op.bad(format!("custom option {key} must be positive, got {v}")))
}

/// `Landmarks2TransformMatrix` v2: landmarks `[1, N, 3]` to the `[1, 4, 4]`
/// matrix of a rotated crop around a subset of them (see
/// [`landmarks_to_transform_matrix`]). Options: `subset_idxs` (landmark indices,
/// read in pairs; an odd count repeats the last), `left_rotation_idx`,
/// `right_rotation_idx`, `target_rotation_radians`, `output_height`,
/// `output_width`, `scale_x`, `scale_y`.
pub struct Landmarks2TransformMatrix;

impl Landmarks2TransformMatrix {
    fn params(op: &OpContext<'_>, landmarks: usize) -> Result<LandmarksToMatrixParams> {
        let m = options(op)?;
        let get = |k: &str| m.get(k).map_err(|e| op.bad(format!("custom option {k}: {e}")));
        let index = |k: &str, v: i64| -> Result<usize> {
            let v = v as i32;
            usize::try_from(v)
                .ok()
                .filter(|&i| i < landmarks)
                .ok_or_else(|| op.bad(format!("custom option {k}: landmark {v} is not among the input's {landmarks}")))
        };
        let idxs = m.int_vector("subset_idxs").map_err(|e| op.bad(format!("custom option subset_idxs: {e}")))?.unwrap_or_default();
        if idxs.is_empty() {
            // The definition takes the bounding box of the subset: no box without points.
            return Err(op.bad("custom option subset_idxs is empty"));
        }
        let idxs = idxs.iter().map(|&v| index("subset_idxs", v)).collect::<Result<Vec<_>>>()?;
        // Pairs; an odd count makes a last pair of the last index twice.
        let subset = idxs.chunks(2).map(|c| [c[0], *c.last().unwrap_or(&c[0])]).collect();
        let scale = |k: &str| -> Result<f32> {
            let s = get(k)?.as_f64() as f32;
            if s.is_finite() && s > 0.0 {
                Ok(s)
            } else {
                Err(op.bad(format!("custom option {k} must be positive, got {s}")))
            }
        };
        let target_rotation = get("target_rotation_radians")?.as_f64() as f32;
        if !target_rotation.is_finite() {
            return Err(op.bad(format!("custom option target_rotation_radians is {target_rotation}")));
        }
        Ok(LandmarksToMatrixParams {
            subset,
            left: index("left_rotation_idx", get("left_rotation_idx")?.as_i64())?,
            right: index("right_rotation_idx", get("right_rotation_idx")?.as_i64())?,
            target_rotation,
            output_height: size_option(op, &m, "output_height")? as i32,
            output_width: size_option(op, &m, "output_width")? as i32,
            scale_x: scale("scale_x")?,
            scale_y: scale("scale_y")?,
        })
    }
}

impl CustomOp for Landmarks2TransformMatrix {
    fn build(&self, op: &OpContext<'_>) -> Result<Built> {
        expect_v2(op, "Landmarks2TransformMatrix")?;
        expect_arity(op, 1)?;
        let x = float_input(op, 0, "landmarks")?;
        let [1, n, 3] = x.shape[..] else {
            return Err(op.bad(format!("landmarks must have shape [1, N, 3], got {:?}", x.shape)));
        };
        let p = Self::params(op, n)?;
        let at = op.at();
        Ok(Built {
            outputs: vec![(DType::F32, vec![1, 4, 4])],
            kernel: Box::new(move |ins, outs| {
                let lm = typed::<f32>(arg(ins, 0)?)?.get(..3 * n).ok_or_else(|| Error::Runtime(format!("{at}: landmarks too short").into()))?;
                let [o] = outs else { return Err(Error::Runtime(format!("{at}: expected 1 output").into())) };
                let o = typed_mut::<f32>(o)?.get_mut(..16).ok_or_else(|| Error::Runtime(format!("{at}: output too short").into()))?;
                o.copy_from_slice(&landmarks_to_transform_matrix(lm, &p));
                Ok(())
            }),
        })
    }
}

/// `TransformTensorBilinear` v2: samples a `[1, H, W, C]` feature map through a
/// `[1, 4, 4]` matrix into `[1, output_height, output_width, C]` (see
/// [`transform_tensor_bilinear`]). Options: `output_height`, `output_width`.
pub struct TransformTensorBilinear;

impl CustomOp for TransformTensorBilinear {
    fn build(&self, op: &OpContext<'_>) -> Result<Built> {
        expect_v2(op, "TransformTensorBilinear")?;
        expect_arity(op, 2)?;
        let x = float_input(op, 0, "the feature map")?;
        let [1, h, w, c] = x.shape[..] else {
            return Err(op.bad(format!("the feature map must have shape [1, H, W, C], got {:?}", x.shape)));
        };
        matrix_input(op)?;
        let m = options(op)?;
        let (oh, ow) = (size_option(op, &m, "output_height")?, size_option(op, &m, "output_width")?);
        let n_out = op.checked_elements(&[oh, ow, c], 4)?;
        let at = op.at();
        Ok(Built {
            outputs: vec![(DType::F32, vec![1, oh, ow, c])],
            kernel: Box::new(move |ins, outs| {
                let short = |what: &str| Error::Runtime(format!("{at}: {what} too short").into());
                let input = typed::<f32>(arg(ins, 0)?)?.get(..h * w * c).ok_or_else(|| short("feature map"))?;
                let matrix = read_matrix(ins, 1, &at)?;
                let [o] = outs else { return Err(Error::Runtime(format!("{at}: expected 1 output").into())) };
                let o = typed_mut::<f32>(o)?.get_mut(..n_out).ok_or_else(|| short("output"))?;
                transform_tensor_bilinear(input, (h, w, c), &matrix, ow, o);
                Ok(())
            }),
        })
    }
}

/// `TransformLandmarks` v2: maps `[1, N, 2]` or `[1, N, 3]` points by a
/// `[1, 4, 4]` matrix (see [`transform_landmarks`]); no options.
pub struct TransformLandmarks;

impl CustomOp for TransformLandmarks {
    fn build(&self, op: &OpContext<'_>) -> Result<Built> {
        expect_v2(op, "TransformLandmarks")?;
        expect_arity(op, 2)?;
        let x = float_input(op, 0, "landmarks")?;
        let (n, dims) = match x.shape[..] {
            [1, n, d @ (2 | 3)] => (n, d),
            _ => return Err(op.bad(format!("landmarks must have shape [1, N, 2] or [1, N, 3], got {:?}", x.shape))),
        };
        matrix_input(op)?;
        let shape = x.shape.clone();
        let len = n * dims;
        let at = op.at();
        Ok(Built {
            outputs: vec![(DType::F32, shape)],
            kernel: Box::new(move |ins, outs| {
                let short = |what: &str| Error::Runtime(format!("{at}: {what} too short").into());
                let lm = typed::<f32>(arg(ins, 0)?)?.get(..len).ok_or_else(|| short("landmarks"))?;
                let matrix = read_matrix(ins, 1, &at)?;
                let [o] = outs else { return Err(Error::Runtime(format!("{at}: expected 1 output").into())) };
                let o = typed_mut::<f32>(o)?.get_mut(..len).ok_or_else(|| short("output"))?;
                transform_landmarks(lm, dims, &matrix, o);
                Ok(())
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferrite_format::flexbuffers::{encode_map, encode_map_with_vectors, FlexValue};
    use ferrite_format::schema::TensorType;
    use ferrite_format::writer::{ModelSpec, OpCode, Options, TensorSpec};

    use crate::Session;

    /// One custom op `name` (version `version`) with float32 inputs of `shapes`
    /// and one output of `out_shape`.
    fn one_op(name: &str, version: i32, shapes: &[&[i32]], out_shape: &[i32], options: Vec<u8>) -> Vec<u8> {
        let mut m = ModelSpec::default();
        let ins: Vec<i32> = shapes.iter().enumerate().map(|(k, s)| m.add_tensor(TensorSpec::activation(&format!("in{k}"), TensorType::FLOAT32, s))).collect();
        let out = m.add_tensor(TensorSpec::activation("out", TensorType::FLOAT32, out_shape));
        m.add_op(OpCode::Custom(name.into()), &ins, &[out], Options::None);
        let op = m.ops.last_mut().expect("just added");
        op.custom_options = Some(options);
        op.version = version;
        m.inputs = ins;
        m.outputs = vec![out];
        m.to_bytes().expect("writes")
    }

    fn session(bytes: Vec<u8>) -> crate::Result<Session> {
        let mut s = Session::from_bytes(Arc::new(bytes))?;
        s.prepare()?;
        Ok(s)
    }

    fn matrix_options(subset: &[i32], left: i64, right: i64, out: i64, scale: f64) -> Vec<u8> {
        encode_map_with_vectors(
            &[
                ("left_rotation_idx", FlexValue::Int(left)),
                ("right_rotation_idx", FlexValue::Int(right)),
                ("target_rotation_radians", FlexValue::Float(0.0)),
                ("output_height", FlexValue::Int(out)),
                ("output_width", FlexValue::Int(out)),
                ("scale_x", FlexValue::Float(scale)),
                ("scale_y", FlexValue::Float(scale)),
            ],
            &[("subset_idxs", subset)],
        )
    }

    /// The three ops end to end through a session: a matrix from landmarks, then
    /// both transforms with it (an odd subset count repeats its last index).
    #[test]
    fn runs_through_a_session() {
        let mut s = session(one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 3]], &[1, 4, 4], matrix_options(&[0, 1, 2], 0, 1, 4, 1.0))).unwrap();
        // Box [0, 8] x [0, 4]: the 4x4 crop maps pixel (x, y) to (2x, y).
        s.set_input_f32(0, &[0.0, 0.0, 0.0, 8.0, 0.0, 0.0, 8.0, 4.0, 0.0, 99.0, 99.0, 0.0]).unwrap();
        s.run().unwrap();
        let m = s.output(0).unwrap().to_f32().unwrap();
        assert_eq!(s.output(0).unwrap().shape, &[1, 4, 4]);
        let want = [2.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0];
        assert!(m.iter().zip(want).all(|(g, w)| (g - w).abs() < 1e-6), "{m:?}");

        let opts = encode_map(&[("output_height", FlexValue::Int(2)), ("output_width", FlexValue::Int(3))]);
        let mut t = session(one_op("TransformTensorBilinear", 2, &[&[1, 2, 4, 1], &[1, 4, 4]], &[1, 2, 3, 1], opts)).unwrap();
        t.set_input_f32(0, &[0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0, 13.0]).unwrap();
        t.set_input_f32(1, &m).unwrap();
        t.run().unwrap();
        assert_eq!(t.output(0).unwrap().shape, &[1, 2, 3, 1]);
        // Sample points (2x + 0.5, y): (0.5, 0), (2.5, 0), (4.5: outside), on both rows.
        assert_eq!(t.output(0).unwrap().to_f32().unwrap(), [0.5, 2.5, 0.0, 10.5, 12.5, 0.0]);

        let mut l = session(one_op("TransformLandmarks", 2, &[&[1, 2, 2], &[1, 4, 4]], &[1, 2, 2], vec![])).unwrap();
        l.set_input_f32(0, &[1.0, 2.0, 3.0, -1.0]).unwrap();
        l.set_input_f32(1, &m).unwrap();
        l.run().unwrap();
        assert_eq!(l.output(0).unwrap().to_f32().unwrap(), [2.0, 2.0, 6.0, -1.0]);
    }

    /// Non-finite and huge values run through without panicking: a NaN matrix
    /// samples nothing (zeros), NaN landmarks give a NaN matrix, huge ones a finite
    /// or infinite one, never an out-of-bounds read.
    #[test]
    fn hostile_values_do_not_panic() {
        let mut s = session(one_op("Landmarks2TransformMatrix", 2, &[&[1, 3, 3]], &[1, 4, 4], matrix_options(&[0, 1, 2], 0, 1, 4, 1.5))).unwrap();
        for v in [f32::NAN, f32::INFINITY, -f32::INFINITY, f32::MAX, 0.0] {
            s.set_input_f32(0, &[v, 0.0, 0.0, 1.0, v, 0.0, v, v, v]).unwrap();
            s.run().unwrap();
        }
        let opts = encode_map(&[("output_height", FlexValue::Int(3)), ("output_width", FlexValue::Int(3))]);
        let mut t = session(one_op("TransformTensorBilinear", 2, &[&[1, 2, 2, 1], &[1, 4, 4]], &[1, 3, 3, 1], opts)).unwrap();
        for v in [f32::NAN, f32::INFINITY, -f32::INFINITY, f32::MAX, -f32::MAX, 1e-30] {
            t.set_input_f32(0, &[1.0; 4]).unwrap();
            t.set_input_f32(1, &[v, v, 0.0, v, v, v, 0.0, v, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 1.0]).unwrap();
            t.run().unwrap();
            let out = t.output(0).unwrap().to_f32().unwrap();
            assert!(out.iter().all(|&o| o == 0.0 || (o - 1.0).abs() < 1e-6), "{v}: {out:?}");
        }
    }

    /// A xorshift step: a value below `n`.
    fn rnd(state: &mut u64, n: u64) -> u64 {
        *state ^= *state << 13;
        *state ^= *state >> 7;
        *state ^= *state << 17;
        *state % n.max(1)
    }

    /// Seeded random shapes, versions and options (sane to hostile) for the three
    /// ops, run on random values where they prepare: errors, never panics.
    #[test]
    fn random_models_never_panic() {
        let st = &mut 0x9e37_79b9_7f4a_7c15u64;
        let (mut prepared, mut ran) = (0, 0);
        for _ in 0..600 {
            // Mostly values that fit, so that most models reach the kernels.
            let int = |st: &mut u64| [1i64, 2, 3, 1, 2, 16, 0, -1, 1 << 20, i32::MAX as i64][rnd(st, 10) as usize];
            let float = |st: &mut u64| [1.5f64, 0.25, 1.0, 1.5, 0.0, -1.0, 1e30, f64::NAN][rnd(st, 8) as usize];
            let dim = |st: &mut u64| [0i32, 1, 2, 3, 4, 5][rnd(st, 6) as usize];
            let subset: Vec<i32> = (0..rnd(st, 6)).map(|_| int(st) as i32).collect();
            let scalars = [
                ("left_rotation_idx", FlexValue::Int(int(st))),
                ("right_rotation_idx", FlexValue::Int(int(st))),
                ("target_rotation_radians", FlexValue::Float(float(st))),
                ("output_height", FlexValue::Int(int(st))),
                ("output_width", FlexValue::Int(int(st))),
                ("scale_x", FlexValue::Float(float(st))),
                ("scale_y", FlexValue::Float(float(st))),
            ];
            let options = if rnd(st, 20) == 0 {
                (0..rnd(st, 30)).map(|_| rnd(st, 256) as u8).collect()
            } else {
                encode_map_with_vectors(&scalars, &[("subset_idxs", &subset)])
            };
            let name = ["Landmarks2TransformMatrix", "TransformTensorBilinear", "TransformLandmarks"][rnd(st, 3) as usize];
            let s0: Vec<i32> = match (rnd(st, 4), name) {
                (0, _) => (0..2 + rnd(st, 3)).map(|_| dim(st)).collect(),
                (_, "Landmarks2TransformMatrix") => vec![1, 1 + dim(st), 3],
                (_, "TransformTensorBilinear") => vec![1, dim(st), dim(st), dim(st)],
                _ => vec![1, dim(st), 2 + rnd(st, 2) as i32],
            };
            let s1: Vec<i32> = if rnd(st, 4) != 0 { vec![1, 4, 4] } else { vec![1, dim(st), 4] };
            let version = [2, 2, 2, 2, 2, 1][rnd(st, 6) as usize];
            let shapes: Vec<&[i32]> = if name == "Landmarks2TransformMatrix" { vec![&s0] } else { vec![&s0, &s1] };
            let Ok(mut s) = session(one_op(name, version, &shapes, &s0, options)) else { continue };
            prepared += 1;
            for (k, shape) in shapes.iter().enumerate() {
                let n: usize = shape.iter().map(|&d| d as usize).product();
                let vals: Vec<f32> = (0..n).map(|_| [0.0, 1.0, -3.5, 47.0, f32::NAN, f32::INFINITY, 1e30][rnd(st, 7) as usize]).collect();
                s.set_input_f32(k, &vals).unwrap();
            }
            ran += s.run().is_ok() as usize;
        }
        // The generator must reach the kernels, not only the checks.
        assert!(prepared > 60 && ran == prepared, "{prepared} prepared, {ran} ran");
    }

    /// Options and shapes the definitions cannot run with are errors at prepare.
    #[test]
    fn bad_options_and_shapes_are_errors() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 3]], &[1, 4, 4], matrix_options(&[], 0, 1, 4, 1.0)), "empty"),
            (one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 3]], &[1, 4, 4], matrix_options(&[0, 9], 0, 1, 4, 1.0)), "landmark 9"),
            (one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 3]], &[1, 4, 4], matrix_options(&[0, -1], 0, 1, 4, 1.0)), "landmark -1"),
            (one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 3]], &[1, 4, 4], matrix_options(&[0, 1], 0, 4, 4, 1.0)), "right_rotation_idx"),
            (one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 3]], &[1, 4, 4], matrix_options(&[0, 1], 0, 1, 0, 1.0)), "output_height"),
            (one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 3]], &[1, 4, 4], matrix_options(&[0, 1], 0, 1, 4, 0.0)), "scale_x"),
            (one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 3]], &[1, 4, 4], matrix_options(&[0, 1], 0, 1, 4, f64::NAN)), "scale_x"),
            (one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 2]], &[1, 4, 4], matrix_options(&[0, 1], 0, 1, 4, 1.0)), "[1, N, 3]"),
            (one_op("Landmarks2TransformMatrix", 2, &[&[1, 4, 3]], &[1, 4, 4], vec![1, 2]), "custom options"),
            (one_op("Landmarks2TransformMatrix", 1, &[&[1, 4, 3]], &[1, 4, 4], matrix_options(&[0, 1], 0, 1, 4, 1.0)), "version 1"),
            (
                one_op("TransformTensorBilinear", 2, &[&[1, 2, 2, 1], &[1, 4, 4]], &[1, 2, 2, 1], encode_map(&[("output_height", FlexValue::Int(2))])),
                "output_width",
            ),
            (
                one_op(
                    "TransformTensorBilinear",
                    2,
                    &[&[2, 2, 2, 1], &[1, 4, 4]],
                    &[1, 2, 2, 1],
                    encode_map(&[("output_height", FlexValue::Int(2)), ("output_width", FlexValue::Int(2))]),
                ),
                "[1, H, W, C]",
            ),
            (
                one_op(
                    "TransformTensorBilinear",
                    2,
                    &[&[1, 2, 2, 1], &[1, 3, 4]],
                    &[1, 2, 2, 1],
                    encode_map(&[("output_height", FlexValue::Int(2)), ("output_width", FlexValue::Int(2))]),
                ),
                "[1, 4, 4]",
            ),
            (
                one_op(
                    "TransformTensorBilinear",
                    2,
                    &[&[1, 2, 2, 64], &[1, 4, 4]],
                    &[1, 2, 2, 1],
                    encode_map(&[("output_height", FlexValue::Int(1 << 30)), ("output_width", FlexValue::Int(1 << 30))]),
                ),
                "",
            ),
            (one_op("TransformLandmarks", 2, &[&[1, 5, 4], &[1, 4, 4]], &[1, 5, 4], vec![]), "[1, N, 2]"),
            (one_op("TransformLandmarks", 2, &[&[1, 5, 2]], &[1, 5, 2], vec![]), "2 inputs"),
        ];
        for (k, (bytes, want)) in cases.into_iter().enumerate() {
            let e = session(bytes).err().unwrap_or_else(|| panic!("case {k} prepared"));
            let e = e.to_string();
            assert!(e.contains(want), "case {k}: {e}");
        }
    }
}
