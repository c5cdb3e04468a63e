//! The SVG pictures are well-formed XML with one element per thing drawn: the graph
//! (`inspect --svg`, with both layouts) a node per op and model input/output, an
//! edge per tensor and a cluster per fused group; the profile (`bench --profile
//! --svg`) a bar per op type and per slow op; the arena (`--mem-svg`) a rectangle
//! per planned tensor, inside the plot.

use std::path::{Path, PathBuf};
use std::process::Command;

use ferrite_format::schema::TensorType;
use ferrite_format::writer::{Activation, BuiltinOperator as B, ModelSpec, OpCode, Options, Padding, TensorSpec};

fn ferrite() -> Command {
    Command::new(env!("CARGO_BIN_EXE_ferrite"))
}

fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../models/demo.tflite")
}

fn tmp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("ferrite-cli-pictures-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn ok(cmd: &mut Command) -> String {
    let out = cmd.output().expect("the ferrite binary runs");
    let (o, e) = (String::from_utf8_lossy(&out.stdout).to_string(), String::from_utf8_lossy(&out.stderr).to_string());
    assert!(out.status.success(), "{cmd:?} failed:\n{o}\n{e}");
    o
}

/// Counts the elements named `tag` whose class is `class`, after checking the file
/// parses as XML with an `<svg>` root.
fn count(svg: &Path, tag: &str, class: &str) -> usize {
    let text = std::fs::read_to_string(svg).unwrap();
    // Graphviz writes a DOCTYPE; allow it.
    let opts = roxmltree::ParsingOptions { allow_dtd: true, ..Default::default() };
    let doc = roxmltree::Document::parse_with_options(&text, opts).unwrap_or_else(|e| panic!("{}: not well-formed XML: {e}", svg.display()));
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants().filter(|n| n.tag_name().name() == tag && n.attribute("class") == Some(class)).count()
}

/// x -CONV-> RELU -> ADD x': the RELU runs inside the convolution.
fn fused_model(path: &Path) {
    let mut m = ModelSpec::default();
    let x = m.add_tensor(TensorSpec::activation("x", TensorType::FLOAT32, &[1, 6, 6, 3]));
    let wv: Vec<f32> = (0..4 * 9 * 3).map(|i| ((i * 5 % 11) as f32 - 5.0) / 10.0).collect();
    let w = m.add_tensor(TensorSpec::const_f32("w", &[4, 3, 3, 3], &wv));
    let b = m.add_tensor(TensorSpec::const_f32("b", &[4], &[0.1, -0.1, 0.2, 0.0]));
    let c = m.add_tensor(TensorSpec::activation("conv", TensorType::FLOAT32, &[1, 6, 6, 4]));
    let conv = Options::Conv2D { padding: Padding::SAME, stride: (1, 1), dilation: (1, 1), activation: Activation::NONE };
    m.add_op(OpCode::Builtin(B::CONV_2D), &[x, w, b], &[c], conv);
    let y = m.add_tensor(TensorSpec::activation("relu", TensorType::FLOAT32, &[1, 6, 6, 4]));
    m.add_op(OpCode::Builtin(B::RELU), &[c], &[y], Options::None);
    let z = m.add_tensor(TensorSpec::activation("tanh", TensorType::FLOAT32, &[1, 6, 6, 4]));
    m.add_op(OpCode::Builtin(B::TANH), &[y], &[z], Options::None);
    m.inputs = vec![x];
    m.outputs = vec![z];
    std::fs::write(path, m.to_bytes().unwrap()).unwrap();
}

fn dot_installed() -> bool {
    Command::new("dot").arg("-V").output().is_ok_and(|o| o.status.success())
}

#[test]
fn graph_pictures_draw_every_op_tensor_and_fused_group() {
    let d = tmp("graph");
    let model = d.join("fused.tflite");
    fused_model(&model);
    let mut layouts = vec!["builtin"];
    if dot_installed() {
        layouts.push("dot");
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI runs need Graphviz (scripts/test.sh installs it)");
    }
    for layout in layouts {
        // demo: 5 ops in a chain, one input and one output: 7 nodes, 6 edges.
        let svg = d.join(format!("demo-{layout}.svg"));
        let out = ok(ferrite().arg("inspect").arg(demo()).arg("--svg").arg(&svg).args(["--layout", layout]));
        assert!(out.contains(&format!("layout {layout}")), "{out}");
        assert_eq!(count(&svg, "g", "node"), 7, "{layout}");
        assert_eq!(count(&svg, "g", "edge"), 6, "{layout}");
        assert_eq!(count(&svg, "g", "cluster"), 0, "{layout}");
        let text = std::fs::read_to_string(&svg).unwrap();
        assert!(text.contains("DEPTHWISE_CONV_2D") && text.contains("1x16x16x8"), "{layout}: op types and output shapes are drawn");
        // The fused model: CONV and the RELU inside it form one group.
        let svg = d.join(format!("fused-{layout}.svg"));
        ok(ferrite().arg("inspect").arg(&model).arg("--svg").arg(&svg).args(["--layout", layout]));
        assert_eq!(count(&svg, "g", "node"), 5, "{layout}");
        assert_eq!(count(&svg, "g", "edge"), 4, "{layout}");
        assert_eq!(count(&svg, "g", "cluster"), 1, "{layout}");
        assert!(std::fs::read_to_string(&svg).unwrap().contains("fused into #0"));
    }
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn profile_and_memory_pictures_have_a_bar_per_type_and_op_and_a_block_per_tensor() {
    let d = tmp("bench");
    let (profile, mem) = (d.join("profile.svg"), d.join("mem.svg"));
    ok(ferrite().arg("bench").arg(demo()).args(["--runs", "3", "--warmup", "1", "--profile", "--svg"]).arg(&profile).arg("--mem-svg").arg(&mem));
    // Five op types of one op each, and the five slowest ops.
    assert_eq!(count(&profile, "rect", "bar"), 10);
    let text = std::fs::read_to_string(&profile).unwrap();
    assert!(text.contains("CONV_2D (1 op)") && text.contains('%'), "bars carry their type, time and share");
    // The demo's plan: the input, four intermediates and the output.
    assert_eq!(count(&mem, "rect", "block"), 6);
    let m = ok(ferrite().arg("inspect").arg(demo()).arg("--mem-svg").arg(d.join("mem2.svg")));
    assert!(m.is_empty(), "inspect --mem-svg alone prints nothing on stdout: {m}");
    assert_eq!(std::fs::read(&mem).unwrap(), std::fs::read(d.join("mem2.svg")).unwrap(), "bench and inspect draw the same plan");
    // --svg on bench needs --profile.
    assert!(!ferrite().arg("bench").arg(demo()).arg("--svg").arg(d.join("x.svg")).output().unwrap().status.success());
    std::fs::remove_dir_all(&d).ok();
}
