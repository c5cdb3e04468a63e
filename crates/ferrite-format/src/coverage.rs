//! The coverage report: every builtin of the schema, per element type, as
//! supported (the op table has a kernel), refused (LiteRT has no kernel either) or
//! missing (LiteRT runs it, ferrite does not).
//!
//! Three checked-in files say what LiteRT does: `coverage/litert_builtins.txt`, the
//! builtins LiteRT 2.3.0's default op resolver registers (probed by
//! `tools/litert_builtins.py`); `coverage/litert_types.txt`, per op of the table and
//! element type, whether LiteRT's kernel runs a single-op model of that type (probed by
//! `tools/litert_types.py`, with LiteRT's error where it refuses); and
//! `coverage/gaps.txt`, the written reason for each builtin or element type ferrite
//! does not run that the probes do not settle. A builtin LiteRT does not register is
//! refused for that reason alone; a type its kernel refuses is refused with LiteRT's
//! error; a type it runs and ferrite does not is missing, unless LiteRT only gets
//! through it by undefined behaviour (a gaps line of status `undefined`, counted as
//! refused: FAKE_QUANT on uint8 reads past the tensor). The tests of this module keep
//! the files and the op table consistent: what LiteRT runs and ferrite lacks needs a
//! written reason.

use crate::ops::{BuiltinOp, Types};
use crate::schema::BuiltinOperator;

const LITERT_BUILTINS: &str = include_str!("../coverage/litert_builtins.txt");
const GAPS: &str = include_str!("../coverage/gaps.txt");
const LITERT_TYPES: &str = include_str!("../coverage/litert_types.txt");

/// What the type probe found for one op and element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// LiteRT allocated and invoked the single-op model.
    Runs,
    /// LiteRT stopped it (the line carries its first error line).
    Refuses,
    /// The type has no meaning for the op (a hybrid form of an op without weights).
    NotApplicable,
    /// The probe cannot build a faithful model of that type (the line says why).
    Unprobed,
}

/// One line of `litert_types.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeProbe {
    /// The op, as the schema spells it.
    pub op: String,
    /// The column of [`TYPE_COLUMNS`].
    pub ty: String,
    /// What the probe found.
    pub probe: Probe,
    /// LiteRT's first error line, or why the type does not apply or was not probed.
    pub detail: String,
}

/// The lines of `litert_types.txt`; an ill-formed line is an error naming it.
pub fn litert_types() -> Result<Vec<TypeProbe>, String> {
    let mut out = Vec::new();
    for (n, line) in LITERT_TYPES.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parts: Vec<&str> = line.splitn(4, '|').map(str::trim).collect();
        let (op, ty, status, detail) = match parts[..] {
            [op, ty, status] => (op, ty, status, ""),
            [op, ty, status, detail] => (op, ty, status, detail),
            _ => return Err(format!("litert_types.txt line {}: expected OP | TYPE | STATUS [| DETAIL]", n + 1)),
        };
        let probe = match status {
            "runs" => Probe::Runs,
            "refuses" => Probe::Refuses,
            "n/a" => Probe::NotApplicable,
            "unprobed" => Probe::Unprobed,
            s => return Err(format!("litert_types.txt line {}: unknown status '{s}'", n + 1)),
        };
        if !TYPE_COLUMNS.iter().any(|c| c.0 == ty) {
            return Err(format!("litert_types.txt line {}: unknown type '{ty}'", n + 1));
        }
        if probe != Probe::Runs && detail.is_empty() {
            return Err(format!("litert_types.txt line {}: {status} without a reason", n + 1));
        }
        out.push(TypeProbe { op: op.into(), ty: ty.into(), probe, detail: detail.into() });
    }
    Ok(out)
}

/// LiteRT's error line without the node suffix it appends to every message.
fn litert_reason(detail: &str) -> String {
    let cut = detail.find("Node number").map_or(detail, |i| &detail[..i]).trim();
    let cut = if cut.is_empty() { detail } else { cut };
    format!("LiteRT refuses it: {cut}")
}

