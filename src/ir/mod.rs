//! polycl's own graph: nodes with output ports, a closed `Op` enum, a verifier
//! and a text dump. Frontends build it; passes rewrite it; the planner lowers it.

pub mod dump;
pub mod graph;
pub mod op;
pub mod verify;

pub use graph::{Graph, MemRef, Node, NodeId, Output, Place, TensorType, Value};
pub use op::{BinaryOp, GluKind, GroupRope, Op, RopeMode, RopeParams, RopeRot, UnaryOp};
