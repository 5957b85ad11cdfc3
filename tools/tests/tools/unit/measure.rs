//! The unit tests of `tools::measure`.

use tools::measure::*;

fn layout(cluster_size: u64, refcount_bits: u64, extended_l2: bool) -> Qcow2Layout {
    Qcow2Layout {
        cluster_size,
        refcount_bits,
        extended_l2,
        full_prealloc: false,
        luks_payload: 0,
        version: 3,
        has_backing_file: false,
    }
}

/// Figures qemu-img 10.0 printed for `measure -O qcow2 --size ...`.
#[test]
fn sizes_match_qemu_imgs() {
    let g = 1 << 30;
    assert_eq!(
        qcow2_sizes(g, 0, &layout(65536, 16, false)),
        (393216, 1074135040)
    );
    assert_eq!(
        qcow2_sizes(g, 0, &layout(4096, 16, false)),
        (2637824, 1076379648)
    );
    assert_eq!(
        qcow2_sizes(g, 0, &layout(65536, 16, true)),
        (524288, 1074266112)
    );
    assert_eq!(
        qcow2_sizes(g, 0, &layout(512, 16, false)),
        (21385216, 1095127040)
    );
    assert_eq!(
        qcow2_sizes(g, 0, &layout(65536, 64, false)),
        (524288, 1074266112)
    );
    assert_eq!(
        qcow2_sizes(g, 0, &layout(2 << 20, 16, true)),
        (10485760, 1084227584)
    );
    assert_eq!(
        qcow2_sizes(g, 0, &layout(4096, 8, false)),
        (2375680, 1076117504)
    );
    assert_eq!(
        qcow2_sizes(1, 0, &layout(65536, 16, false)),
        (327680, 393216)
    );
    assert_eq!(
        qcow2_sizes(0, 0, &layout(65536, 16, false)),
        (196608, 196608)
    );
    assert_eq!(
        qcow2_sizes(100 << 40, 0, &layout(65536, 16, false)),
        (16779902976, 109967942680576)
    );
    let full = Qcow2Layout {
        full_prealloc: true,
        ..layout(65536, 16, false)
    };
    assert_eq!(qcow2_sizes(g, 0, &full), (1074135040, 1074135040));
}

#[test]
fn luks_headers_are_as_long_as_qemus() {
    // aes-256-xts (qemu-img printed 2490368 required for 1G).
    assert_eq!(luks_header_bytes(64), 2068480);
    assert_eq!(luks_header_bytes(32), 1052672);
    assert_eq!(luks_key_bytes("aes-128", "xts"), Some(32));
}

#[test]
fn data_runs_round_out_to_target_clusters() {
    let k = 1024;
    // A run inside one cluster counts the cluster.
    assert_eq!(data_bytes(&[(5000, 5001)], 64 * k), 64 * k);
    // Two runs in one cluster: the second is skipped.
    assert_eq!(data_bytes(&[(0, 4 * k), (8 * k, 12 * k)], 64 * k), 64 * k);
    // A run starting mid-cluster counts from the cluster's start.
    assert_eq!(data_bytes(&[(70 * k, 72 * k)], 64 * k), 64 * k);
    // Runs in separate clusters.
    assert_eq!(
        data_bytes(&[(0, 1024 * k), (10240 * k, 10244 * k)], 64 * k),
        1088 * k
    );
    assert_eq!(data_bytes(&[], 64 * k), 0);
}