/// The element-type columns of the report, with the op-table types that cover each.
pub const TYPE_COLUMNS: [(&str, Types); 6] =
    [("float32", Types::F32), ("int8", Types::I8), ("uint8", Types::U8), ("int16x8", Types::I16), ("hybrid", Types::HYBRID), ("int", Types::INT)];

/// How ferrite stands on one builtin and element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The op table has a kernel (or the executor runs the op).
    Supported,
    /// LiteRT refuses it too: not registered, or no kernel for the type.
    Refused,
    /// LiteRT runs it and ferrite does not.
    Missing,
}

impl Status {
    /// One word for tables and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Status::Supported => "supported",
            Status::Refused => "refused",
            Status::Missing => "missing",
        }
    }
}

/// One builtin of the schema in the report.
#[derive(Debug, Clone)]
pub struct OpCoverage {
    /// The name as the schema spells it.
    pub name: &'static str,
    /// The builtin code.
    pub code: i32,
    /// True when LiteRT's default resolver registers it.
    pub litert: bool,
    /// Per column of [`TYPE_COLUMNS`]: the status and, where not supported, why.
    pub types: Vec<(Status, Option<String>)>,
}

impl OpCoverage {
    /// The op's overall status: supported when any type is, else missing when any
    /// type is, else refused.
    pub fn status(&self) -> Status {
        let has = |s: Status| self.types.iter().any(|t| t.0 == s);
        if has(Status::Supported) {
            Status::Supported
        } else if has(Status::Missing) {
            Status::Missing
        } else {
            Status::Refused
        }
    }

    /// The reason given for the op as a whole, when it is not supported.
    pub fn reason(&self) -> Option<&str> {
        if self.status() == Status::Supported {
            return None;
        }
        self.types.iter().find_map(|t| t.1.as_deref())
    }
}

impl OpCoverage {
    /// Why each type that is not supported is not, one clause per distinct reason
    /// naming its types (`int8, uint8: ...; int: ...`); the bare reason when every
    /// type shares it. Empty when every type is supported.
    pub fn reasons_by_type(&self) -> String {
        let mut groups: Vec<(&str, Vec<&str>)> = Vec::new();
        for (t, &(col, _)) in self.types.iter().zip(TYPE_COLUMNS.iter()) {
            if t.0 == Status::Supported {
                continue;
            }
            let why = t.1.as_deref().unwrap_or("no reason given");
            match groups.iter_mut().find(|g| g.0 == why) {
                Some(g) => g.1.push(col),
                None => groups.push((why, vec![col])),
            }
        }
        if groups.len() == 1 && groups[0].1.len() == TYPE_COLUMNS.len() {
            return groups[0].0.to_string();
        }
        groups.iter().map(|(why, cols)| format!("{}: {why}", cols.join(", "))).collect::<Vec<_>>().join("; ")
    }
}

/// One line of `gaps.txt`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gap {
    /// The op (`*`: every op).
    pub op: String,
    /// The column (`*`: every type).
    pub ty: String,
    /// Refused or missing.
    pub status: Status,
    /// Why.
    pub reason: String,
    /// Written `undefined`: LiteRT's kernel "runs" the type only through undefined
    /// behaviour (it reads or writes past a buffer), so ferrite refuses it although
    /// the type probe saw LiteRT run. Counted as refused.
    pub undefined: bool,
}

/// The lines of `gaps.txt`; an ill-formed line is an error naming it.
pub fn gaps() -> Result<Vec<Gap>, String> {
    let mut out = Vec::new();
    for (n, line) in GAPS.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parts: Vec<&str> = line.splitn(4, '|').map(str::trim).collect();
        let [op, ty, status, reason] = parts[..] else { return Err(format!("gaps.txt line {}: expected OP | TYPE | STATUS | REASON", n + 1)) };
        let (status, undefined) = match status {
            "refused" => (Status::Refused, false),
            "undefined" => (Status::Refused, true),
            "missing" => (Status::Missing, false),
            s => return Err(format!("gaps.txt line {}: status '{s}' is none of refused, undefined, missing", n + 1)),
        };
        if ty != "*" && !TYPE_COLUMNS.iter().any(|c| c.0 == ty) {
            return Err(format!("gaps.txt line {}: unknown type '{ty}'", n + 1));
        }
        if reason.is_empty() {
            return Err(format!("gaps.txt line {}: no reason", n + 1));
        }
        out.push(Gap { op: op.into(), ty: ty.into(), status, reason: reason.into(), undefined });
    }
    Ok(out)
}

