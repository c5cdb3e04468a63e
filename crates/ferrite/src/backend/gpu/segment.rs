//! GPU ops and segments. A [`GpuOp`] is what the GPU backend builds for one op:
//! its dispatches, each a cached pipeline, a parameter buffer and bindings naming
//! the op's run-time inputs and outputs (constants are already on the device). A
//! [`Segment`] runs a sequence of GPU ops as one command submission: host inputs
//! are uploaded at its entry, the tensors passed between its ops stay in GPU
//! buffers planned from their lifetimes, and the tensors the host needs are read
//! back at its exit through one staging buffer made at prepare.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::device::GpuDevice;
use crate::error::{Error, Result};
use crate::observe::{Flow, OnOp, OpByOp};

/// One binding of a dispatch.
pub(crate) enum Bind {
    /// Run-time input `k` of the op.
    In(usize),
    /// Output `k` of the op.
    Out(usize),
    /// A buffer uploaded at prepare (weights, a constant operand).
    Const(Arc<wgpu::Buffer>),
    /// The device's zero buffer, for an absent operand.
    Zero,
}

/// One compute dispatch.
pub(crate) struct Dispatch {
    pub(crate) pipeline: Arc<wgpu::ComputePipeline>,
    pub(crate) params: wgpu::Buffer,
    /// Bindings 1.. of the shader (binding 0 is `params`).
    pub(crate) binds: Vec<Bind>,
    pub(crate) groups: [u32; 3],
}

/// An op built for the GPU.
pub(crate) struct GpuOp {
    pub(crate) dispatches: Vec<Dispatch>,
    /// Bytes of each op input read at run time (None: not read, a constant or absent).
    pub(crate) inputs: Vec<Option<usize>>,
    /// Bytes of each output.
    pub(crate) outputs: Vec<usize>,
    /// Tensors stored as float16 on the GPU: host float32 data is converted on
    /// upload and readback.
    pub(crate) half: bool,
}

/// Where one op of a segment finds its tensors: a key per run-time input and per
/// output. Keys name tensors (the compiler uses alias roots); equal keys are one
/// buffer.
pub(crate) struct Member {
    pub(crate) op: Arc<GpuOp>,
    pub(crate) inputs: Vec<Option<usize>>,
    pub(crate) outputs: Vec<usize>,
}

/// GPU memory of a segment: bytes of its buffers, and the most bytes live at once.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct GpuMemory {
    /// Bytes of the planned buffers.
    pub buffer_bytes: usize,
    /// Largest total of tensors alive at one op: no plan can be smaller.
    pub lower_bound_bytes: usize,
}

/// Upload / GPU / readback time of a session's segments, nanoseconds summed over runs.
#[derive(Default)]
pub(crate) struct Times {
    runs: AtomicU64,
    upload_ns: AtomicU64,
    gpu_ns: AtomicU64,
    readback_ns: AtomicU64,
    timestamps: AtomicBool,
}

impl Times {
    pub(crate) fn snapshot(&self) -> crate::GpuTimes {
        let s = |a: &AtomicU64| a.load(Ordering::Relaxed) as f64 * 1e-9;
        crate::GpuTimes {
            runs: self.runs.load(Ordering::Relaxed),
            upload_s: s(&self.upload_ns),
            gpu_s: s(&self.gpu_ns),
            readback_s: s(&self.readback_ns),
            gpu_timestamps: self.timestamps.load(Ordering::Relaxed),
        }
    }
}

