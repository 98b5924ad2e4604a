//! Running a converted graph (the C decoder path): `Compiled` holds the graph
//! with its constants (weights) uploaded to each device of a list; a `Request`
//! holds inputs, state variables and plans for one device. Each infer resolves
//! dynamic dims from the inputs and the variables' extents, builds (or reuses)
//! the plan for that shape set, moves state in with device copies, runs, and
//! commits every Assign into the variable's storage.

use super::internal::{nbytes, place, resolve, Env, HostTensor, Placed};
use super::Plan;
use crate::error::{Error, Result};
use crate::ir::{Graph, MemRef, Op, Place, TensorType};
use crate::runtime::{Device, DeviceBuffer, BUFFER_ALIGNMENT};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

/// Plans kept per request (one per shape set: a stateful decode grows by one
/// step each call, so only recent shapes are worth keeping).
const PLANS_PER_REQUEST: usize = 4;

pub struct Compiled {
    /// Per device: the graph with constants bound to device memory.
    targets: Vec<Target>,
}

struct Target {
    device: Arc<Device>,
    graph: Graph,
    weights: Option<Arc<DeviceBuffer>>,
}

impl Drop for Target {
    fn drop(&mut self) {
        if let Some(w) = &self.weights {
            DeviceBuffer::release(w.base);
        }
    }
}

impl Compiled {
    /// Uploads the constants of `g` to every device in `devices`.
    pub fn new(g: &Graph, devices: &[Arc<Device>]) -> Result<Arc<Compiled>> {
        if devices.is_empty() {
            return Err(Error::InvalidArgument(
                "compile needs at least one device".into(),
            ));
        }
        crate::ir::verify::verify(g)?;
        if let Some(n) = g.nodes.iter().find(|n| n.op == Op::SetRows) {
            return Err(Error::InvalidGraph(format!(
                "SetRows '{}' was not lowered by any pass",
                n.name
            )));
        }
        let align = BUFFER_ALIGNMENT as u64;
        let mut offsets = Vec::new();
        let mut total = 0u64;
        for n in &g.nodes {
            if let Op::Constant { data } = &n.op {
                offsets.push(Some(total));
                total += (data.len() as u64).div_ceil(align) * align;
            } else {
                offsets.push(None);
            }
        }
        let mut targets = Vec::new();
        for d in devices {
            let weights = DeviceBuffer::alloc(d, total.max(1) as usize)?;
            let mut graph = g.clone();
            let mut target = Target {
                device: d.clone(),
                graph: Graph::default(),
                weights: Some(weights.clone()),
            };
            for (i, n) in g.nodes.iter().enumerate() {
                if let (Op::Constant { data }, Some(off)) = (&n.op, offsets[i]) {
                    weights.write(off as usize, data)?;
                    graph.nodes[i].outputs[0].place = Place::Bound(MemRef {
                        buffer: weights.base,
                        offset: off,
                    });
                }
            }
            target.graph = graph;
            targets.push(target);
        }
        Ok(Arc::new(Compiled { targets }))
    }

    pub fn devices(&self) -> usize {
        self.targets.len()
    }

    pub fn graph(&self) -> &Graph {
        &self.targets[0].graph
    }
}

/// A variable's current value: contiguous, in a device buffer of its own.
struct State {
    ty: TensorType,
    buf: DeviceBuffer,
}

struct Entry {
    key: Vec<[i64; 4]>,
    placed: Placed,
    plan: Arc<Plan>,
}

pub struct Request {
    compiled: Arc<Compiled>,
    slot: usize,
    inputs: HashMap<String, HostTensor>,
    state: HashMap<String, State>,
    plans: Vec<Rc<Entry>>,
    last: Option<Rc<Entry>>,
}

/// Dims padded to 4 from a rank and a dim list.
fn pad(rank: usize, dims: &[i64; 4]) -> [i64; 4] {
    let mut ne = [1i64; 4];
    ne[..rank].copy_from_slice(&dims[..rank]);
    ne
}

