//! Custom ops ferrite ships: MediaPipe's `Convolution2DTransposeBias` and
//! LiteRT's built-in `TFLite_Detection_PostProcess`.

use super::{Built, CustomOp, OpContext};
use crate::backend::cpu::transpose_conv_built;
use crate::error::Result;
use crate::model::DType;
use crate::ops::Padding;

/// MediaPipe's transposed convolution with bias. Its custom options are the raw
/// bytes of a C struct: padding (1 = SAME, 2 = VALID), stride_width, stride_height,
/// each a little-endian int32.
pub struct TransposeConvBias;

impl CustomOp for TransposeConvBias {
    fn build(&self, op: &OpContext<'_>) -> Result<Built> {
        self.build_with_pool(op, None)
    }

    /// Output rows split over `pool`.
    fn build_with_pool(&self, op: &OpContext<'_>, pool: Option<std::sync::Arc<ferrite_kernels::parallel::ThreadPool>>) -> Result<Built> {
        let o = op.custom_options;
        let int = |i: usize| o.get(4 * i..4 * i + 4).map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        let (Some(pad), Some(sw), Some(sh)) = (int(0), int(1), int(2)) else {
            return Err(op.bad(format!("custom options hold {} bytes, need 12", o.len())));
        };
        let padding = match pad {
            1 => Padding::Same,
            2 => Padding::Valid,
            p => return Err(op.bad(format!("unknown padding {p}"))),
        };
        if sw <= 0 || sh <= 0 {
            return Err(op.bad(format!("strides must be positive, got {sh}x{sw}")));
        }
        let (sh, sw) = (sh as usize, sw as usize);
        let x = op.input(0)?;
        let w = op.input(1)?;
        if x.dtype != DType::F32 || w.dtype != DType::F32 || x.shape.len() != 4 || w.shape.len() != 4 {
            return Err(op.unsupported("Convolution2DTransposeBias needs 4-D float32 input and weights"));
        }
        let out = |i: usize, k: usize, s: usize| if padding == Padding::Same { i * s } else { i * s + k.saturating_sub(s) };
        let (oh, ow) = (out(x.shape[1], w.shape[1], sh), out(x.shape[2], w.shape[2], sw));
        transpose_conv_built(op, &x.shape.clone(), &w.shape.clone(), oh, ow, (sh, sw), padding, ferrite_kernels::Clamp::NONE, 0, 1, Some(2), pool)
    }
}

/// LiteRT's built-in custom op `TFLite_Detection_PostProcess`, the end of SSD
/// models from the TensorFlow object detection API: decodes box encodings
/// against anchors, then keeps the best boxes by fast (class-agnostic) or
/// regular (per-class) NMS. Inputs: box encodings `[1, boxes, >= 4]`, class
/// scores `[1, boxes, classes (+ 1 background)]`, anchors `[boxes, 4]`; float32,
/// or uint8 dequantized with each tensor's parameters. Outputs (float32):
/// boxes `[1, D, 4]`, classes `[1, D]`, scores `[1, D]`, the count `[1]`, with
/// `D = max_detections * max_classes_per_detection`. Options are a FlexBuffers
/// map (see [`PostProcessOptions::parse`]).
pub struct DetectionPostProcess;

/// The options of `TFLite_Detection_PostProcess`, as LiteRT reads them: a missing
/// `detections_per_class` is 100, a missing `use_regular_nms` false; the other
/// keys read as 0 when missing.
struct PostProcessOptions(ferrite_kernels::detection::PostProcessParams);

