//! OpenCL through opencl3: device discovery, queues, buffers, the program cache,
//! kernels (`kernels/*.cl`), quant formats and the executor. The only room with
//! OpenCL `unsafe`.

pub mod addresses;
pub mod binary_cache;
pub mod buffer;
pub mod counters;
pub mod device;
pub mod executor;
pub mod handoff;
pub mod peer;
pub mod profile;
pub mod program;
pub mod quant;
pub mod readback;
pub mod step;
pub mod trace;
pub mod upload;

pub use buffer::{DeviceBuffer, BUFFER_ALIGNMENT};
pub use device::{devices, Device};