fn read_tensor(at: MemRef, ty: &TensorType) -> Result<Vec<u8>> {
    let n = nbytes(ty) as usize;
    if n == 0 {
        return Ok(Vec::new());
    }
    let buf = DeviceBuffer::by_base(at.buffer)
        .ok_or_else(|| Error::InvalidGraph("an output's memory was released".into()))?;
    if ty.is_contiguous() {
        let mut out = vec![0u8; n];
        buf.read(at.offset as usize, &mut out)?;
        return Ok(out);
    }
    if ty.dtype.block_elems() != 1 {
        return Err(Error::Unsupported(format!(
            "reading a strided {} tensor",
            ty.dtype.name()
        )));
    }
    let span = ty.span_bytes() as usize;
    let mut raw = vec![0u8; span];
    buf.read(at.offset as usize, &mut raw)?;
    let es = ty.dtype.block_bytes();
    let mut out = Vec::with_capacity(n);
    for i3 in 0..ty.ne[3] as u64 {
        for i2 in 0..ty.ne[2] as u64 {
            for i1 in 0..ty.ne[1] as u64 {
                for i0 in 0..ty.ne[0] as u64 {
                    let o =
                        (i0 * ty.nb[0] + i1 * ty.nb[1] + i2 * ty.nb[2] + i3 * ty.nb[3]) as usize;
                    out.extend_from_slice(&raw[o..o + es]);
                }
            }
        }
    }
    Ok(out)
}

impl Request {
    pub fn new(compiled: Arc<Compiled>, slot: usize) -> Result<Request> {
        if slot >= compiled.targets.len() {
            return Err(Error::InvalidArgument(format!(
                "device slot {slot}: the model was compiled for {} devices",
                compiled.targets.len()
            )));
        }
        Ok(Request {
            compiled,
            slot,
            inputs: HashMap::new(),
            state: HashMap::new(),
            plans: Vec::new(),
            last: None,
        })
    }

    fn target(&self) -> &Target {
        &self.compiled.targets[self.slot]
    }