fn ns(since: Instant) -> u64 {
    u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// A run of GPU ops executed as one submission.
pub(crate) struct Segment {
    dev: Arc<GpuDevice>,
    buffers: Vec<wgpu::Buffer>,
    /// (buffer, bytes) of each external input, in the order the kernel receives them.
    inputs: Vec<(usize, usize)>,
    /// (buffer, bytes, staging offset) of each external output.
    outputs: Vec<(usize, usize, u64)>,
    passes: Vec<(Arc<wgpu::ComputePipeline>, wgpu::BindGroup, [u32; 3])>,
    staging: Option<wgpu::Buffer>,
    pub(crate) memory: GpuMemory,
    /// float16 tensors on the GPU (the host's are float32, twice the bytes).
    half: bool,
    /// Converted inputs, kept between runs (float16 only).
    scratch: Vec<u8>,
    /// Where the run time goes (shared by the session's segments).
    pub(crate) times: Arc<Times>,
    /// Timestamps at the compute pass's start and end, resolved into the end of the
    /// staging buffer (adapters with TIMESTAMP_QUERY, segments with outputs).
    timestamps: Option<(wgpu::QuerySet, wgpu::Buffer, u64)>,
    /// Per member, for running op by op: its passes, (buffer, bytes) of each op input
    /// read at run time (None: a constant or absent), of each output.
    members: Vec<MemberRun>,
}

/// One member of a segment as an op-by-op run needs it.
struct MemberRun {
    passes: std::ops::Range<usize>,
    inputs: Vec<Option<(usize, usize)>>,
    outputs: Vec<(usize, usize)>,
}

impl Segment {
    /// Plans the buffers of `members` (run in order) and binds them. `inputs` are the
    /// keys the host provides (uploaded each run), `outputs` those it reads back.
    pub(crate) fn new(dev: Arc<GpuDevice>, members: &[Member], inputs: &[usize], outputs: &[usize]) -> Result<Segment> {
        // Lifetimes over member positions: external inputs from the start, outputs
        // to the end; each tensor from its producer to its last reader.
        let mut bytes_of: Vec<(usize, usize)> = Vec::new(); // (key, bytes)
        let mut first: Vec<usize> = Vec::new();
        let mut last: Vec<usize> = Vec::new();
        // Widens tensor `key`'s lifetime to cover position `at` (and its size to `bytes`).
        let slot = |key: usize, bytes: usize, at: usize, bytes_of: &mut Vec<(usize, usize)>, first: &mut Vec<usize>, last: &mut Vec<usize>| match bytes_of
            .iter()
            .position(|&(k, _)| k == key)
        {
            Some(i) => {
                bytes_of[i].1 = bytes_of[i].1.max(bytes);
                first[i] = first[i].min(at);
                last[i] = last[i].max(at);
            }
            None => {
                bytes_of.push((key, bytes));
                first.push(at);
                last.push(at);
            }
        };
        for (m, member) in members.iter().enumerate() {
            for (k, key) in member.inputs.iter().enumerate() {
                if let (Some(key), Some(Some(b))) = (key, member.op.inputs.get(k)) {
                    slot(*key, *b, m, &mut bytes_of, &mut first, &mut last);
                }
            }
            for (k, &key) in member.outputs.iter().enumerate() {
                let b = member.op.outputs.get(k).copied().unwrap_or(0);
                slot(key, b, m, &mut bytes_of, &mut first, &mut last);
            }
        }
        for key in inputs.iter().chain(outputs) {
            let i = bytes_of.iter().position(|&(k, _)| k == *key).ok_or_else(|| Error::Runtime(format!("internal: GPU segment tensor {key} unused").into()))?;
            if inputs.contains(key) {
                first[i] = 0;
            }
            if outputs.contains(key) {
                last[i] = members.len();
            }
        }
        // Buffers reused between tensors whose lifetimes do not meet, best fit first:
        // at each op its outputs are placed before the tensors it read last are freed,
        // so an op never reads and writes one buffer.
        let n = bytes_of.len();
        let mut buffer_of = vec![usize::MAX; n];
        let mut sizes: Vec<usize> = Vec::new();
        let mut free: Vec<usize> = Vec::new();
        let mut lower = 0usize;
        for at in 0..=members.len() {
            let live: usize = (0..n).filter(|&i| first[i] <= at && at <= last[i]).map(|i| bytes_of[i].1).sum();
            lower = lower.max(live);
            for i in (0..n).filter(|&i| first[i] == at) {
                let need = bytes_of[i].1.next_multiple_of(4).max(4);
                let pick = free.iter().enumerate().filter(|(_, &b)| sizes[b] >= need).min_by_key(|(_, &b)| sizes[b]).map(|(j, _)| j);
                buffer_of[i] = match pick.or_else(|| (!free.is_empty()).then(|| (0..free.len()).max_by_key(|&j| sizes[free[j]]).unwrap_or(0))) {
                    Some(j) => {
                        let b = free.swap_remove(j);
                        sizes[b] = sizes[b].max(need);
                        b
                    }
                    None => {
                        sizes.push(need);
                        sizes.len() - 1
                    }
                };
            }
            for i in (0..n).filter(|&i| last[i] == at) {
                free.push(buffer_of[i]);
            }
        }
        let max_binding = dev.limits.max_storage_buffer_binding_size as usize;
        if let Some(s) = sizes.iter().find(|&&s| s > max_binding) {
            return Err(Error::Unsupported(format!("a GPU tensor of {s} bytes exceeds the adapter's binding limit of {max_binding}").into()));
        }
        let buffers: Vec<wgpu::Buffer> = sizes.iter().enumerate().map(|(i, &s)| dev.storage(&format!("segment buffer {i}"), s as u64)).collect();
        let buf = |key: usize| -> Result<usize> {
            bytes_of
                .iter()
                .position(|&(k, _)| k == key)
                .map(|i| buffer_of[i])
                .ok_or_else(|| Error::Runtime(format!("internal: GPU tensor {key} has no buffer").into()))
        };
        let mut passes = Vec::new();
        let mut runs = Vec::with_capacity(members.len());
        for member in members {
            let size = |key: usize| bytes_of.iter().find(|e| e.0 == key).map_or(0, |e| e.1);
            let inputs = member.inputs.iter().map(|k| k.map(|k| Ok((buf(k)?, size(k)))).transpose()).collect::<Result<Vec<_>>>()?;
            let outputs = member.outputs.iter().map(|&k| Ok((buf(k)?, size(k)))).collect::<Result<Vec<_>>>()?;
            let start = passes.len();
            for d in &member.op.dispatches {
                let mut entries = vec![wgpu::BindGroupEntry { binding: 0, resource: d.params.as_entire_binding() }];
                for (j, b) in d.binds.iter().enumerate() {
                    let buffer: &wgpu::Buffer = match b {
                        Bind::In(k) => {
                            let key = member.inputs.get(*k).copied().flatten().ok_or_else(|| Error::Runtime("internal: GPU input unbound".into()))?;
                            &buffers[buf(key)?]
                        }
                        Bind::Out(k) => &buffers[buf(*member.outputs.get(*k).ok_or_else(|| Error::Runtime("internal: GPU output unbound".into()))?)?],
                        Bind::Const(c) => c,
                        Bind::Zero => &dev.zeros,
                    };
                    entries.push(wgpu::BindGroupEntry { binding: j as u32 + 1, resource: buffer.as_entire_binding() });
                }
                let layout = d.pipeline.get_bind_group_layout(0);
                let group = dev.device.create_bind_group(&wgpu::BindGroupDescriptor { label: None, layout: &layout, entries: &entries });
                passes.push((d.pipeline.clone(), group, d.groups));
            }
            runs.push(MemberRun { passes: start..passes.len(), inputs, outputs });
        }
        let ins = inputs.iter().map(|&k| Ok((buf(k)?, bytes_of.iter().find(|e| e.0 == k).map_or(0, |e| e.1)))).collect::<Result<Vec<_>>>()?;
        let mut offset = 0u64;
        let mut outs = Vec::with_capacity(outputs.len());
        for &k in outputs {
            let bytes = bytes_of.iter().find(|e| e.0 == k).map_or(0, |e| e.1);
            outs.push((buf(k)?, bytes, offset));
            offset += (bytes as u64).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
        }
        // Three timestamps (24 bytes) resolved after the outputs in the staging
        // buffer: the compute pass's start and end, and the start of an empty pass
        // after the copies into the staging buffer (the GPU side of the readback).
        let timestamps = (offset > 0 && dev.adapter.timestamps).then(|| {
            let set = dev.device.create_query_set(&wgpu::QuerySetDescriptor { label: Some("segment time"), ty: wgpu::QueryType::Timestamp, count: 3 });
            let resolve = dev.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("segment time"),
                size: 24,
                usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            });
            let at = offset;
            offset += 24;
            (set, resolve, at)
        });
        let staging = (offset > 0).then(|| {
            dev.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("readback"),
                size: offset,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        if let Some(e) = dev.take_uncaptured() {
            return Err(Error::Runtime(format!("GPU: {e}").into()));
        }
        let memory = GpuMemory { buffer_bytes: sizes.iter().sum(), lower_bound_bytes: lower };
        let half = members.first().is_some_and(|m| m.op.half);
        Ok(Segment {
            dev,
            buffers,
            inputs: ins,
            outputs: outs,
            passes,
            staging,
            memory,
            half,
            scratch: Vec::new(),
            times: Arc::default(),
            timestamps,
            members: runs,
        })
    }

    /// Uploads the segment's inputs (`ins`, in the order the kernel receives them;
    /// float32 on the host, converted here when the segment stores float16).
    fn upload(&mut self, ins: &[Option<&[u8]>]) -> Result<()> {
        let dev = &*self.dev;
        for (k, &(b, bytes)) in self.inputs.iter().enumerate() {
            let data = ins.get(k).copied().flatten().ok_or_else(|| Error::Runtime(format!("GPU segment input {k} is missing").into()))?;
            let host = if self.half { bytes * 2 } else { bytes };
            if data.len() != host {
                return Err(Error::Runtime(format!("GPU segment input {k} has {} bytes, expected {host}", data.len()).into()));
            }
            if bytes == 0 {
                continue;
            }
            if self.half {
                // Transfers are whole words: an odd element count gets a zero pad.
                self.scratch.clear();
                self.scratch.extend(data.chunks_exact(4).flat_map(|c| half::f16::from_f32(f32::from_le_bytes([c[0], c[1], c[2], c[3]])).to_le_bytes()));
                self.scratch.resize(bytes.next_multiple_of(4), 0);
                dev.queue.write_buffer(&self.buffers[b], 0, &self.scratch);
            } else {
                dev.queue.write_buffer(&self.buffers[b], 0, data);
            }
        }
        Ok(())
    }

    /// Submits `passes`, then copies `read` ((buffer, bytes) each) to the host and
    /// waits for both; without `read`, only waits for the passes to finish.
    fn submit_and_read(&self, passes: std::ops::Range<usize>, read: &[(usize, usize)]) -> Result<Vec<Vec<u8>>> {
        let dev = &*self.dev;
        let scope = dev.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let mut encoder = dev.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("segment op") });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes: None });
            for (pipeline, group, groups) in self.passes.get(passes).unwrap_or(&[]) {
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, group, &[]);
                pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
            }
        }
        let align = wgpu::COPY_BUFFER_ALIGNMENT;
        let total: u64 = read.iter().map(|&(_, b)| (b as u64).next_multiple_of(align)).sum();
        // Made per call: only observed runs come here.
        let staging = (total > 0).then(|| {
            dev.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("op readback"),
                size: total,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        });
        if let Some(staging) = &staging {
            let mut off = 0;
            for &(b, bytes) in read {
                let len = (bytes as u64).next_multiple_of(align);
                if len > 0 {
                    encoder.copy_buffer_to_buffer(&self.buffers[b], 0, staging, off, len);
                }
                off += len;
            }
        }
        dev.queue.submit([encoder.finish()]);
        let mapped = match &staging {
            Some(staging) => Some(map_for_read(dev, staging)?),
            None => {
                dev.device.poll(wgpu::PollType::Wait { submission_index: None, timeout: None }).map_err(|e| Error::Runtime(format!("GPU: {e}").into()))?;
                None
            }
        };
        let mut out = Vec::with_capacity(read.len());
        if let Some(staging) = &staging {
            if !matches!(mapped, Some(Some(Ok(())))) {
                let e = pollster::block_on(scope.pop());
                return Err(Error::Runtime(format!("GPU readback failed: {mapped:?} {e:?}").into()));
            }
            {
                let view = staging.slice(..).get_mapped_range();
                let mut off = 0usize;
                for &(_, bytes) in read {
                    let from = &view[off..off + bytes];
                    out.push(if self.half {
                        from.chunks_exact(2).flat_map(|h| half::f16::from_le_bytes([h[0], h[1]]).to_f32().to_le_bytes()).collect()
                    } else {
                        from.to_vec()
                    });
                    off += (bytes as u64).next_multiple_of(align) as usize;
                }
            }
            staging.unmap();
        }
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Runtime(format!("GPU: {e}").into()));
        }
        if let Some(e) = dev.take_uncaptured() {
            return Err(Error::Runtime(format!("GPU: {e}").into()));
        }
        Ok(out)
    }

    /// Uploads `ins`, runs every dispatch in one submission and reads the outputs
    /// back into `outs`.
    pub(crate) fn run(&mut self, ins: &[Option<&[u8]>], outs: &mut [&mut [u8]]) -> Result<()> {
        // A handle of its own: the upload below borrows `self` mutably (its scratch).
        let dev = self.dev.clone();
        let dev = &*dev;
        let scope = dev.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let t_upload = Instant::now();
        self.upload(ins)?;
        let upload_ns = ns(t_upload);
        let t_gpu = Instant::now();
        let mut encoder = dev.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("segment") });
        {
            let timestamp_writes = self.timestamps.as_ref().map(|(set, _, _)| wgpu::ComputePassTimestampWrites {
                query_set: set,
                beginning_of_pass_write_index: Some(0),
                end_of_pass_write_index: Some(1),
            });
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: None, timestamp_writes });
            for (pipeline, group, groups) in &self.passes {
                pass.set_pipeline(pipeline);
                pass.set_bind_group(0, group, &[]);
                pass.dispatch_workgroups(groups[0], groups[1], groups[2]);
            }
        }
        if let Some(staging) = &self.staging {
            for &(b, bytes, off) in &self.outputs {
                let len = (bytes as u64).next_multiple_of(wgpu::COPY_BUFFER_ALIGNMENT);
                if len > 0 {
                    encoder.copy_buffer_to_buffer(&self.buffers[b], 0, staging, off, len);
                }
            }
            if let Some((set, resolve, at)) = &self.timestamps {
                // Marks the end of the copies above (a pass's start waits for them).
                let timestamp_writes =
                    wgpu::ComputePassTimestampWrites { query_set: set, beginning_of_pass_write_index: Some(2), end_of_pass_write_index: None };
                drop(encoder.begin_compute_pass(&wgpu::ComputePassDescriptor { label: Some("copies done"), timestamp_writes: Some(timestamp_writes) }));
                encoder.resolve_query_set(set, 0..3, resolve, 0);
                encoder.copy_buffer_to_buffer(resolve, 0, staging, *at, 24);
            }
        }
        dev.queue.submit([encoder.finish()]);
        if let Some(staging) = &self.staging {
            let mapped = map_for_read(dev, staging)?;
            let mut gpu_ns = ns(t_gpu);
            // With timestamps, the GPU's copies into the staging buffer (measured on
            // the GPU) count as readback; the host clock cannot tell them apart.
            let mut copy_ns = 0;
            let t_readback = Instant::now();
            if !matches!(mapped, Some(Ok(()))) {
                let e = pollster::block_on(scope.pop());
                return Err(Error::Runtime(format!("GPU readback failed: {mapped:?} {e:?}").into()));
            }
            {
                let view = staging.slice(..).get_mapped_range();
                for (k, &(_, bytes, off)) in self.outputs.iter().enumerate() {
                    let out = outs.get_mut(k).ok_or_else(|| Error::Runtime(format!("GPU segment output {k} is missing").into()))?;
                    let host = if self.half { bytes * 2 } else { bytes };
                    if out.len() != host {
                        return Err(Error::Runtime(format!("GPU segment output {k} has {} bytes, expected {host}", out.len()).into()));
                    }
                    let from = &view[off as usize..off as usize + bytes];
                    if self.half {
                        for (o, h) in out.chunks_exact_mut(4).zip(from.chunks_exact(2)) {
                            o.copy_from_slice(&half::f16::from_le_bytes([h[0], h[1]]).to_f32().to_le_bytes());
                        }
                    } else {
                        out.copy_from_slice(from);
                    }
                }
                if let Some((_, _, at)) = &self.timestamps {
                    let at = *at as usize;
                    let tick = |i: usize| u64::from_le_bytes(view[at + 8 * i..at + 8 * i + 8].try_into().unwrap_or([0; 8]));
                    // Ticks times the queue's period (ns per tick); a reset or
                    // wrapped counter reads as no time rather than a huge one.
                    let period = f64::from(dev.queue.get_timestamp_period());
                    gpu_ns = (tick(1).saturating_sub(tick(0)) as f64 * period) as u64;
                    copy_ns = (tick(2).saturating_sub(tick(1)) as f64 * period) as u64;
                }
            }
            staging.unmap();
            self.times.timestamps.store(self.timestamps.is_some(), Ordering::Relaxed);
            self.times.gpu_ns.fetch_add(gpu_ns, Ordering::Relaxed);
            self.times.readback_ns.fetch_add(copy_ns + ns(t_readback), Ordering::Relaxed);
        }
        self.times.upload_ns.fetch_add(upload_ns, Ordering::Relaxed);
        self.times.runs.fetch_add(1, Ordering::Relaxed);
        if let Some(e) = pollster::block_on(scope.pop()) {
            return Err(Error::Runtime(format!("GPU: {e}").into()));
        }
        if let Some(e) = dev.take_uncaptured() {
            return Err(Error::Runtime(format!("GPU: {e}").into()));
        }
        Ok(())
    }
}