/// Names of the builtins LiteRT's default resolver registers (some may be newer
/// than the schema ferrite reads).
pub fn litert_builtins() -> Vec<&'static str> {
    LITERT_BUILTINS.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
}

/// The report: every builtin of the schema (CUSTOM and the code placeholder aside),
/// in code order.
///
/// A type the op table lacks takes, in this order: a `gaps.txt` line for the op and
/// type; the type probe's refusal (LiteRT's error) or inapplicability; for a type
/// LiteRT runs, a `gaps.txt` line for the whole op that says it is missing; for a type
/// not probed, the op's or the type's `gaps.txt` line. Anything else is missing
/// without a reason, which the test fails on.
pub fn report() -> Vec<OpCoverage> {
    let litert = litert_builtins();
    // Ill-formed files show as missing reasons; the tests report the error.
    let gaps = gaps().unwrap_or_default();
    let probes = litert_types().unwrap_or_default();
    let find = |op: &str, ty: &str| gaps.iter().find(|g| g.op == op && g.ty == ty);
    BuiltinOperator::ENUM_VALUES
        .iter()
        .filter(|o| !matches!(**o, BuiltinOperator::CUSTOM | BuiltinOperator::PLACEHOLDER_FOR_GREATER_OP_CODES))
        .filter_map(|o| {
            let name = o.variant_name()?;
            let registered = litert.contains(&name);
            let table = BuiltinOp::from_code(o.0).map(BuiltinOp::types).unwrap_or_default();
            let every = table.contains(Types::ANY) || table.contains(Types::EXECUTOR);
            let types = TYPE_COLUMNS
                .iter()
                .map(|&(col, ty)| {
                    if every || table.contains(ty) {
                        return (Status::Supported, None);
                    }
                    if !registered {
                        return (Status::Refused, Some("LiteRT's default op resolver does not register it".to_string()));
                    }
                    if let Some(g) = find(name, col) {
                        return (g.status, Some(g.reason.clone()));
                    }
                    let probe = probes.iter().find(|p| p.op == name && p.ty == col);
                    match probe.map(|p| p.probe) {
                        Some(Probe::Refuses) => return (Status::Refused, probe.map(|p| litert_reason(&p.detail))),
                        Some(Probe::NotApplicable) => return (Status::Refused, probe.map(|p| format!("no such kernel: {}", p.detail))),
                        Some(Probe::Runs) => {
                            return match find(name, "*").filter(|g| g.status == Status::Missing) {
                                Some(g) => (Status::Missing, Some(g.reason.clone())),
                                None => (Status::Missing, None),
                            }
                        }
                        Some(Probe::Unprobed) | None => {}
                    }
                    match find(name, "*").or_else(|| find("*", col)) {
                        Some(g) => (g.status, Some(g.reason.clone())),
                        None => (Status::Missing, None),
                    }
                })
                .collect();
            Some(OpCoverage { name, code: o.0, litert: registered, types })
        })
        .collect()
}

/// (op, type) entries per status: (supported, refused, missing, missing without a reason).
pub fn type_counts(report: &[OpCoverage]) -> (usize, usize, usize, usize) {
    let all = || report.iter().flat_map(|o| o.types.iter());
    let n = |s: Status| all().filter(|t| t.0 == s).count();
    (n(Status::Supported), n(Status::Refused), n(Status::Missing), all().filter(|t| t.0 == Status::Missing && t.1.is_none()).count())
}

