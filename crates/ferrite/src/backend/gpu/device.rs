//! The GPU device: one adapter and device per process, shared by every session
//! through an `Arc` (never thread-local), requested with the adapter's own limits
//! (wgpu's defaults cap a storage binding at 128 MiB). Pipelines are compiled once
//! per shader and kept here; wgpu errors are caught by error scopes and turned into
//! `Error`s instead of wgpu's default panic.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use crate::error::{Error, Result};

/// What `ferrite devices` shows of one adapter.
#[derive(Debug, Clone)]
pub struct AdapterSummary {
    /// Adapter name (`llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// Discrete, integrated, virtual, CPU or other.
    pub device_type: String,
    /// Graphics API (Vulkan, Metal, Dx12).
    pub backend: String,
    /// Driver name and version.
    pub driver: String,
    /// Largest storage-buffer binding, bytes.
    pub max_storage_binding: u64,
    /// Largest buffer, bytes.
    pub max_buffer: u64,
    /// Storage buffers per shader stage.
    pub max_storage_buffers_per_stage: u32,
    /// Workgroups per dispatch dimension.
    pub max_workgroups_per_dimension: u32,
    /// Invocations per workgroup.
    pub max_invocations_per_workgroup: u32,
    /// Whether the adapter offers `SHADER_F16` (fp16 arithmetic in shaders).
    pub shader_f16: bool,
    /// Whether the adapter offers `TIMESTAMP_QUERY` (GPU time of a submission).
    pub timestamps: bool,
}

/// The graphics APIs ferrite asks wgpu for (no GL: compute there is too limited).
fn apis() -> wgpu::Backends {
    wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends = apis();
    wgpu::Instance::new(desc)
}

/// Every adapter wgpu finds, best first (discrete, integrated, virtual, CPU).
fn adapters(instance: &wgpu::Instance) -> Vec<wgpu::Adapter> {
    let mut list = pollster::block_on(instance.enumerate_adapters(apis()));
    let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    list.sort_by_key(rank);
    list
}

fn summary(a: &wgpu::Adapter) -> AdapterSummary {
    let (info, l) = (a.get_info(), a.limits());
    AdapterSummary {
        name: info.name,
        device_type: format!("{:?}", info.device_type),
        backend: format!("{:?}", info.backend),
        driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
        max_storage_binding: l.max_storage_buffer_binding_size,
        max_buffer: l.max_buffer_size,
        max_storage_buffers_per_stage: l.max_storage_buffers_per_shader_stage,
        max_workgroups_per_dimension: l.max_compute_workgroups_per_dimension,
        max_invocations_per_workgroup: l.max_compute_invocations_per_workgroup,
        shader_f16: a.features().contains(wgpu::Features::SHADER_F16),
        timestamps: a.features().contains(wgpu::Features::TIMESTAMP_QUERY),
    }
}

/// The adapters this machine offers, best first.
pub fn list_adapters() -> Vec<AdapterSummary> {
    adapters(&instance()).iter().map(summary).collect()
}

/// How to get one: the message every "no GPU" error ends with.
pub(crate) const INSTALL_HINT: &str =
    "no Vulkan, Metal or DX12 adapter found (on Debian/Ubuntu, `apt-get install mesa-vulkan-drivers libvulkan1` gives the lavapipe software adapter)";

