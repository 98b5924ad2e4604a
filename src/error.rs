//! The one error type inside polycl; statuses are made from it at the edges.

use std::fmt;

#[derive(Debug, Clone, PartialEq)]
pub enum Error {
    /// No OpenCL runtime, platform or usable device.
    NoDevice(String),
    /// An OpenCL call failed (call name, status code).
    OpenCl(&'static str, i32),
    /// A kernel launch with a fixed work-group width failed at enqueue: the
    /// kernel, the width asked, what the driver reports for this kernel
    /// (CL_KERNEL_WORK_GROUP_SIZE) and the status.
    Launch {
        kernel: String,
        work_group: usize,
        kernel_limit: Option<usize>,
        status: i32,
    },
    /// A kernel program failed to build; carries the compiler's log.
    Build { program: String, log: String },
    /// The device refused an allocation.
    OutOfMemory {
        device: usize,
        bytes: usize,
        detail: String,
    },
    /// An op or type polycl does not handle.
    Unsupported(String),
    /// A graph that breaks the decoder contract (cycle, dangling input, shape).
    InvalidGraph(String),
    /// Bad argument at an API edge (null pointer, bad value).
    InvalidArgument(String),
    /// A bad configuration value (names the variable).
    Config(String),
    /// A panic caught at the FFI boundary.
    Panic(String),
}

pub type Result<T> = std::result::Result<T, Error>;

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::NoDevice(s) => write!(f, "no usable OpenCL device: {s}"),
            Error::OpenCl(call, code) => write!(f, "OpenCL {call} failed with status {code}"),
            Error::Launch {
                kernel,
                work_group,
                kernel_limit,
                status,
            } => {
                write!(
                    f,
                    "OpenCL clEnqueueNDRangeKernel of {kernel} at {work_group} work-items a group failed with status {status}"
                )?;
                match kernel_limit {
                    Some(l) if l < work_group => {
                        write!(f, "; the driver reports at most {l} for this kernel")
                    }
                    _ => Ok(()),
                }
            }
            Error::Build { program, log } => {
                write!(f, "OpenCL program '{program}' failed to build:\n{log}")
            }
            Error::OutOfMemory {
                device,
                bytes,
                detail,
            } => {
                write!(
                    f,
                    "device POLYCL{device} refused to allocate {bytes} bytes: {detail}"
                )
            }
            Error::Unsupported(s) => write!(f, "unsupported: {s}"),
            Error::InvalidGraph(s) => write!(f, "invalid graph: {s}"),
            Error::InvalidArgument(s) => write!(f, "invalid argument: {s}"),
            Error::Config(s) => write!(f, "bad configuration: {s}"),
            Error::Panic(s) => write!(f, "internal panic: {s}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<opencl3::error_codes::ClError> for Error {
    fn from(e: opencl3::error_codes::ClError) -> Self {
        Error::OpenCl("call", e.0)
    }
}

/// Attaches the OpenCL call name to an opencl3 result.
pub trait ClContext<T> {
    fn cl(self, call: &'static str) -> Result<T>;
}

impl<T> ClContext<T> for std::result::Result<T, opencl3::error_codes::ClError> {
    fn cl(self, call: &'static str) -> Result<T> {
        self.map_err(|e| Error::OpenCl(call, e.0))
    }
}
