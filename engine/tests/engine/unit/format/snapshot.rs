//! The unit tests of `engine::format::snapshot`.

use engine::error::Error;
use engine::format::snapshot::*;

fn sample(id: &str, name: &str) -> Snapshot {
    Snapshot {
        id: id.into(),
        name: name.into(),
        l1_table_offset: 0x50000,
        l1_size: 3,
        date_sec: 1_700_000_000,
        date_nsec: 123_000,
        vm_clock_nsec: 0,
        vm_state_size: 0,
        disk_size: Some(1 << 20),
        icount: Some(0),
        unknown_extra: Vec::new(),
    }
}

#[test]
fn a_table_round_trips_with_alignment() {
    let t = vec![sample("1", "a"), sample("2", "longer name")];
    let bytes = encode_table(&t, 0).unwrap();
    // 40 + 24 + 2 = 66, padded to 72 before the second entry.
    assert_eq!(bytes.len(), 72 + 40 + 24 + 1 + 11);
    assert_eq!(decode_table(&bytes, 2).unwrap(), t);
}

#[test]
fn an_entry_head_walks_the_table_as_the_full_decoder_does() {
    let t = vec![sample("1", "a"), sample("22", "longer name")];
    let bytes = encode_table(&t, 0).unwrap();
    let mut pos = 0usize;
    for (i, sn) in t.iter().enumerate() {
        let fixed: &[u8; ENTRY_HEADER_LEN] = bytes[pos..pos + ENTRY_HEADER_LEN].try_into().unwrap();
        let head = decode_entry_head(fixed, i as u32).unwrap();
        assert_eq!(head.l1_table_offset, sn.l1_table_offset);
        assert_eq!(head.l1_size, sn.l1_size);
        let Decoded::Entry(_, len) = decode_entry(&bytes[pos..], i as u32).unwrap() else {
            panic!("entry {i} decodes whole");
        };
        assert_eq!(head.stride, len.next_multiple_of(8) as u64);
        pos += head.stride as usize;
    }
    // Extra data past QEMU's limit is refused from the head too.
    let mut bad = bytes.clone();
    bad[36..40].copy_from_slice(&(MAX_EXTRA_DATA + 1).to_be_bytes());
    let fixed: &[u8; ENTRY_HEADER_LEN] = bad[..ENTRY_HEADER_LEN].try_into().unwrap();
    assert!(decode_entry_head(fixed, 0).is_err());
}

#[test]
fn short_extra_data_leaves_fields_absent() {
    let mut b = encode_table(&[sample("1", "x")], 0).unwrap();
    // Cut the extra data to 8 bytes: vm_state_size_large only.
    b[36..40].copy_from_slice(&8u32.to_be_bytes());
    b.drain(48..64);
    let sn = decode_table(&b, 1).unwrap().remove(0);
    assert_eq!((sn.disk_size, sn.icount), (None, None));
    assert_eq!((sn.id.as_str(), sn.name.as_str()), ("1", "x"));
}

#[test]
fn hostile_sizes_are_refused_or_asked_for() {
    let mut b = encode_table(&[sample("1", "x")], 0).unwrap();
    b[36..40].copy_from_slice(&2000u32.to_be_bytes());
    assert!(matches!(decode_entry(&b, 0), Err(Error::Format { .. })));
    let mut b = encode_table(&[sample("1", "x")], 0).unwrap();
    b[14..16].copy_from_slice(&u16::MAX.to_be_bytes());
    assert_eq!(
        decode_entry(&b, 0).unwrap(),
        Decoded::NeedMore(40 + 24 + 1 + 65535)
    );
    assert!(decode_table(&b, 1).is_err());
    assert_eq!(decode_entry(&b[..10], 0).unwrap(), Decoded::NeedMore(40));
}

#[test]
fn a_name_too_long_is_refused() {
    let long = "n".repeat(MAX_STRING_LEN + 1);
    assert!(encode_table(&[sample("1", &long)], 0).is_err());
}

#[test]
fn a_table_without_extra_data_has_no_disk_size_and_refuses_a_large_vm_state() {
    let t = vec![sample("1", "a"), sample("2", "b")];
    let bytes = encode_table_without_extra(&t).unwrap();
    // 40 + 1 + 1 = 42, padded to 48 before the second entry.
    assert_eq!(bytes.len(), 48 + 42);
    assert_eq!(&bytes[36..40], &[0, 0, 0, 0]);
    let back = decode_table(&bytes, 2).unwrap();
    assert!(back
        .iter()
        .all(|s| s.disk_size.is_none() && s.icount.is_none()));
    assert_eq!(back[1].name, "b");
    let mut big = sample("1", "a");
    big.vm_state_size = 5 << 30;
    assert!(encode_table_without_extra(&[big.clone()]).is_err());
    // With the extra data the large size fits.
    assert!(encode_table(&[big], 0).is_ok());
}