impl PostProcessOptions {
    fn parse(op: &OpContext<'_>) -> Result<Self> {
        use ferrite_format::flexbuffers::FlexMap;
        let m = FlexMap::root(op.custom_options).map_err(|e| op.bad(format!("custom options: {e}")))?;
        let get = |k: &str| m.get(k).map_err(|e| op.bad(format!("custom option {k}: {e}")));
        let count = |k: &str, default: i64| -> Result<usize> {
            let v = get(k)?;
            let n = if v.is_null() { default } else { v.as_i64() as i32 as i64 };
            // Each count sizes an output or a loop: a hostile file must not make
            // one absurd (the outputs are checked against the memory limit below).
            usize::try_from(n).map_err(|_| op.bad(format!("custom option {k} is negative ({n})")))
        };
        let float = |k: &str| get(k).map(|v| v.as_f64() as f32);
        let p = ferrite_kernels::detection::PostProcessParams {
            max_detections: count("max_detections", 0)?,
            max_classes_per_detection: count("max_classes_per_detection", 0)?,
            detections_per_class: count("detections_per_class", 100)?,
            score_threshold: float("nms_score_threshold")?,
            iou_threshold: float("nms_iou_threshold")?,
            num_classes: count("num_classes", 0)?,
            scale: [float("y_scale")?, float("x_scale")?, float("h_scale")?, float("w_scale")?],
            regular_nms: get("use_regular_nms")?.as_bool(),
        };
        Ok(PostProcessOptions(p))
    }
}

/// Dequantizes uint8 `q` with `(q - zero_point) * scale` in float, as LiteRT's
/// post-processing does, into `out`.
fn dequantize_into(q: &[u8], scale: f32, zero_point: i64, out: &mut [f32]) {
    let zp = zero_point as i32;
    out.iter_mut().zip(q).for_each(|(o, &v)| *o = (v as i32 - zp) as f32 * scale);
}

