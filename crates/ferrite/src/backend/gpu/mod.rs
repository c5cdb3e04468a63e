//! The `gpu` backend: wgpu compute (Vulkan, Metal, DX12), float32, WGSL shaders.
//!
//! Building an op checks it with the reference backend (which infers its output
//! shapes and rejects bad attributes), then derives the shader parameters, uploads
//! its constant inputs once per session (a packing keyed by tensor) and records
//! the op's dispatches in the session's [`BackendContext`]. The compiler's segment
//! pass (`compile/segment.rs`) then runs each maximal sequence of consecutive GPU
//! steps as one [`segment::Segment`]: one submission, intermediates in GPU buffers,
//! copies at the host crossings only. The kernel returned here runs the op as a
//! segment of its own, for a GPU step the pass leaves alone.
//!
//! The device is shared by every session of the process ([`device::shared`]);
//! without an adapter every op is refused, so `--backends gpu,cpu` runs the model
//! on the CPU (the session warns once).

pub(crate) mod device;
mod kernels;
pub(crate) mod segment;
mod shaders;

use std::sync::Arc;

use super::reference::ReferenceBackend;
use super::{Backend, BackendContext, Built, OpContext};
use crate::error::Result;

pub use device::{list_adapters, AdapterSummary};

/// The one custom op with a GPU kernel (MediaPipe's, in the segmentation models).
const TRANSPOSE_CONV_BIAS: &str = "Convolution2DTransposeBias";

/// The wgpu backend.
#[derive(Debug, Default, Clone, Copy)]
pub struct GpuBackend;

impl Backend for GpuBackend {
    fn name(&self) -> &'static str {
        "gpu"
    }

    fn build(&self, op: &OpContext<'_>, ctx: &mut BackendContext) -> Result<Built> {
        let dev = match ctx.gpu.device.clone() {
            Some(d) => d,
            None => match device::shared() {
                Ok(d) => {
                    ctx.gpu.device = Some(d.clone());
                    d
                }
                Err(e) => {
                    if !ctx.gpu.warned {
                        ctx.gpu.warned = true;
                        eprintln!("ferrite: warning: the gpu backend has no adapter ({e}); its ops run on the next backend");
                    }
                    return Err(op.unsupported(format!("no GPU: {e}")));
                }
            },
        };
        if ctx.gpu.half && !dev.adapter.shader_f16 {
            if !ctx.gpu.warned {
                ctx.gpu.warned = true;
                eprintln!(
                    "ferrite: warning: fp16 GPU precision asked for, but adapter '{}' lacks SHADER_F16; its ops run on the next backend",
                    dev.adapter.name
                );
            }
            return Err(op.unsupported("fp16 GPU precision: the adapter lacks SHADER_F16"));
        }
        if crate::backend::reference::is_quantized(op) {
            return Err(op.unsupported("quantized ops have no GPU kernel (float32 only)"));
        }
        let shapes = match &op.op.code {
            // MediaPipe's transposed convolution: its shape rule is the registered op's.
            crate::model::OpCode::Custom(name) if name == TRANSPOSE_CONV_BIAS => {
                use crate::backend::CustomOp;
                crate::backend::custom_builtin::TransposeConvBias.build(op)?.outputs
            }
            _ => ReferenceBackend.build(op, ctx)?.outputs,
        };
        // A refused op must leave no packing recorded as its own: the next backend's
        // step would then skip reading that input.
        let gpu_op = match kernels::build(&dev, op, ctx, &shapes) {
            Ok(g) => Arc::new(g),
            Err(e) => {
                ctx.take_packed_by_build();
                return Err(e);
            }
        };
        ctx.gpu.built.insert((op.subgraph, op.op_index), gpu_op.clone());
        Ok(Built { outputs: shapes, kernel: segment::standalone(dev, gpu_op, ctx.gpu.times.clone()) })
    }

    fn memory(&self) -> super::select::Memory {
        super::select::Memory::Gpu
    }

    fn builds_custom(&self, name: &str) -> bool {
        name == TRANSPOSE_CONV_BIAS
    }
}

/// The GPU part of a session's [`BackendContext`].
#[derive(Default)]
pub(crate) struct GpuContext {
    /// The shared device, once an op asked for it.
    pub(crate) device: Option<Arc<device::GpuDevice>>,
    /// Ops built for the GPU and not yet taken into a segment, by (subgraph, op).
    pub(crate) built: std::collections::HashMap<(usize, usize), Arc<segment::GpuOp>>,
    /// Whether the missing-adapter warning was printed.
    pub(crate) warned: bool,
    /// Tensors stored as float16 on the GPU (the session's `gpu_precision`).
    pub(crate) half: bool,
    /// Upload / GPU / readback time of the session's segments.
    pub(crate) times: Arc<segment::Times>,
}

/// The adapter the GPU backend uses (creating the shared device), or why there is none.
pub fn available() -> std::result::Result<AdapterSummary, String> {
    device::shared().map(|d| d.adapter.clone())
}

/// How the shared device's driver rounds multiply-adds: (WGSL `fma` rounds once,
/// a plain `a * b + c` is contracted into one rounding), measured by a one-thread
/// shader on values where one and two roundings differ. Err without an adapter.
pub fn fma_rounding() -> std::result::Result<(bool, bool), String> {
    device::shared()?.fma_rounding().map_err(|e| e.to_string())
}

/// The convolution shaders' multiply-add (`a * b + c` rounded once: WGSL `fma`, or
/// its emulation where the driver rounds `fma` twice) on the shared device, one
/// result per triple: what `tests/gpu.rs` checks against the host's fused
/// multiply-add. Err without an adapter.
pub fn multiply_add(triples: &[[f32; 3]]) -> std::result::Result<Vec<f32>, String> {
    device::shared()?.mad(triples).map_err(|e| e.to_string())
}

/// Whether the shared device's convolution shaders emulate a once-rounded `fma`
/// (the driver rounds WGSL `fma` twice). Err without an adapter.
pub fn emulates_fma() -> std::result::Result<bool, String> {
    device::shared().map(|d| d.emulate_fma)
}

/// GPU memory the shared device holds now, as wgpu counts it: (buffers, bytes of
/// their allocations, device memory allocations). What the 200-session test
/// watches for growth; read from wgpu-hal's counters, which the `gpu` feature
/// turns on. None without an adapter.
pub fn memory_in_use() -> Option<(isize, isize, isize)> {
    let dev = device::shared().ok()?;
    let c = dev.device.get_internal_counters().hal;
    Some((c.buffers.read(), c.buffer_memory.read(), c.memory_allocations.read()))
}