impl OpByOp for Segment {
    fn run_op_by_op(&mut self, ins: &[Option<&[u8]>], outs: &mut [&mut [u8]], read_back: bool, on_op: OnOp<'_>) -> Result<Flow> {
        self.upload(ins)?;
        // Host bytes of a GPU tensor: float32 on the host for float16 on the GPU.
        let half = self.half;
        let host = move |bytes: usize| if half { bytes * 2 } else { bytes };
        // Host copies of the buffers read back so far, by buffer: an op's inputs are
        // the segment's inputs or earlier ops' outputs, read back right after those
        // ran (a buffer is reused only once its tensor is dead).
        let mut held: Vec<Option<Vec<u8>>> = vec![None; self.buffers.len()];
        if read_back {
            for (k, &(b, _)) in self.inputs.iter().enumerate() {
                held[b] = ins.get(k).copied().flatten().map(<[u8]>::to_vec);
            }
        }
        for m in 0..self.members.len() {
            let member = &self.members[m];
            // Copies: `held` changes when the op's outputs come back.
            let op_ins: Vec<Option<Vec<u8>>> = if read_back {
                member.inputs.iter().map(|i| i.and_then(|(b, bytes)| held[b].as_deref().and_then(|d| d.get(..host(bytes))).map(<[u8]>::to_vec))).collect()
            } else {
                Vec::new()
            };
            let op_ins: Vec<Option<&[u8]>> = op_ins.iter().map(Option::as_deref).collect();
            match on_op(m, &op_ins, None) {
                Flow::Continue => {}
                // Not dispatched: its buffers keep what they held.
                Flow::Skip => continue,
                Flow::Stop => return Ok(Flow::Stop),
            }
            let read: &[(usize, usize)] = if read_back { &member.outputs } else { &[] };
            let got = self.submit_and_read(member.passes.clone(), read)?;
            let member = &self.members[m];
            for (&(b, _), data) in member.outputs.iter().zip(got) {
                held[b] = Some(data);
            }
            let op_outs: Vec<&[u8]> = if read_back {
                member.outputs.iter().map(|&(b, bytes)| held[b].as_deref().and_then(|d| d.get(..host(bytes))).unwrap_or(&[])).collect()
            } else {
                Vec::new()
            };
            if on_op(m, &op_ins, Some(&op_outs)) == Flow::Stop {
                return Ok(Flow::Stop);
            }
        }
        // The segment's outputs: read back in one copy, as a plain run does.
        let read: Vec<(usize, usize)> = self.outputs.iter().map(|&(b, bytes, _)| (b, bytes)).collect();
        let got = self.submit_and_read(0..0, &read)?;
        for (k, data) in got.into_iter().enumerate() {
            let out = outs.get_mut(k).ok_or_else(|| Error::Runtime(format!("GPU segment output {k} is missing").into()))?;
            if out.len() != data.len() {
                return Err(Error::Runtime(format!("GPU segment output {k} has {} bytes, expected {}", out.len(), data.len()).into()));
            }
            out.copy_from_slice(&data);
        }
        Ok(Flow::Continue)
    }
}

