//! A stable text form of a graph, used by translator tests and debug logs.

use super::graph::{Graph, Place};
use std::fmt::Write;

pub fn dump(g: &Graph) -> String {
    let mut s = String::new();
    for (i, n) in g.nodes.iter().enumerate() {
        let ins: Vec<String> = n
            .inputs
            .iter()
            .map(|v| format!("%{}:{}", v.node, v.port))
            .collect();
        let outs: Vec<String> = n
            .outputs
            .iter()
            .map(|o| {
                let mut ne: Vec<String> =
                    o.ty.ne
                        .iter()
                        .map(|d| if *d < 0 { "?".into() } else { d.to_string() })
                        .collect();
                if o.ty.has_dynamic_rank() {
                    ne = vec!["...".into()];
                }
                let place = match o.place {
                    Place::Bound(_) => "",
                    Place::Internal => " internal",
                };
                format!("{}[{}]{}", o.ty.dtype.name(), ne.join(","), place)
            })
            .collect();
        let _ = writeln!(
            s,
            "%{i} = {}({}) -> {}  # {}",
            op_text(&n.op),
            ins.join(", "),
            outs.join(", "),
            n.name
        );
    }
    let res: Vec<String> = g
        .results
        .iter()
        .map(|v| format!("%{}:{}", v.node, v.port))
        .collect();
    let _ = writeln!(s, "results: {}", res.join(", "));
    s
}

fn op_text(op: &super::op::Op) -> String {
    use super::op::Op::*;
    match op {
        Scale { scale, bias } => format!("Scale{{s={scale},b={bias}}}"),
        RmsNorm { eps } | Norm { eps } => format!("{}{{eps={eps:e}}}", op.kind()),
        Glu { swapped, .. } => format!("{}{{swapped={swapped}}}", op.kind()),
        Rope(p) => format!(
            "Rope{{{:?},n_dims={},base={}}}",
            p.mode, p.n_dims, p.freq_base
        ),
        SoftMax {
            scale, max_bias, ..
        } => format!("SoftMax{{scale={scale},max_bias={max_bias}}}"),
        FlashAttn {
            scale,
            max_bias,
            softcap,
            rotation,
            ..
        } => {
            let rot = match rotation {
                0 => String::new(),
                n => format!(",rotation={n}"),
            };
            format!("FlashAttn{{scale={scale},max_bias={max_bias},softcap={softcap}{rot}}}")
        }
        Concat { dim } => format!("Concat{{dim={dim}}}"),
        Constant { data } => format!("Constant{{{} bytes}}", data.len()),
        ReadValue { variable } | Assign { variable } => format!("{}{{{variable}}}", op.kind()),
        Gather { axis } => format!("Gather{{axis={axis}}}"),
        ViewAs(super::op::ViewRule::Permute(a)) => {
            format!("Permute{{{},{},{},{}}}", a[0], a[1], a[2], a[3])
        }
        ViewAs(super::op::ViewRule::Offset(o)) => format!("ViewAt{{offset={o}}}"),
        _ => op.kind().to_string(),
    }
}
