//! Builds `.tflite` model files with the generated flatbuffer builders.
//!
//! Used by the test suite to generate single-op models with randomized
//! parameters, to build the small demo model the repository ships, and later
//! by training export. The writer is deliberately explicit: every tensor and op
//! is described by value, nothing is inferred.

use crate::schema as fb;
use flatbuffers::{FlatBufferBuilder, UnionWIPOffset, WIPOffset};

/// Fused activations.
pub use fb::ActivationFunctionType as Activation;
/// Builtin operator codes.
pub use fb::BuiltinOperator;
/// Padding kinds.
pub use fb::Padding;
/// Tensor element types the writer can describe (a subset of the format's).
pub use fb::TensorType;

/// One tensor of the subgraph being written.
#[derive(Debug, Clone)]
pub struct TensorSpec {
    /// Tensor name.
    pub name: String,
    /// Element type.
    pub dtype: TensorType,
    /// Static shape (unknown dims written as 1 here and -1 in `shape_signature`).
    pub shape: Vec<i32>,
    /// Shape with -1 for dims unknown until run time.
    pub shape_signature: Option<Vec<i32>>,
    /// Constant data, little-endian, or `None` for activations.
    pub data: Option<Vec<u8>>,
    /// Per-tensor or per-axis quantization: (scales, zero points, axis).
    pub quant: Option<(Vec<f32>, Vec<i64>, i32)>,
}

impl TensorSpec {
    /// A non-constant tensor.
    pub fn activation(name: &str, dtype: TensorType, shape: &[i32]) -> Self {
        TensorSpec { name: name.into(), dtype, shape: shape.to_vec(), shape_signature: None, data: None, quant: None }
    }
    /// A constant float32 tensor.
    pub fn const_f32(name: &str, shape: &[i32], values: &[f32]) -> Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorSpec { data: Some(data), ..Self::activation(name, TensorType::FLOAT32, shape) }
    }
    /// A constant int32 tensor.
    pub fn const_i32(name: &str, shape: &[i32], values: &[i32]) -> Self {
        let data = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        TensorSpec { data: Some(data), ..Self::activation(name, TensorType::INT32, shape) }
    }
}

/// Builtin options of an op, for the ops the writer can express.
#[derive(Debug, Clone, PartialEq)]
#[allow(missing_docs)]
pub enum Options {
    None,
    Conv2D {
        padding: Padding,
        stride: (i32, i32),
        dilation: (i32, i32),
        activation: Activation,
    },
    DepthwiseConv2D {
        padding: Padding,
        stride: (i32, i32),
        dilation: (i32, i32),
        depth_multiplier: i32,
        activation: Activation,
    },
    Pool2D {
        padding: Padding,
        stride: (i32, i32),
        filter: (i32, i32),
        activation: Activation,
    },
    FullyConnected {
        activation: Activation,
        keep_num_dims: bool,
        /// Hybrid kernels quantize each input row with its own zero point.
        asymmetric_quantize_inputs: bool,
    },
    Softmax {
        beta: f32,
    },
    Concatenation {
        axis: i32,
        activation: Activation,
    },
    /// ADD, SUB, MUL, DIV share the shape of their options.
    Binary {
        activation: Activation,
    },
    /// ADD / SUB options with an explicit `pot_scale_int16`.
    AddSub {
        activation: Activation,
        pot_scale_int16: bool,
    },
    Reshape {
        new_shape: Vec<i32>,
    },
    Resize {
        align_corners: bool,
        half_pixel_centers: bool,
    },
    ResizeNearest {
        align_corners: bool,
        half_pixel_centers: bool,
    },
    BlockSize(i32),
    Gather {
        axis: i32,
        batch_dims: i32,
    },
    Reducer {
        keep_dims: bool,
    },
    Squeeze {
        dims: Vec<i32>,
    },
    Split {
        num_splits: i32,
    },
    StridedSlice {
        begin_mask: i32,
        end_mask: i32,
        ellipsis_mask: i32,
        new_axis_mask: i32,
        shrink_axis_mask: i32,
        offset: bool,
    },
    Cast {
        input: TensorType,
        output: TensorType,
    },
    ArgMinMax {
        output_type: TensorType,
    },
    TransposeConv {
        padding: Padding,
        stride: (i32, i32),
        activation: Activation,
    },
    Shape {
        out_type: TensorType,
    },
    Pack {
        values_count: i32,
        axis: i32,
    },
    Unpack {
        num: i32,
        axis: i32,
    },
    LeakyRelu {
        alpha: f32,
    },
    BatchMatMul {
        adj_x: bool,
        adj_y: bool,
        /// Hybrid kernels quantize each input row with its own zero point.
        asymmetric_quantize_inputs: bool,
    },
    /// Options-less ops whose files carry an empty options table of this union type.
    Empty(fb::BuiltinOptions),
    If {
        then_subgraph: i32,
        else_subgraph: i32,
    },
    While {
        cond_subgraph: i32,
        body_subgraph: i32,
    },
    CallOnce {
        init_subgraph: i32,
    },
    VarHandle {
        container: String,
        shared_name: String,
    },
}

