//! A synthetic predicate's test case for the passes' unit tests: no
//! engine runs, only the shape of the case decides.

use sim::case::{Case, Op};
use sim::workload::Profile;

/// A generated case (valid, with its image, device and engine
/// options) whose workload is replaced by `groups`.
pub fn with_groups(groups: Vec<Vec<Op>>) -> Case {
    let mut c = Case::generate(5, Profile::Random);
    c.workload = groups;
    c.validate().expect("a valid test case");
    c
}

pub fn w(sector: u64, sectors: u64) -> Op {
    Op::Write {
        sector,
        sectors,
        fua: false,
    }
}

/// Every operation, in workload order.
pub fn ops(c: &Case) -> Vec<Op> {
    c.workload.iter().flatten().copied().collect()
}
