//! The unit tests of `tools::progress`.

use tools::progress::*;

fn lines(steps: &[f32], min_skip: f32) -> String {
    let mut p = Progress::new(Vec::new(), min_skip);
    for &s in steps {
        p.set(s).unwrap();
    }
    String::from_utf8(p.end().unwrap()).unwrap()
}

#[test]
fn prints_zero_hundred_and_steps_over_the_skip() {
    assert_eq!(
        lines(&[0.0, 0.5, 1.0, 1.5, 100.0, 100.0], 1.0),
        "    (0.00/100%)\r    (1.50/100%)\r    (100.00/100%)\r    (100.00/100%)\r\n"
    );
    // A step of exactly the skip is not enough.
    assert_eq!(lines(&[1.0], 1.0), "\n");
}

#[test]
fn advance_is_relative_to_a_share() {
    let mut p = Progress::new(Vec::new(), 1.0);
    p.advance(0.0, 100.0).unwrap();
    p.advance(50.0, 40.0).unwrap();
    let s = String::from_utf8(p.end().unwrap()).unwrap();
    assert_eq!(s, "    (0.00/100%)\r    (20.00/100%)\r\n");
}

#[test]
fn two_decimals_of_the_f32() {
    // 1/3 of the way: the f32 nearest 33.333... prints as 33.33.
    assert_eq!(lines(&[100.0f32 / 3.0], 1.0), "    (33.33/100%)\r\n");
}

#[test]
fn plan_counts_data_in_buffer_pieces_in_order() {
    let mut plan = ConvertPlan::new();
    plan.add_run(0, 1 << 20, true, CONVERT_BUFFER);
    plan.add_run(1 << 20, 1 << 20, false, CONVERT_BUFFER);
    plan.add_run(2 << 20, 3 << 20, true, CONVERT_BUFFER);
    // 1 MiB, then 2 MiB and 1 MiB: 4 MiB of data in all.
    assert_eq!(plan.reached(1 << 20), vec![25.0]);
    assert_eq!(plan.reached(3 << 20), Vec::<f32>::new());
    assert_eq!(plan.reached(4 << 20), vec![75.0]);
    assert_eq!(plan.reached(u64::MAX), vec![100.0]);
    assert!(plan.reached(u64::MAX).is_empty());
}