/// A device and its queue, shared by the sessions of a process.
pub(crate) struct GpuDevice {
    pub(crate) device: wgpu::Device,
    pub(crate) queue: wgpu::Queue,
    pub(crate) adapter: AdapterSummary,
    pub(crate) limits: wgpu::Limits,
    /// Compiled pipelines by (shader, float16 storage).
    pipelines: Mutex<HashMap<(&'static str, bool), Arc<wgpu::ComputePipeline>>>,
    /// Read-only stand-in bound where a shader declares an absent operand (no bias).
    pub(crate) zeros: wgpu::Buffer,
    /// Errors wgpu raised outside any error scope (recorded, never a panic).
    uncaptured: Arc<Mutex<Option<String>>>,
    /// The driver rounds WGSL `fma` twice: the convolutions' shaders then emulate
    /// one rounding (`shaders::MAD_EMULATED`) to sum as the CPU's FMA GEMM does.
    pub(crate) emulate_fma: bool,
}

static DEVICE: OnceLock<std::result::Result<Arc<GpuDevice>, String>> = OnceLock::new();

/// The process's device, created on first use with the best adapter's limits, or
/// why there is none.
pub(crate) fn shared() -> std::result::Result<Arc<GpuDevice>, String> {
    DEVICE.get_or_init(|| create().map(Arc::new)).clone()
}

fn create() -> std::result::Result<GpuDevice, String> {
    let instance = instance();
    let adapter = adapters(&instance).into_iter().next().ok_or_else(|| INSTALL_HINT.to_string())?;
    let limits = adapter.limits();
    // SHADER_F16 where offered: sessions that ask for float16 precision need it, and
    // enabling it costs the float32 shaders nothing.
    // TIMESTAMP_QUERY where offered, for `bench`'s GPU time.
    let required_features = adapter.features() & (wgpu::Features::SHADER_F16 | wgpu::Features::TIMESTAMP_QUERY);
    let desc = wgpu::DeviceDescriptor { label: Some("ferrite"), required_limits: limits.clone(), required_features, ..Default::default() };
    let (device, queue) = pollster::block_on(adapter.request_device(&desc)).map_err(|e| format!("GPU device on '{}': {e}", adapter.get_info().name))?;
    let uncaptured = Arc::new(Mutex::new(None));
    let sink = uncaptured.clone();
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        if let Ok(mut s) = sink.lock() {
            s.get_or_insert_with(|| e.to_string());
        }
    }));
    let zeros = device.create_buffer(&wgpu::BufferDescriptor {
        label: Some("zeros"),
        size: 16,
        usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
        mapped_at_creation: false,
    });
    let mut dev = GpuDevice { device, queue, adapter: summary(&adapter), limits, pipelines: Mutex::new(HashMap::new()), zeros, uncaptured, emulate_fma: false };
    // Measured once per process (one tiny dispatch). A probe that fails leaves
    // `fma` as it is: results then round as the driver does, never wrongly.
    dev.emulate_fma = matches!(dev.fma_rounding(), Ok((false, _)));
    Ok(dev)
}

