//! `qemu-img convert -c` onto a new backing file (`-B`) and into an
//! existing image (`-n`), beside QEMU's: the clusters written compressed,
//! zeroes as zero clusters, data the new backing file also holds written
//! all the same, what the source leaves to its own backing file left to
//! the new one, and a compressed write over an allocated cluster refused
//! in qemu-img's words. zstd, whose bytes are libzstd's as QEMU's are, so
//! the packing and the end offset compare too. And `rebase -c`, which
//! writes what it copies in compressed.

use super::Twins;

fn create(t: &Twins, args: &[&str]) {
    let mut cmd = vec!["create", "-q", "-f", "qcow2"];
    cmd.extend(args);
    t.same("qemu-img", &cmd);
}

/// A base, a source with no backing file (data equal to the base's, other
/// data, written zeroes, holes), and an overlay source over the base.
fn sources(t: &Twins) {
    create(t, &["-o", "cluster_size=64k", "base.qcow2", "1M"]);
    t.same("qemu-io", &["-c", "write -P 1 0 256k", "base.qcow2"]);
    create(t, &["-o", "cluster_size=64k", "src.qcow2", "1M"]);
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 1 0 128k",
            "-c",
            "write -P 2 128k 64k",
            "-c",
            "write -P 0 192k 64k",
            "-c",
            "write -P 3 320k 100k",
            "src.qcow2",
        ],
    );
    create(t, &["-b", "base.qcow2", "-F", "qcow2", "top.qcow2", "1M"]);
    t.same(
        "qemu-io",
        &[
            "-c",
            "write -P 4 64k 64k",
            "-c",
            "write -z 512k 64k",
            "top.qcow2",
        ],
    );
}

fn same_image(t: &Twins, img: &str, src: &str) {
    t.same("qemu-img", &["map", "--output=json", img]);
    t.same("qemu-img", &["check", img]);
    t.on_both("qemu-img", &["compare", src, img]);
}

#[test]
fn convert_c_onto_a_backing_file_is_qemus() {
    let t = Twins::new();
    sources(&t);
    for (src, dst) in [("src.qcow2", "b.qcow2"), ("top.qcow2", "t.qcow2")] {
        t.same(
            "qemu-img",
            &[
                "convert",
                "-c",
                "-O",
                "qcow2",
                "-o",
                "compression_type=zstd,cluster_size=64k",
                "-B",
                "base.qcow2",
                "-F",
                "qcow2",
                src,
                dst,
            ],
        );
        same_image(&t, dst, src);
    }
    // Uncompressed, the same rule: data the base holds too is copied.
    t.same(
        "qemu-img",
        &[
            "convert",
            "-O",
            "qcow2",
            "-B",
            "base.qcow2",
            "-F",
            "qcow2",
            "src.qcow2",
            "u.qcow2",
        ],
    );
    same_image(&t, "u.qcow2", "src.qcow2");
}

#[test]
fn convert_c_into_an_existing_image_is_qemus() {
    let t = Twins::new();
    sources(&t);
    create(
        &t,
        &[
            "-o",
            "cluster_size=64k,compression_type=zstd",
            "n.qcow2",
            "1M",
        ],
    );
    t.same("qemu-io", &["-c", "write -P 9 512k 64k", "n.qcow2"]);
    t.same(
        "qemu-img",
        &["convert", "-c", "-n", "-O", "qcow2", "src.qcow2", "n.qcow2"],
    );
    same_image(&t, "n.qcow2", "src.qcow2");
    // A compressed write cannot replace an allocated cluster.
    t.same("qemu-io", &["-c", "write -P 9 0 64k", "n.qcow2"]);
    t.same(
        "qemu-img",
        &["convert", "-c", "-n", "-O", "qcow2", "src.qcow2", "n.qcow2"],
    );
}

/// `rebase -c`: what the rebase copies in is written compressed, placed
/// where QEMU places it (`check` counts the compressed clusters and
/// names the image's end); on a raw image it is refused in QEMU's words.
#[test]
fn rebase_c_copies_compressed_as_qemu_img_does() {
    let t = Twins::new();
    t.same("qemu-img", &["create", "-q", "-f", "raw", "r.raw", "4M"]);
    t.same(
        "qemu-img",
        &["rebase", "-c", "-f", "raw", "-b", "", "r.raw"],
    );
    t.create_qcow2("cluster_size=64k", "base.qcow2", "4M");
    t.create_overlay("base.qcow2", "top.qcow2", Some("4M"));
    t.same("qemu-io", &["-c", "write -c -P 0xaa 0 2M", "base.qcow2"]);
    t.same("qemu-io", &["-c", "write -c -P 0xbb 2M 1M", "top.qcow2"]);
    t.same("qemu-io", &["-c", "write -P 0xcc 3M 32767", "base.qcow2"]);
    t.same("qemu-img", &["rebase", "-c", "-b", "", "top.qcow2"]);
    t.same("qemu-img", &["check", "top.qcow2"]);
    t.same("qemu-img", &["map", "--output=json", "top.qcow2"]);
    t.same(
        "qemu-io",
        &[
            "-c",
            "read -P 0xaa 0 2M",
            "-c",
            "read -P 0xbb 2M 1M",
            "-c",
            "read -P 0xcc 3M 32767",
            "top.qcow2",
        ],
    );
}