/// What an op is: a builtin code or a custom op name.
#[derive(Debug, Clone, PartialEq)]
pub enum OpCode {
    /// A builtin operator.
    Builtin(BuiltinOperator),
    /// A custom operator with its name.
    Custom(String),
}

/// One operator of the subgraph being written.
#[derive(Debug, Clone)]
pub struct OpSpec {
    /// The op code.
    pub code: OpCode,
    /// Input tensor indices (-1 for an omitted optional input).
    pub inputs: Vec<i32>,
    /// Output tensor indices.
    pub outputs: Vec<i32>,
    /// Builtin options.
    pub options: Options,
    /// Custom options bytes (custom ops only).
    pub custom_options: Option<Vec<u8>>,
}

/// A single-subgraph model description.
#[derive(Debug, Clone, Default)]
pub struct ModelSpec {
    /// Tensors, indexed by position.
    pub tensors: Vec<TensorSpec>,
    /// Operators in execution order.
    pub ops: Vec<OpSpec>,
    /// Subgraph input tensor indices.
    pub inputs: Vec<i32>,
    /// Subgraph output tensor indices.
    pub outputs: Vec<i32>,
    /// Model description string.
    pub description: String,
    /// When set, writes a signature with this key naming every input and output.
    pub signature_key: Option<String>,
    /// Further subgraphs (indices 1, 2, ...), e.g. branches and loop bodies. Their own
    /// `subgraphs`, `description` and `signature_key` are ignored.
    pub subgraphs: Vec<ModelSpec>,
}

impl ModelSpec {
    /// Adds a tensor and returns its index.
    pub fn add_tensor(&mut self, t: TensorSpec) -> i32 {
        self.tensors.push(t);
        (self.tensors.len() - 1) as i32
    }

    /// Adds an op.
    pub fn add_op(&mut self, code: OpCode, inputs: &[i32], outputs: &[i32], options: Options) {
        self.ops.push(OpSpec { code, inputs: inputs.to_vec(), outputs: outputs.to_vec(), options, custom_options: None });
    }