    /// Sets graph input `name`: `rank` dims in ggml order, contiguous bytes of
    /// the input's declared type.
    pub fn set_input(&mut self, name: &str, rank: i32, dims: &[i64; 4], data: &[u8]) -> Result<()> {
        let g = &self.target().graph;
        let n = g
            .nodes
            .iter()
            .find(|n| n.op == Op::Parameter && n.name == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("the model has no input named '{name}'"))
            })?;
        if !(1..=4).contains(&rank) {
            return Err(Error::InvalidArgument(format!(
                "input '{name}': rank {rank}, expected 1 to 4"
            )));
        }
        let ne = pad(rank as usize, dims);
        if ne.iter().any(|&d| d < 0) {
            return Err(Error::InvalidArgument(format!(
                "input '{name}': dims {ne:?} must be known (>= 0)"
            )));
        }
        let decl = &n.outputs[0].ty;
        if !decl.has_dynamic_rank() && (0..4).any(|d| decl.ne[d] >= 0 && decl.ne[d] != ne[d]) {
            return Err(Error::InvalidArgument(format!(
                "input '{name}': dims {ne:?} do not fit its declared dims {:?} (-1 is dynamic)",
                decl.ne
            )));
        }
        let want = nbytes(&TensorType::contiguous(decl.dtype, ne));
        if data.len() as u64 != want {
            return Err(Error::InvalidArgument(format!(
                "input '{name}': {} bytes for {} {ne:?}, expected {want}",
                data.len(),
                decl.dtype.name()
            )));
        }
        self.inputs.insert(
            name.to_string(),
            HostTensor {
                ne,
                data: data.to_vec(),
            },
        );
        Ok(())
    }

    pub fn infer(&mut self) -> Result<()> {
        let target = &self.compiled.targets[self.slot];
        let vars: HashMap<String, [i64; 4]> = self
            .state
            .iter()
            .map(|(k, s)| (k.clone(), s.ty.ne))
            .collect();
        let resolved = resolve(
            &target.graph,
            &Env {
                inputs: &self.inputs,
                variables: &vars,
            },
        )?;
        let key = resolved.key();
        let entry = match self.plans.iter().position(|e| e.key == key) {
            Some(i) => {
                let e = self.plans.remove(i);
                self.plans.push(e.clone());
                e
            }
            None => {
                let placed = place(&target.graph, &resolved, &target.device)?;
                let plan = Arc::new(Plan::build(&placed.graph, &target.device)?);
                let e = Rc::new(Entry { key, placed, plan });
                if self.plans.len() >= PLANS_PER_REQUEST {
                    self.plans.remove(0);
                }
                self.plans.push(e.clone());
                e
            }
        };
        let arena = &entry.placed.arena;
        for (name, at, ty) in &entry.placed.inputs {
            if let Some(h) = self.inputs.get(name) {
                debug_assert_eq!(h.data.len() as u64, nbytes(ty));
                arena.write(at.offset as usize, &h.data)?;
            }
        }
        for r in &entry.placed.reads {
            let bytes = nbytes(&r.ty) as usize;
            if bytes == 0 {
                continue;
            }
            match self.state.get(&r.variable) {
                Some(s) => s.buf.copy_to(0, arena, r.at.offset as usize, bytes)?,
                None => {
                    let init = DeviceBuffer::by_base(r.init.buffer).ok_or_else(|| {
                        Error::InvalidGraph(format!("initial value of '{}' is gone", r.variable))
                    })?;
                    init.copy_to(r.init.offset as usize, arena, r.at.offset as usize, bytes)?;
                }
            }
        }
        entry.plan.run()?;
        let mut next = Vec::new();
        for (var, at, ty) in &entry.placed.assigns {
            let bytes = nbytes(ty) as usize;
            let buf = DeviceBuffer::alloc_scratch(&target.device, bytes.max(1))?;
            let src = DeviceBuffer::by_base(at.buffer).ok_or_else(|| {
                Error::InvalidGraph(format!("the value assigned to '{var}' is gone"))
            })?;
            src.copy_to(at.offset as usize, &buf, 0, bytes)?;
            next.push((
                var.clone(),
                State {
                    ty: TensorType::contiguous(ty.dtype, ty.ne),
                    buf,
                },
            ));
        }
        target.device.synchronize()?;
        self.state.extend(next);
        self.last = Some(entry);
        Ok(())
    }

    /// Output `name` of the last infer: its type (contiguous) and bytes.
    pub fn output(&self, name: &str) -> Result<(TensorType, Vec<u8>)> {
        let last = self
            .last
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument("no infer has run yet".into()))?;
        let (_, at, ty) = last
            .placed
            .results
            .iter()
            .find(|(n, _, _)| n == name)
            .ok_or_else(|| {
                Error::InvalidArgument(format!("the model has no output named '{name}'"))
            })?;
        Ok((
            TensorType::contiguous(ty.dtype, ty.ne),
            read_tensor(*at, ty)?,
        ))
    }

    /// Forgets every variable's value: the next infer reads initial values.
    pub fn reset_state(&mut self) {
        self.state.clear();
    }

    /// Variable `id`'s current value (its initial value when none was committed).
    pub fn state(&self, id: &str) -> Result<(TensorType, Vec<u8>)> {
        let g = &self.target().graph;
        let read = g
            .nodes
            .iter()
            .find(|n| matches!(&n.op, Op::ReadValue { variable } if variable == id))
            .ok_or_else(|| Error::InvalidArgument(format!("the model has no variable '{id}'")))?;
        if let Some(s) = self.state.get(id) {
            let mut out = vec![0u8; nbytes(&s.ty) as usize];
            if !out.is_empty() {
                s.buf.read(0, &mut out)?;
            }
            return Ok((s.ty.clone(), out));
        }
        let init = &g.nodes[read.inputs[0].node];
        match (&init.op, &init.outputs[0].ty) {
            (Op::Constant { data }, ty) => Ok((ty.clone(), data.to_vec())),
            _ => Err(Error::Unsupported(format!(
                "variable '{id}' has a computed initial value"
            ))),
        }
    }
}