/// A kernel running one op on its own (a segment of one): used where the compiler
/// leaves a GPU op outside a segment. The segment is made on the first run.
pub(crate) fn standalone(dev: Arc<GpuDevice>, op: Arc<GpuOp>, times: Arc<Times>) -> crate::backend::KernelFn {
    let mut seg: Option<Segment> = None;
    Box::new(move |ins, outs| {
        if seg.is_none() {
            let n_in = op.inputs.len();
            let inputs: Vec<usize> = (0..n_in).filter(|&k| op.inputs[k].is_some()).collect();
            let outputs: Vec<usize> = (0..op.outputs.len()).map(|k| n_in + k).collect();
            let member = Member { op: op.clone(), inputs: (0..n_in).map(|k| op.inputs[k].map(|_| k)).collect(), outputs: outputs.clone() };
            let mut s = Segment::new(dev.clone(), &[member], &inputs, &outputs)?;
            s.times = times.clone();
            seg = Some(s);
        }
        let s = seg.as_mut().ok_or_else(|| Error::Runtime("internal: GPU segment missing".into()))?;
        // The op's run-time inputs only, in input order.
        let picked: Vec<Option<&[u8]>> = (0..op.inputs.len()).filter(|&k| op.inputs[k].is_some()).map(|k| ins.get(k).copied().flatten()).collect();
        s.run(&picked, outs)
    })
}

