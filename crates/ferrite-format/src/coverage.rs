//! The coverage report: every builtin of the schema, per element type, as
//! supported (the op table has a kernel), refused (LiteRT has no kernel either) or
//! missing (LiteRT runs it, ferrite does not).
//!
//! Two checked-in files say what LiteRT does: `coverage/litert_builtins.txt`, the
//! builtins LiteRT 2.3.0's default op resolver registers (probed by
//! `tools/litert_builtins.py`), and `coverage/gaps.txt`, the written reason for each
//! builtin or element type ferrite does not run. A builtin LiteRT does not register
//! is refused for that reason alone. The test of this module keeps the two files and
//! the op table consistent: a registered builtin that the table lacks needs a reason.

use crate::ops::{BuiltinOp, Types};
use crate::schema::BuiltinOperator;

const LITERT_BUILTINS: &str = include_str!("../coverage/litert_builtins.txt");
const GAPS: &str = include_str!("../coverage/gaps.txt");

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
        let status = match status {
            "refused" => Status::Refused,
            "missing" => Status::Missing,
            s => return Err(format!("gaps.txt line {}: status '{s}' is neither refused nor missing", n + 1)),
        };
        if ty != "*" && !TYPE_COLUMNS.iter().any(|c| c.0 == ty) {
            return Err(format!("gaps.txt line {}: unknown type '{ty}'", n + 1));
        }
        if reason.is_empty() {
            return Err(format!("gaps.txt line {}: no reason", n + 1));
        }
        out.push(Gap { op: op.into(), ty: ty.into(), status, reason: reason.into() });
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
pub fn report() -> Vec<OpCoverage> {
    let litert = litert_builtins();
    // An ill-formed gaps file shows as missing reasons; the test reports the error.
    let gaps = gaps().unwrap_or_default();
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
                    match find(name, col).or_else(|| find(name, "*")).or_else(|| find("*", col)) {
                        Some(g) => (g.status, Some(g.reason.clone())),
                        None => (Status::Missing, None),
                    }
                })
                .collect();
            Some(OpCoverage { name, code: o.0, litert: registered, types })
        })
        .collect()
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
    let mut out = format!(
        "## Coverage of the schema's builtins\n\nEvery builtin of the schema ferrite reads, per element type: `yes` (ferrite runs it), \
         `refused` (LiteRT 2.3.0 refuses it too: its default op resolver does not register the op, or it has no kernel for the type), \
         `MISSING` (LiteRT runs it, ferrite does not). `int` is int32/int64/bool. Reasons come from \
         `crates/ferrite-format/coverage/gaps.txt`; an unreasoned MISSING type is one nobody has checked against LiteRT yet.\n\n\
         {supported} ops supported, {refused} refused as LiteRT refuses them, {missing} missing.\n\n| op | code | LiteRT | {} | reason |\n|---|---|---|{}---|\n",
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
        let reason = op.reason().unwrap_or("");
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
        // Every op of the table is in the report as supported.
        for &op in BuiltinOp::ALL {
            let row = report.iter().find(|o| o.code == op.code()).unwrap();
            assert_eq!(row.status(), Status::Supported, "{op}");
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
