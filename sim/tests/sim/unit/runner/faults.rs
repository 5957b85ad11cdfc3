//! The unit tests of `sim::runner::faults`.

use engine::dev::IoOp;
use sim::runner::faults::{excuse, Excuse};

#[test]
fn an_error_is_excused_only_by_a_fault_it_could_have_met() {
    let eio = engine::Error::OutOfRange {
        offset: 0,
        len: 1,
        size: 0,
    };
    // A fault while it was in flight explains any error, by its kind.
    assert_eq!(
        excuse(&eio, Some(IoOp::Flush), 3),
        Some(Excuse::Fault(IoOp::Flush))
    );
    // Faults elsewhere in the run do not.
    assert_eq!(excuse(&eio, None, 3), None);
    // The poisoned image's refusal is explained by this epoch's faults
    // only.
    assert_eq!(
        excuse(&engine::Error::Poisoned, None, 1),
        Some(Excuse::Poisoned)
    );
    assert_eq!(excuse(&engine::Error::Poisoned, None, 0), None);
    assert_eq!(excuse(&engine::Error::ReadOnly, None, 5), None);
}