/// Maps `staging` (its copies submitted) for reading and waits for the mapping's
/// callback: its result, or None if it never came.
///
/// Sessions on several threads share one device, and wgpu runs a mapping's
/// callback on whichever thread polls the device next. This thread's blocking poll
/// can return (its submission done) while another thread's poll, which took the
/// callback, has not run it yet; reading the result right after the poll then saw
/// nothing (a failed readback under concurrent sessions). So the wait is for the
/// callback itself, polling again meanwhile in case no other thread does.
fn map_for_read(dev: &GpuDevice, staging: &wgpu::Buffer) -> Result<Option<std::result::Result<(), wgpu::BufferAsyncError>>> {
    type Slot = (Mutex<Option<std::result::Result<(), wgpu::BufferAsyncError>>>, std::sync::Condvar);
    let done: Arc<Slot> = Arc::new((Mutex::new(None), std::sync::Condvar::new()));
    let flag = done.clone();
    staging.slice(..).map_async(wgpu::MapMode::Read, move |r| {
        if let Ok(mut f) = flag.0.lock() {
            *f = Some(r);
        }
        flag.1.notify_all();
    });
    let poll_err = |e: wgpu::PollError| Error::Runtime(format!("GPU: {e}").into());
    dev.device.poll(wgpu::PollType::Wait { submission_index: None, timeout: None }).map_err(poll_err)?;
    // The callback normally ran in the poll above; another thread's poll runs it
    // within microseconds. The deadline only turns a lost callback into an error.
    let deadline = Instant::now() + std::time::Duration::from_secs(10);
    let mut got = done.0.lock().map_err(|_| Error::Runtime("GPU: readback state poisoned".into()))?;
    while got.is_none() && Instant::now() < deadline {
        got = match done.1.wait_timeout(got, std::time::Duration::from_millis(1)) {
            Ok((g, _)) => g,
            Err(_) => return Err(Error::Runtime("GPU: readback state poisoned".into())),
        };
        if got.is_none() {
            drop(got);
            dev.device.poll(wgpu::PollType::Poll).map_err(poll_err)?;
            got = done.0.lock().map_err(|_| Error::Runtime("GPU: readback state poisoned".into()))?;
        }
    }
    Ok(got.take())
}