impl CustomOp for DetectionPostProcess {
    fn build(&self, op: &OpContext<'_>) -> Result<Built> {
        use crate::backend::{arg, typed, typed_mut};
        let PostProcessOptions(p) = PostProcessOptions::parse(op)?;
        if op.inputs.len() != 3 {
            return Err(op.bad(format!("expected 3 inputs, found {}", op.inputs.len())));
        }
        op.expect_outputs(4)?;
        let (enc, cls, anc) = (op.input(0)?, op.input(1)?, op.input(2)?);
        if enc.shape.len() != 3 || cls.shape.len() != 3 || anc.shape.len() != 2 {
            return Err(op.bad(format!("inputs must be 3-D, 3-D and 2-D, got {:?}, {:?}, {:?}", enc.shape, cls.shape, anc.shape)));
        }
        let (boxes, stride, classes_with_bg) = (enc.shape[1], enc.shape[2], cls.shape[2]);
        if enc.shape[0] != 1 || cls.shape[0] != 1 {
            return Err(op.unsupported("batch sizes other than 1 (LiteRT runs only 1)"));
        }
        if stride < 4 || cls.shape[1] != boxes || anc.shape != [boxes, 4] {
            return Err(op.bad(format!("shapes do not fit: box encodings {:?}, class scores {:?}, anchors {:?}", enc.shape, cls.shape, anc.shape)));
        }
        if p.num_classes == 0 || classes_with_bg < p.num_classes || classes_with_bg - p.num_classes > 1 {
            return Err(op.bad(format!("num_classes {} does not fit class scores of {classes_with_bg} columns", p.num_classes)));
        }
        if p.regular_nms && p.detections_per_class == 0 {
            return Err(op.bad("detections_per_class must be positive"));
        }
        if !p.regular_nms && p.max_classes_per_detection == 0 {
            return Err(op.bad("max_classes_per_detection must be positive"));
        }
        let rows = p.max_detections.checked_mul(p.max_classes_per_detection).ok_or_else(|| op.bad("max_detections * max_classes_per_detection overflows"))?;
        op.checked_elements(&[rows, 4], 4)?;
        // What each input is read as: float32 as it is, uint8 through its
        // quantization parameters. LiteRT's kernel takes no other type (int8
        // included), and neither does this one.
        let float_or_quant = |d: &crate::backend::InputDesc<'_>, what: &str| -> Result<Option<(f32, i64)>> {
            match d.dtype {
                DType::F32 => Ok(None),
                DType::U8 => match d.quant {
                    Some(q) if !q.scale.is_empty() => Ok(Some((q.scale[0], q.zero_point.first().copied().unwrap_or(0)))),
                    _ => Err(op.bad(format!("quantized {what} without quantization parameters"))),
                },
                t => Err(op.unsupported(format!("{what} of type {} (LiteRT's kernel reads float32 and uint8)", t.name()))),
            }
        };
        let (qe, qc, qa) = (float_or_quant(enc, "box encodings")?, float_or_quant(cls, "class scores")?, float_or_quant(anc, "anchors")?);
        if qe.is_some() != qa.is_some() {
            // LiteRT reads the anchors with the box encodings' element type.
            return Err(op.bad("anchors must have the box encodings' element type"));
        }
        let n_scores = boxes * classes_with_bg;
        let (mut e32, mut c32, mut a32) = (vec![0f32; boxes * stride], vec![0f32; n_scores], vec![0f32; boxes * 4]);
        let mut decoded = vec![0f32; boxes * 4];
        let at = op.at();
        Ok(Built {
            outputs: vec![(DType::F32, vec![1, rows, 4]), (DType::F32, vec![1, rows]), (DType::F32, vec![1, rows]), (DType::F32, vec![1])],
            kernel: Box::new(move |ins, outs| {
                let read = |i: usize, q: Option<(f32, i64)>, buf: &mut Vec<f32>| -> Result<()> {
                    let b = arg(ins, i)?;
                    let n = buf.len();
                    let short = || crate::error::Error::Runtime(format!("{at}: input {i} is too short").into());
                    match q {
                        None => buf.copy_from_slice(typed::<f32>(b)?.get(..n).ok_or_else(short)?),
                        Some((s, zp)) => dequantize_into(b.get(..n).ok_or_else(short)?, s, zp, buf),
                    }
                    Ok(())
                };
                read(0, qe, &mut e32)?;
                read(1, qc, &mut c32)?;
                read(2, qa, &mut a32)?;
                ferrite_kernels::detection::decode_center_size(&e32, stride, &a32, p.scale, &mut decoded);
                let [ob, oc, os, on] = outs else { return Err(crate::error::Error::Runtime(format!("{at}: expected 4 outputs").into())) };
                let n = ferrite_kernels::detection::detection_postprocess(
                    &decoded,
                    &c32,
                    classes_with_bg,
                    &p,
                    typed_mut::<f32>(ob)?,
                    typed_mut::<f32>(oc)?,
                    typed_mut::<f32>(os)?,
                )
                .map_err(|e| {
                    let why = match e {
                        ferrite_kernels::detection::PostProcessError::InvalidBox(i) => format!("decoded box {i} has ymin > ymax or xmin > xmax"),
                        ferrite_kernels::detection::PostProcessError::IouThreshold => format!("nms_iou_threshold {} is not in (0, 1]", p.iou_threshold),
                    };
                    crate::error::Error::Runtime(format!("{at}: {why}").into())
                })?;
                typed_mut::<f32>(on)?[0] = n as f32;
                Ok(())
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use ferrite_format::schema::TensorType;
    use ferrite_format::writer::{ModelSpec, OpCode, Options, TensorSpec};

    use crate::{Model, Session, SessionOptions};

    /// Convolution2DTransposeBias, input [1, h, w, ic], filter [oc, k, k, ic] and bias
    /// constant (`constant`) or model inputs after the data input.
    fn transpose_conv_bias(h: i32, w: i32, ic: i32, oc: i32, k: i32, stride: i32, same: bool, wv: &[f32], bv: &[f32], constant: bool) -> Vec<u8> {
        let mut m = ModelSpec::default();
        let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, h, w, ic]));
        let (ws, bs) = ([oc, k, k, ic], [oc]);
        let (wt, bt) = if constant {
            (m.add_tensor(TensorSpec::const_f32("w", &ws, wv)), m.add_tensor(TensorSpec::const_f32("b", &bs, bv)))
        } else {
            (m.add_tensor(TensorSpec::activation("w", TensorType::FLOAT32, &ws)), m.add_tensor(TensorSpec::activation("b", TensorType::FLOAT32, &bs)))
        };
        let out = |i: i32| if same { i * stride } else { i * stride + (k - stride).max(0) };
        let y = m.add_tensor(TensorSpec::activation("y", TensorType::FLOAT32, &[1, out(h), out(w), oc]));
        m.add_op(OpCode::Custom("Convolution2DTransposeBias".into()), &[x, wt, bt], &[y], Options::None);
        let options: Vec<u8> = [if same { 1i32 } else { 2 }, stride, stride].iter().flat_map(|v| v.to_le_bytes()).collect();
        m.ops.last_mut().expect("just added").custom_options = Some(options);
        m.inputs = if constant { vec![x] } else { vec![x, wt, bt] };
        m.outputs = vec![y];
        m.to_bytes().expect("writes")
    }

    /// Filter equal to the stride (the upsampling form, one GEMM per output row when
    /// the weights are constant) and overlapping filters, against the definition, on
    /// 1 and 2 threads, with constant weights and with weights given at run time.
    #[test]
    fn transpose_conv_bias_matches_the_definition() {
        for (h, w, ic, oc, k, stride) in [(5, 7, 16, 1, 2, 2), (4, 3, 3, 5, 2, 2), (3, 6, 9, 2, 3, 3), (4, 5, 4, 3, 3, 2), (6, 20, 8, 24, 2, 2)] {
            let (oh, ow) = (h * stride, w * stride);
            let x: Vec<f32> = (0..h * w * ic).map(|i| ((i * 7 % 19) as f32) * 0.1 - 0.9).collect();
            let wv: Vec<f32> = (0..oc * k * k * ic).map(|i| ((i * 5 % 13) as f32) * 0.1 - 0.6).collect();
            let bv: Vec<f32> = (0..oc).map(|i| i as f32 * 0.25 - 0.5).collect();
            // SAME with out = in * stride: the forward window's padding is (k - stride) / 2.
            let pad = (k - stride).max(0) / 2;
            let mut want = vec![0.0f32; (oh * ow * oc) as usize];
            for (i, v) in want.iter_mut().enumerate() {
                let (o, px) = (i as i32 % oc, i as i32 / oc);
                let (y, xx) = (px / ow, px % ow);
                *v = bv[o as usize];
                for ky in 0..k {
                    for kx in 0..k {
                        let (ty, tx) = (y + pad - ky, xx + pad - kx);
                        if ty < 0 || tx < 0 || ty % stride != 0 || tx % stride != 0 || ty / stride >= h || tx / stride >= w {
                            continue;
                        }
                        for c in 0..ic {
                            *v += x[(((ty / stride) * w + tx / stride) * ic + c) as usize] * wv[(((o * k + ky) * k + kx) * ic + c) as usize];
                        }
                    }
                }
            }
            for constant in [true, false] {
                let model = Arc::new(Model::from_bytes(Arc::new(transpose_conv_bias(h, w, ic, oc, k, stride, true, &wv, &bv, constant))).unwrap());
                for threads in [1, 2] {
                    let mut s = Session::with_options(model.clone(), SessionOptions { threads, ..Default::default() }).unwrap();
                    s.prepare().unwrap();
                    s.set_input_f32(0, &x).unwrap();
                    if !constant {
                        s.set_input_f32(1, &wv).unwrap();
                        s.set_input_f32(2, &bv).unwrap();
                    }
                    s.run().unwrap();
                    let got = s.output(0).unwrap().to_f32().unwrap();
                    assert_eq!(got.len(), want.len());
                    for (i, (g, e)) in got.iter().zip(&want).enumerate() {
                        assert!((g - e).abs() < 1e-4, "{h}x{w}x{ic} -> {oc} k{k} s{stride} constant {constant} threads {threads} at {i}: {g} vs {e}");
                    }
                }
            }
        }
    }
}