    /// Serializes the model to `.tflite` bytes, constants inline.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.build(None)
    }

    /// Serializes with every constant stored after the flatbuffer and referenced by
    /// `offset`/`size` (the layout converters use for models over 2 GiB).
    pub fn to_bytes_external(&self) -> Vec<u8> {
        // The u64 fields are always present, so the flatbuffer's length does not depend on
        // their values: build once to learn it, then again with the real offsets.
        let probe = self.build(Some(0));
        let base = probe.len().div_ceil(16) * 16;
        let mut out = self.build(Some(base as u64));
        out.resize(base, 0);
        for d in std::iter::once(self).chain(self.subgraphs.iter()).flat_map(|g| &g.tensors).filter_map(|t| t.data.as_ref()) {
            out.extend_from_slice(d);
            out.resize(out.len().div_ceil(16) * 16, 0);
        }
        out
    }

    fn build(&self, external_base: Option<u64>) -> Vec<u8> {
        let mut external_base = external_base;
        let mut b = FlatBufferBuilder::with_capacity(1024);
        b.force_defaults(external_base.is_some());

        let graphs: Vec<&ModelSpec> = std::iter::once(self).chain(self.subgraphs.iter()).collect();
        // Buffer 0 is the format's empty sentinel; each constant gets its own buffer.
        let mut buffers = vec![fb::Buffer::create(&mut b, &fb::BufferArgs::default())];
        let mut tensor_buffers: Vec<Vec<u32>> = Vec::with_capacity(graphs.len());
        for g in &graphs {
            let mut tensor_buffer = Vec::with_capacity(g.tensors.len());
            for t in &g.tensors {
                match &t.data {
                    Some(d) => {
                        let buf = match external_base.as_mut() {
                            Some(next) => {
                                let args = fb::BufferArgs { data: None, offset: *next, size: d.len() as u64 };
                                *next = (*next + d.len() as u64).div_ceil(16) * 16;
                                fb::Buffer::create(&mut b, &args)
                            }
                            None => {
                                let data = b.create_vector(d);
                                fb::Buffer::create(&mut b, &fb::BufferArgs { data: Some(data), ..Default::default() })
                            }
                        };
                        buffers.push(buf);
                        tensor_buffer.push((buffers.len() - 1) as u32);
                    }
                    None => tensor_buffer.push(0),
                }
            }
            tensor_buffers.push(tensor_buffer);
        }

        // One operator code per distinct (builtin, custom name), shared by all subgraphs.
        let mut codes: Vec<OpCode> = Vec::new();
        for op in graphs.iter().flat_map(|g| &g.ops) {
            if !codes.contains(&op.code) {
                codes.push(op.code.clone());
            }
        }
        let code_index = |c: &OpCode| codes.iter().position(|x| x == c).unwrap_or(0) as u32;
        let fb_codes: Vec<_> = codes
            .iter()
            .map(|c| {
                let (code, custom) = match c {
                    OpCode::Builtin(op) => (*op, None),
                    OpCode::Custom(name) => (BuiltinOperator::CUSTOM, Some(b.create_string(name))),
                };
                // Old readers only look at the one-byte field; codes above 127 use the placeholder there.
                let deprecated = code.0.min(127) as i8;
                fb::OperatorCode::create(
                    &mut b,
                    &fb::OperatorCodeArgs { deprecated_builtin_code: deprecated, custom_code: custom, version: 1, builtin_code: code },
                )
            })
            .collect();

        let mut fb_subgraphs = Vec::with_capacity(graphs.len());
        for (gi, g) in graphs.iter().enumerate() {
            let mut tensors = Vec::with_capacity(g.tensors.len());
            for (t, &buffer) in g.tensors.iter().zip(&tensor_buffers[gi]) {
                let shape = b.create_vector(&t.shape);
                let shape_signature = t.shape_signature.as_ref().map(|s| b.create_vector(s));
                let name = b.create_string(&t.name);
                let quantization = t.quant.as_ref().map(|(s, z, axis)| {
                    let scale = b.create_vector(s);
                    let zero_point = b.create_vector(z);
                    fb::QuantizationParameters::create(
                        &mut b,
                        &fb::QuantizationParametersArgs { scale: Some(scale), zero_point: Some(zero_point), quantized_dimension: *axis, ..Default::default() },
                    )
                });
                tensors.push(fb::Tensor::create(
                    &mut b,
                    &fb::TensorArgs {
                        shape: Some(shape),
                        type_: t.dtype,
                        buffer,
                        name: Some(name),
                        quantization,
                        shape_signature,
                        has_rank: true,
                        ..Default::default()
                    },
                ));
            }
            let mut ops = Vec::with_capacity(g.ops.len());
            for op in &g.ops {
                let inputs = b.create_vector(&op.inputs);
                let outputs = b.create_vector(&op.outputs);
                let (options_type, options) = write_options(&mut b, &op.options);
                let options_type = match &op.code {
                    OpCode::Builtin(code) if options.is_some() => options_type_for(*code, options_type),
                    _ => options_type,
                };
                let custom_options = op.custom_options.as_ref().map(|c| b.create_vector(c));
                ops.push(fb::Operator::create(
                    &mut b,
                    &fb::OperatorArgs {
                        opcode_index: code_index(&op.code),
                        inputs: Some(inputs),
                        outputs: Some(outputs),
                        builtin_options_type: options_type,
                        builtin_options: options,
                        custom_options,
                        ..Default::default()
                    },
                ));
            }
            let tensors = b.create_vector(&tensors);
            let inputs = b.create_vector(&g.inputs);
            let outputs = b.create_vector(&g.outputs);
            let ops = b.create_vector(&ops);
            let name = b.create_string(if gi == 0 { "main" } else { "sub" });
            fb_subgraphs.push(fb::SubGraph::create(
                &mut b,
                &fb::SubGraphArgs { tensors: Some(tensors), inputs: Some(inputs), outputs: Some(outputs), operators: Some(ops), name: Some(name) },
            ));
        }
        let subgraphs = b.create_vector(&fb_subgraphs);
        let codes = b.create_vector(&fb_codes);
        let buffers = b.create_vector(&buffers);
        let description = b.create_string(&self.description);
        let signature_defs = self.signature_key.as_ref().map(|key| {
            let inputs = tensor_maps(&mut b, self, &self.inputs);
            let outputs = tensor_maps(&mut b, self, &self.outputs);
            let key = b.create_string(key);
            let sig = fb::SignatureDef::create(
                &mut b,
                &fb::SignatureDefArgs { inputs: Some(inputs), outputs: Some(outputs), signature_key: Some(key), subgraph_index: 0 },
            );
            b.create_vector(&[sig])
        });
        let model = fb::Model::create(
            &mut b,
            &fb::ModelArgs {
                version: 3,
                operator_codes: Some(codes),
                subgraphs: Some(subgraphs),
                description: Some(description),
                buffers: Some(buffers),
                signature_defs,
                ..Default::default()
            },
        );
        b.finish(model, Some("TFL3"));
        b.finished_data().to_vec()
    }
}