/// Ops per overall status: (supported, refused, missing).
pub fn counts(report: &[OpCoverage]) -> (usize, usize, usize) {
    let n = |s: Status| report.iter().filter(|o| o.status() == s).count();
    (n(Status::Supported), n(Status::Refused), n(Status::Missing))
}

/// The report as Markdown (the second half of `docs/ops.md`).
pub fn markdown() -> String {
    let report = report();
    let (supported, refused, missing) = counts(&report);
    let (t_supported, t_refused, t_missing, _) = type_counts(&report);
    let mut out = format!(
        "## Coverage of the schema's builtins\n\nEvery builtin of the schema ferrite reads, per element type: `yes` (ferrite runs it), \
         `refused` (LiteRT 2.3.0 refuses it too: its default op resolver does not register the op, or it has no kernel for the type), \
         `MISSING` (LiteRT runs it, ferrite does not). `int` is int32/int64/bool. Which types LiteRT's kernels run is probed \
         (`tools/litert_types.py`, recorded in `crates/ferrite-format/coverage/litert_types.txt` with LiteRT's error for each \
         refusal); the other reasons come from `crates/ferrite-format/coverage/gaps.txt`. The reason column gives, per type \
         that is not `yes`, why.\n\n\
         {supported} ops supported, {refused} refused as LiteRT refuses them, {missing} missing; per (op, type): \
         {t_supported} supported, {t_refused} refused, {t_missing} missing.\n\n| op | code | LiteRT | {} | reason |\n|---|---|---|{}---|\n",
        TYPE_COLUMNS.iter().map(|c| c.0).collect::<Vec<_>>().join(" | "),
        "---|".repeat(TYPE_COLUMNS.len()),
    );
    for op in &report {
        let cells: Vec<&str> = op
            .types
            .iter()
            .map(|t| match t.0 {
                Status::Supported => "yes",
                Status::Refused => "refused",
                Status::Missing => "MISSING",
            })
            .collect();
        let reason = op.reasons_by_type();
        out.push_str(&format!("| {} | {} | {} | {} | {reason} |\n", op.name, op.code, if op.litert { "yes" } else { "no" }, cells.join(" | ")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaps_file_is_well_formed_and_not_stale() {
        let gaps = gaps().unwrap();
        let schema: Vec<&str> = BuiltinOperator::ENUM_VALUES.iter().filter_map(|o| o.variant_name()).collect();
        for g in &gaps {
            if g.op == "*" {
                continue;
            }
            assert!(schema.contains(&g.op.as_str()), "gaps.txt names '{}', which is no builtin of the schema", g.op);
            if let Some(op) = BuiltinOp::from_name(&g.op) {
                let t = op.types();
                // An op line (`*`) may stand for the types a table op lacks; a type line
                // for a type the table has is stale.
                let covered = t.contains(Types::ANY) || t.contains(Types::EXECUTOR) || TYPE_COLUMNS.iter().any(|c| c.0 == g.ty && t.contains(c.1));
                assert!(!covered, "gaps.txt gives a reason for {} {}, which the op table supports: remove the line", g.op, g.ty);
            }
        }
    }

    #[test]
    fn every_builtin_litert_runs_is_supported_or_has_a_reason() {
        let report = report();
        let unreasoned: Vec<&str> = report.iter().filter(|o| o.litert && o.status() != Status::Supported && o.reason().is_none()).map(|o| o.name).collect();
        assert!(unreasoned.is_empty(), "builtins LiteRT's default resolver runs, missing from ferrite without a reason in coverage/gaps.txt: {unreasoned:?}");
        // Per element type too: a type LiteRT's kernel runs (or that was not probed)
        // and ferrite lacks needs a written reason.
        let unreasoned_types: Vec<String> = report
            .iter()
            .filter(|o| o.litert)
            .flat_map(|o| {
                o.types
                    .iter()
                    .zip(TYPE_COLUMNS.iter())
                    .filter(|(t, _)| t.0 == Status::Missing && t.1.is_none())
                    .map(move |(_, c)| format!("{} {}", o.name, c.0))
            })
            .collect();
        assert!(
            unreasoned_types.is_empty(),
            "{} (op, type) entries LiteRT runs are missing from ferrite without a reason in coverage/gaps.txt: {unreasoned_types:?}",
            unreasoned_types.len()
        );
        // Every op of the table is in the report as supported.
        for &op in BuiltinOp::ALL {
            let row = report.iter().find(|o| o.code == op.code()).unwrap();
            assert_eq!(row.status(), Status::Supported, "{op}");
        }
    }

    #[test]
    fn type_probe_covers_the_table_and_agrees_with_gaps() {
        let probes = litert_types().unwrap();
        for &op in BuiltinOp::ALL.iter().filter(|op| !op.types().contains(Types::EXECUTOR)) {
            for (col, _) in TYPE_COLUMNS {
                let n = probes.iter().filter(|p| p.op == op.name() && p.ty == col).count();
                assert_eq!(n, 1, "litert_types.txt has {n} lines for {op} {col}: re-run tools/litert_types.py");
            }
        }
        for p in &probes {
            assert!(BuiltinOp::from_name(&p.op).is_some(), "litert_types.txt probes {}, which is not in the op table", p.op);
        }
        // LiteRT is known to run float32 for every op of the table that has a float
        // kernel and a probe; a float refusal would be a malformed probe model.
        for p in probes.iter().filter(|p| p.ty == "float32" && p.probe == Probe::Refuses) {
            let op = BuiltinOp::from_name(&p.op).unwrap();
            assert!(!op.types().contains(Types::F32), "LiteRT refuses the float32 probe of {}: {} (a probe bug?)", p.op, p.detail);
        }
        // A written reason for a type the probe settles is stale: one saying refused
        // where LiteRT runs it is wrong, one for a type LiteRT refuses repeats it.
        for g in gaps().unwrap().iter().filter(|g| g.op != "*" && g.ty != "*") {
            if let Some(p) = probes.iter().find(|p| p.op == g.op && p.ty == g.ty) {
                // `undefined` is the one refusal a run can stand beside: LiteRT got through
                // its model by undefined behaviour, which is no kernel to match.
                assert!(
                    !(g.status == Status::Refused && !g.undefined && p.probe == Probe::Runs),
                    "gaps.txt says LiteRT refuses {} {}, but the probe runs it",
                    g.op,
                    g.ty
                );
                assert!(
                    !g.undefined || p.probe == Probe::Runs,
                    "gaps.txt says LiteRT runs {} {} by undefined behaviour, but the probe does not run it",
                    g.op,
                    g.ty
                );
                assert!(
                    !matches!(p.probe, Probe::Refuses | Probe::NotApplicable),
                    "gaps.txt gives a reason for {} {}, which the probe settles ({}): remove the line",
                    g.op,
                    g.ty,
                    p.detail
                );
            }
        }
    }

    #[test]
    fn litert_list_names_builtins() {
        let names = litert_builtins();
        assert!(names.len() > 100, "litert_builtins.txt lists {} builtins", names.len());
        assert!(names.contains(&"CONV_2D") && !names.contains(&"CUSTOM"));
    }

    #[test]
    fn statuses_follow_the_rules() {
        let report = report();
        let row = |n: &str| report.iter().find(|o| o.name == n).unwrap();
        // A table op with ANY types is supported in every column.
        assert!(row("RESHAPE").types.iter().all(|t| t.0 == Status::Supported));
        // Not registered by LiteRT: refused everywhere, with that reason.
        let call = row("CALL");
        assert!(!call.litert && call.status() == Status::Refused && call.reason().is_some());
        // The hybrid wildcard: LiteRT has no hybrid SOFTMAX.
        let softmax = row("SOFTMAX");
        assert_eq!(softmax.types[4].0, Status::Refused);
        assert_eq!(softmax.types[0].0, Status::Supported);
    }
}