impl GpuDevice {
    /// The pipeline of shader `name` (tensors stored as float16 when `half`),
    /// compiled on first use (at prepare) and cached.
    pub(crate) fn pipeline(&self, name: &'static str, half: bool) -> Result<Arc<wgpu::ComputePipeline>> {
        if half && !self.adapter.shader_f16 {
            return Err(Error::Unsupported(format!("float16 GPU precision: adapter '{}' lacks SHADER_F16", self.adapter.name).into()));
        }
        let mut cache = self.pipelines.lock().map_err(|_| Error::Runtime("GPU pipeline cache poisoned".into()))?;
        if let Some(p) = cache.get(&(name, half)) {
            return Ok(p.clone());
        }
        let src = super::shaders::source(name, half, self.emulate_fma).ok_or_else(|| Error::Runtime(format!("internal: no shader '{name}'").into()))?;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(name), source: wgpu::ShaderSource::Wgsl(src.into()) });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(name),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Runtime(format!("GPU shader '{name}' failed to compile: {e}").into()));
        }
        let p = Arc::new(pipeline);
        cache.insert((name, half), p.clone());
        Ok(p)
    }

    /// A storage buffer holding `data` (weights, parameters), uploaded now.
    pub(crate) fn upload(&self, label: &str, data: &[u8]) -> wgpu::Buffer {
        use wgpu::util::DeviceExt;
        // A binding may not be empty; pad to a whole word.
        let mut owned;
        let bytes = if data.is_empty() || !data.len().is_multiple_of(4) {
            owned = data.to_vec();
            owned.resize(data.len().next_multiple_of(4).max(4), 0);
            &owned[..]
        } else {
            data
        };
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor { label: Some(label), contents: bytes, usage: wgpu::BufferUsages::STORAGE })
    }

    /// An uninitialised storage buffer of `bytes` (at least one word) that transfers
    /// can fill and read.
    pub(crate) fn storage(&self, label: &str, bytes: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.next_multiple_of(4).max(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// The first error wgpu raised outside an error scope since the last call.
    pub(crate) fn take_uncaptured(&self) -> Option<String> {
        self.uncaptured.lock().ok().and_then(|mut s| s.take())
    }

    /// Whether the driver rounds WGSL `fma(a, b, c)` once (fused) or rounds the
    /// product first, and whether it contracts a plain `a * b + c` into one
    /// rounding: `(fma fused, a * b + c contracted)`. Measured on values where the
    /// two differ: a = b = 1 + 2^-12 and c = -(1 + 2^-11) give 2^-24 fused and 0
    /// unfused. The convolutions sum with `fma` in the CPU's order; on a driver that
    /// does not fuse it, the GPU's sums round like the CPU's unfused (portable)
    /// kernels rather than its FMA GEMM.
    pub(crate) fn fma_rounding(&self) -> Result<(bool, bool)> {
        const SRC: &str = r#"
@group(0) @binding(0) var<storage, read> v: array<f32>;
@group(0) @binding(1) var<storage, read_write> r: array<f32>;
@compute @workgroup_size(1)
fn main() {
    r[0] = fma(v[0], v[1], v[2]);
    r[1] = v[0] * v[1] + v[2];
}
"#;
        let a = 1.0 + 2f32.powi(-12);
        let got = self.probe("fma probe", SRC, &[a, a, -(1.0 + 2f32.powi(-11))], 2, 1)?;
        let (fused, unfused) = (2f32.powi(-24), 0.0f32);
        let read = |x: f32, what: &str| {
            if x == fused {
                Ok(true)
            } else if x == unfused {
                Ok(false)
            } else {
                Err(Error::Runtime(format!("GPU fma probe: {what} gave {x:e}, neither {fused:e} (one rounding) nor 0 (two)").into()))
            }
        };
        Ok((read(got[0], "fma(a, b, c)")?, read(got[1], "a * b + c")?))
    }

    /// The convolution shaders' `mad(a, b, c)` (fused `fma`, or its emulation where
    /// the driver rounds `fma` twice) over `triples`, one invocation each.
    pub(crate) fn mad(&self, triples: &[[f32; 3]]) -> Result<Vec<f32>> {
        const MAIN: &str = r#"
@group(0) @binding(0) var<storage, read> p: array<f32>;
@group(0) @binding(1) var<storage, read_write> r: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) g: vec3<u32>) {
    let i = g.x;
    if (i >= arrayLength(&r)) { return; }
    r[i] = mad(p[3u * i], p[3u * i + 1u], p[3u * i + 2u]);
}
"#;
        let src = format!("{}{MAIN}", super::shaders::mad_source(self.emulate_fma));
        let flat: Vec<f32> = triples.iter().flatten().copied().collect();
        self.probe("mad check", &src, &flat, triples.len(), triples.len().div_ceil(64) as u32)
    }

    /// Runs `src` (binding 0: `input`, read-only; binding 1: `outputs` floats) on
    /// `groups` workgroups and reads binding 1 back.
    fn probe(&self, label: &str, src: &str, input: &[f32], outputs: usize, groups: u32) -> Result<Vec<f32>> {
        let input: Vec<u8> = input.iter().flat_map(|v| v.to_le_bytes()).collect();
        let out_bytes = (outputs.max(1) * 4) as u64;
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor { label: Some(label), source: wgpu::ShaderSource::Wgsl(src.into()) });
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(label),
            layout: None,
            module: &module,
            entry_point: Some("main"),
            compilation_options: Default::default(),
            cache: None,
        });
        let v = self.upload(label, &input);
        let r = self.storage(label, out_bytes);
        let staging = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: out_bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: v.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: r.as_entire_binding() },
            ],
        });
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some(label) });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
            pass.set_pipeline(&pipeline);
            pass.set_bind_group(0, &group, &[]);
            pass.dispatch_workgroups(groups.max(1), 1, 1);
        }
        encoder.copy_buffer_to_buffer(&r, 0, &staging, 0, out_bytes);
        self.queue.submit([encoder.finish()]);
        let done = Arc::new(Mutex::new(None));
        let flag = done.clone();
        staging.slice(..).map_async(wgpu::MapMode::Read, move |res| {
            if let Ok(mut f) = flag.lock() {
                *f = Some(res);
            }
        });
        self.device.poll(wgpu::PollType::Wait { submission_index: None, timeout: None }).map_err(|e| Error::Runtime(format!("GPU: {e}").into()))?;
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Runtime(format!("GPU {label}: {e}").into()));
        }
        if !matches!(done.lock().ok().and_then(|mut d| d.take()), Some(Ok(()))) {
            return Err(Error::Runtime(format!("GPU {label}: readback failed").into()));
        }
        let got: Vec<f32> = staging.slice(..).get_mapped_range().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).take(outputs).collect();
        staging.unmap();
        Ok(got)
    }

    /// Workgroup counts for `groups` one-dimensional workgroups, folded into a
    /// second dimension past the per-dimension limit (the shaders rebuild the
    /// linear index from `num_workgroups`).
    pub(crate) fn fold(&self, groups: u64) -> Result<[u32; 3]> {
        let max = u64::from(self.limits.max_compute_workgroups_per_dimension.max(1));
        let groups = groups.max(1);
        let y = groups.div_ceil(max);
        if y > max {
            return Err(Error::Unsupported(format!("{groups} workgroups exceed the adapter's grid").into()));
        }
        let x = groups.div_ceil(y);
        Ok([x as u32, y as u32, 1])
    }
}