/// Signature entries naming each tensor in `ts` by its tensor name.
fn tensor_maps<'b>(
    b: &mut FlatBufferBuilder<'b>,
    spec: &ModelSpec,
    ts: &[i32],
) -> WIPOffset<flatbuffers::Vector<'b, flatbuffers::ForwardsUOffset<fb::TensorMap<'b>>>> {
    let v: Vec<_> = ts
        .iter()
        .map(|&t| {
            let name = b.create_string(&spec.tensors[t as usize].name);
            fb::TensorMap::create(b, &fb::TensorMapArgs { name: Some(name), tensor_index: t as u32 })
        })
        .collect();
    b.create_vector(&v)
}

fn write_options(b: &mut FlatBufferBuilder, o: &Options) -> (fb::BuiltinOptions, Option<WIPOffset<UnionWIPOffset>>) {
    use fb::BuiltinOptions as T;
    let (t, off) = match o {
        Options::None => return (T::NONE, None),
        Options::Conv2D { padding, stride, dilation, activation } => (
            T::Conv2DOptions,
            fb::Conv2DOptions::create(
                b,
                &fb::Conv2DOptionsArgs {
                    padding: *padding,
                    stride_w: stride.1,
                    stride_h: stride.0,
                    fused_activation_function: *activation,
                    dilation_w_factor: dilation.1,
                    dilation_h_factor: dilation.0,
                    ..Default::default()
                },
            )
            .as_union_value(),
        ),
        Options::DepthwiseConv2D { padding, stride, dilation, depth_multiplier, activation } => (
            T::DepthwiseConv2DOptions,
            fb::DepthwiseConv2DOptions::create(
                b,
                &fb::DepthwiseConv2DOptionsArgs {
                    padding: *padding,
                    stride_w: stride.1,
                    stride_h: stride.0,
                    depth_multiplier: *depth_multiplier,
                    fused_activation_function: *activation,
                    dilation_w_factor: dilation.1,
                    dilation_h_factor: dilation.0,
                },
            )
            .as_union_value(),
        ),
        Options::Pool2D { padding, stride, filter, activation } => (
            T::Pool2DOptions,
            fb::Pool2DOptions::create(
                b,
                &fb::Pool2DOptionsArgs {
                    padding: *padding,
                    stride_w: stride.1,
                    stride_h: stride.0,
                    filter_width: filter.1,
                    filter_height: filter.0,
                    fused_activation_function: *activation,
                },
            )
            .as_union_value(),
        ),
        Options::FullyConnected { activation, keep_num_dims, asymmetric_quantize_inputs } => (
            T::FullyConnectedOptions,
            fb::FullyConnectedOptions::create(
                b,
                &fb::FullyConnectedOptionsArgs {
                    fused_activation_function: *activation,
                    keep_num_dims: *keep_num_dims,
                    asymmetric_quantize_inputs: *asymmetric_quantize_inputs,
                    ..Default::default()
                },
            )
            .as_union_value(),
        ),
        Options::Softmax { beta } => (T::SoftmaxOptions, fb::SoftmaxOptions::create(b, &fb::SoftmaxOptionsArgs { beta: *beta }).as_union_value()),
        Options::Concatenation { axis, activation } => (
            T::ConcatenationOptions,
            fb::ConcatenationOptions::create(b, &fb::ConcatenationOptionsArgs { axis: *axis, fused_activation_function: *activation }).as_union_value(),
        ),
        // The four binary ops share one layout; the union type is fixed up by the caller's op code below.
        Options::Binary { activation } => {
            (T::AddOptions, fb::AddOptions::create(b, &fb::AddOptionsArgs { fused_activation_function: *activation, pot_scale_int16: true }).as_union_value())
        }
        Options::AddSub { activation, pot_scale_int16 } => (
            T::AddOptions,
            fb::AddOptions::create(b, &fb::AddOptionsArgs { fused_activation_function: *activation, pot_scale_int16: *pot_scale_int16 }).as_union_value(),
        ),
        Options::Reshape { new_shape } => {
            let s = b.create_vector(new_shape);
            (T::ReshapeOptions, fb::ReshapeOptions::create(b, &fb::ReshapeOptionsArgs { new_shape: Some(s) }).as_union_value())
        }
        Options::Resize { align_corners, half_pixel_centers } => (
            T::ResizeBilinearOptions,
            fb::ResizeBilinearOptions::create(b, &fb::ResizeBilinearOptionsArgs { align_corners: *align_corners, half_pixel_centers: *half_pixel_centers })
                .as_union_value(),
        ),
        Options::ResizeNearest { align_corners, half_pixel_centers } => (
            T::ResizeNearestNeighborOptions,
            fb::ResizeNearestNeighborOptions::create(
                b,
                &fb::ResizeNearestNeighborOptionsArgs { align_corners: *align_corners, half_pixel_centers: *half_pixel_centers },
            )
            .as_union_value(),
        ),
        Options::BlockSize(n) => (T::SpaceToDepthOptions, fb::SpaceToDepthOptions::create(b, &fb::SpaceToDepthOptionsArgs { block_size: *n }).as_union_value()),
        Options::Gather { axis, batch_dims } => {
            (T::GatherOptions, fb::GatherOptions::create(b, &fb::GatherOptionsArgs { axis: *axis, batch_dims: *batch_dims }).as_union_value())
        }
        Options::Reducer { keep_dims } => {
            (T::ReducerOptions, fb::ReducerOptions::create(b, &fb::ReducerOptionsArgs { keep_dims: *keep_dims }).as_union_value())
        }
        Options::Squeeze { dims } => {
            let d = b.create_vector(dims);
            (T::SqueezeOptions, fb::SqueezeOptions::create(b, &fb::SqueezeOptionsArgs { squeeze_dims: Some(d) }).as_union_value())
        }
        Options::Split { num_splits } => (T::SplitOptions, fb::SplitOptions::create(b, &fb::SplitOptionsArgs { num_splits: *num_splits }).as_union_value()),
        Options::StridedSlice { begin_mask, end_mask, ellipsis_mask, new_axis_mask, shrink_axis_mask, offset } => (
            T::StridedSliceOptions,
            fb::StridedSliceOptions::create(
                b,
                &fb::StridedSliceOptionsArgs {
                    begin_mask: *begin_mask,
                    end_mask: *end_mask,
                    ellipsis_mask: *ellipsis_mask,
                    new_axis_mask: *new_axis_mask,
                    shrink_axis_mask: *shrink_axis_mask,
                    offset: *offset,
                },
            )
            .as_union_value(),
        ),
        Options::Cast { input, output } => {
            (T::CastOptions, fb::CastOptions::create(b, &fb::CastOptionsArgs { in_data_type: *input, out_data_type: *output }).as_union_value())
        }
        Options::ArgMinMax { output_type } => {
            (T::ArgMaxOptions, fb::ArgMaxOptions::create(b, &fb::ArgMaxOptionsArgs { output_type: *output_type }).as_union_value())
        }
        Options::TransposeConv { padding, stride, activation } => (
            T::TransposeConvOptions,
            fb::TransposeConvOptions::create(
                b,
                &fb::TransposeConvOptionsArgs {
                    padding: *padding,
                    stride_w: stride.1,
                    stride_h: stride.0,
                    fused_activation_function: *activation,
                    ..Default::default()
                },
            )
            .as_union_value(),
        ),
        Options::Shape { out_type } => (T::ShapeOptions, fb::ShapeOptions::create(b, &fb::ShapeOptionsArgs { out_type: *out_type }).as_union_value()),
        Options::Pack { values_count, axis } => {
            (T::PackOptions, fb::PackOptions::create(b, &fb::PackOptionsArgs { values_count: *values_count, axis: *axis }).as_union_value())
        }
        Options::Unpack { num, axis } => (T::UnpackOptions, fb::UnpackOptions::create(b, &fb::UnpackOptionsArgs { num: *num, axis: *axis }).as_union_value()),
        Options::LeakyRelu { alpha } => (T::LeakyReluOptions, fb::LeakyReluOptions::create(b, &fb::LeakyReluOptionsArgs { alpha: *alpha }).as_union_value()),
        Options::BatchMatMul { adj_x, adj_y, asymmetric_quantize_inputs } => (
            T::BatchMatMulOptions,
            fb::BatchMatMulOptions::create(
                b,
                &fb::BatchMatMulOptionsArgs { adj_x: *adj_x, adj_y: *adj_y, asymmetric_quantize_inputs: *asymmetric_quantize_inputs },
            )
            .as_union_value(),
        ),
        Options::If { then_subgraph, else_subgraph } => (
            T::IfOptions,
            fb::IfOptions::create(b, &fb::IfOptionsArgs { then_subgraph_index: *then_subgraph, else_subgraph_index: *else_subgraph }).as_union_value(),
        ),
        Options::While { cond_subgraph, body_subgraph } => (
            T::WhileOptions,
            fb::WhileOptions::create(b, &fb::WhileOptionsArgs { cond_subgraph_index: *cond_subgraph, body_subgraph_index: *body_subgraph }).as_union_value(),
        ),
        Options::CallOnce { init_subgraph } => {
            (T::CallOnceOptions, fb::CallOnceOptions::create(b, &fb::CallOnceOptionsArgs { init_subgraph_index: *init_subgraph }).as_union_value())
        }
        Options::VarHandle { container, shared_name } => {
            let c = b.create_string(container);
            let n = b.create_string(shared_name);
            (T::VarHandleOptions, fb::VarHandleOptions::create(b, &fb::VarHandleOptionsArgs { container: Some(c), shared_name: Some(n) }).as_union_value())
        }
        Options::Empty(t) => {
            // Every options-less table is an empty table; one layout serves them all.
            let start = b.start_table();
            (*t, b.end_table(start).as_union_value())
        }
    };
    (t, Some(off))
}

/// The union type id that LiteRT expects for the options of `op`, where the
/// writer's shared layouts (binary ops, block size, arg min/max, split)
/// cover several union members.
pub fn options_type_for(op: BuiltinOperator, written: fb::BuiltinOptions) -> fb::BuiltinOptions {
    use fb::BuiltinOptions as T;
    use BuiltinOperator as B;
    match op {
        B::SUB => T::SubOptions,
        B::MUL => T::MulOptions,
        B::DIV => T::DivOptions,
        B::DEPTH_TO_SPACE => T::DepthToSpaceOptions,
        B::ARG_MIN => T::ArgMinOptions,
        B::SPLIT_V => T::SplitVOptions,
        _ => written,
    }
}
