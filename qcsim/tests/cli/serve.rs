//! `qcsim serve`: the image's guest view over NBD on a Unix socket, used by
//! QEMU's own tools (convert, map, qemu-io, with the image checked clean
//! after a SIGTERM), and by hand-made peers that misbehave (garbage,
//! oversized and out-of-range requests, hang-ups mid-handshake and
//! mid-request) and must get an error or a closed connection while other
//! connections go on.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::support::{assert_clean, qcsim, run, text, QCSIM};

/// How long a loaded machine may take to start the server or stop it.
const PATIENCE: Duration = Duration::from_secs(120);

/// A running `qcsim serve`, killed if the test ends without stopping it.
pub(crate) struct Served {
    child: Option<Child>,
    socket: PathBuf,
    log: PathBuf,
}

impl Served {
    /// Serve `image` (in `dir`) on `dir/nbd.sock` with `extra` arguments;
    /// returns once the socket exists (the image is open by then).
    pub(crate) fn start(dir: &Path, image: &str, extra: &[&str]) -> Served {
        let socket = dir.join("nbd.sock");
        let path = socket.to_str().unwrap().to_owned();
        let mut args = vec!["--socket", path.as_str()];
        args.extend(extra);
        Served::spawn(dir, image, &args, socket, |s| s.socket.exists())
    }

    /// Serve `image` on a TCP port the system picks; returns it once the
    /// server has said which.
    fn start_tcp(dir: &Path, image: &str) -> (Served, u16) {
        let socket = dir.join("unused.sock");
        let port = |s: &Served| {
            let log = s.log_text();
            let at = log.find("on tcp 127.0.0.1:")? + "on tcp 127.0.0.1:".len();
            log[at..].lines().next()?.trim().parse::<u16>().ok()
        };
        let served = Served::spawn(dir, image, &["--port", "0"], socket, |s| port(s).is_some());
        let p = port(&served).unwrap();
        (served, p)
    }

    fn spawn(
        dir: &Path,
        image: &str,
        listen: &[&str],
        socket: PathBuf,
        ready: impl Fn(&Served) -> bool,
    ) -> Served {
        let log = dir.join("serve.log");
        let mut args = vec!["serve"];
        args.extend(listen);
        args.push(image);
        let child = Command::new(QCSIM)
            .args(&args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("qcsim starts");
        let mut served = Served {
            child: Some(child),
            socket,
            log,
        };
        let start = Instant::now();
        while !ready(&served) {
            if let Some(status) = served.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("qcsim serve exited early ({status}): {}", served.log_text());
            }
            assert!(start.elapsed() < PATIENCE, "no socket after {PATIENCE:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
        served
    }

    pub(crate) fn socket(&self) -> &Path {
        &self.socket
    }

    pub(crate) fn uri(&self) -> String {
        format!("nbd+unix:///?socket={}", self.socket.display())
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Send `signal` and wait for a clean exit; the server's log.
    pub(crate) fn stop(mut self, signal: libc::c_int) -> String {
        let mut child = self.child.take().unwrap();
        let pid = libc::pid_t::try_from(child.id()).unwrap();
        // SAFETY: kill(2) takes two integers and touches no memory of
        // ours; `pid` is our child, not yet waited for, so it cannot have
        // been reused by another process.
        let sent = unsafe { libc::kill(pid, signal) };
        assert_eq!(sent, 0, "kill: {}", std::io::Error::last_os_error());
        let start = Instant::now();
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break s;
            }
            if start.elapsed() > PATIENCE {
                let _ = child.kill();
                panic!("qcsim serve did not stop on {signal}: {}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = self.log_text();
        assert_eq!(status.code(), Some(0), "qcsim serve: {log}");
        assert!(!self.socket.exists(), "no socket file is left at exit");
        log
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The incompatible feature bits of a qcow2 header, read from the file.
fn incompatible_features(image: &Path) -> u64 {
    let bytes = std::fs::read(image).unwrap();
    u64::from_be_bytes(bytes[72..80].try_into().unwrap())
}

/// `qemu-img map --output=json` as (start, length, data, zero) runs, with
/// neighbours of the same kind merged (the NBD view and the qcow2 view cut
/// runs in different places).
fn map(target: &str, format: &str, dir: &Path) -> Vec<(u64, u64, bool, bool)> {
    let out = run(
        "qemu-img",
        &["map", "-f", format, "--output=json", target],
        dir,
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut runs: Vec<(u64, u64, bool, bool)> = Vec::new();
    for e in v.as_array().unwrap() {
        let (start, len) = (e["start"].as_u64().unwrap(), e["length"].as_u64().unwrap());
        let (data, zero) = (e["data"] == true, e["zero"] == true);
        match runs.last_mut() {
            Some(last) if last.2 == data && last.3 == zero && last.0 + last.1 == start => {
                last.1 += len
            }
            _ => runs.push((start, len, data, zero)),
        }
    }
    runs
}

/// qemu-io's output must show no failed command.
pub(crate) fn qemu_io_ok(args: &[&str], dir: &Path) -> String {
    let out = run("qemu-io", args, dir);
    let all = text(&out);
    assert!(
        !all.contains("failed") && !all.contains("error"),
        "qemu-io {args:?}: {all}"
    );
    all
}

#[test]
fn qemu_tools_use_the_image_through_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(
        &[
            "create",
            "-q",
            "-f",
            "qcow2",
            "-o",
            "cluster_size=64k,lazy_refcounts=on",
            "img.qcow2",
            "32M",
        ],
        d,
    );
    qemu_io_ok(
        &[
            "-c",
            "write -P 0x11 0 192k",
            "-c",
            "write -P 0x22 1M 64k",
            "-c",
            "write -z 2M 128k",
            "-c",
            "write -P 0x33 5000 3000",
            "-f",
            "qcow2",
            "img.qcow2",
        ],
        d,
    );
    let reference = testkit::qemu_raw(&d.join("img.qcow2"));
    let direct_map = map("img.qcow2", "qcow2", d);
    assert!(direct_map.iter().any(|r| !r.2), "the image has holes");

    let served = Served::start(d, "img.qcow2", &["--record", "client.trace"]);
    let uri = served.uri();

    // The whole disk, as qemu-img reads it over NBD (block status first).
    run(
        "qemu-img",
        &["convert", "-f", "raw", "-O", "raw", &uri, "out.raw"],
        d,
    );
    let copied = std::fs::read(d.join("out.raw")).unwrap();
    assert!(
        copied == reference,
        "the NBD view differs from the image's raw contents"
    );
    assert_eq!(map(&uri, "raw", d), direct_map, "holes and data over NBD");

    // Writes, zeroes (unmapping and not), discards, FUA, and the reads back.
    qemu_io_ok(
        &[
            // Without `-d unmap` qemu-io drops discards before they leave.
            "-f",
            "raw",
            "-d",
            "unmap",
            "-c",
            "write -P 0x5a 8M 64k",
            "-c",
            "write -f -P 0x77 10M 4k",
            "-c",
            "write -z 9M 128k",
            "-c",
            "write -z -u 1M 64k",
            "-c",
            "discard 0 64k",
            "-c",
            "write -P 0x44 7352377 777",
            "-c",
            "flush",
            "-c",
            "read -P 0x5a 8M 64k",
            "-c",
            "read -P 0 9M 128k",
            "-c",
            "read -P 0 1M 64k",
            "-c",
            "read -P 0 0 64k",
            "-c",
            "read -P 0x11 64k 128k",
            "-c",
            "read -P 0x44 7352377 777",
            &uri,
        ],
        d,
    );
    // Lazy refcounts: the writes made the dirty bit durable; the clean
    // close at SIGTERM must clear it.
    assert_eq!(
        incompatible_features(&d.join("img.qcow2")) & 1,
        1,
        "dirty while served"
    );
    let log = served.stop(libc::SIGTERM);
    assert!(log.contains("closed"), "{log}");
    assert_eq!(
        incompatible_features(&d.join("img.qcow2")) & 1,
        0,
        "clean after SIGTERM"
    );
    assert_clean("img.qcow2", d);
    qemu_io_ok(
        &[
            "-f",
            "qcow2",
            "-c",
            "read -P 0x5a 8M 64k",
            "-c",
            "read -P 0x77 10M 4k",
            "-c",
            "read -P 0 9M 128k",
            "-c",
            "read -P 0 1M 64k",
            "-c",
            "read -P 0 0 64k",
            "-c",
            "read -P 0x44 7352377 777",
            "img.qcow2",
        ],
        d,
    );

    // What the clients sent, as a trace that `qcsim trace` can run.
    let trace = std::fs::read_to_string(d.join("client.trace")).unwrap();
    let parsed = sim::iotrace::format::parse_str(&trace).expect("the trace parses");
    assert!(parsed.requests().count() > 10);
    for line in [
        "w 8388608 65536",
        "w 10485760 4096 fua\n",
        "z 9437184 131072",
        "d 0 65536",
        "w 7352377 777",
        "r 8388608 65536",
    ] {
        assert!(trace.contains(line), "{line:?} not in the trace:\n{trace}");
    }
}

/// A minimal NBD client for peers that misbehave on purpose.
pub(crate) mod peer {
    use super::*;

    pub const REQUEST: u32 = 0x2560_9513;
    pub const STRUCTURED: u32 = 0x668e_33ef;

    pub fn connect(socket: &Path) -> UnixStream {
        let s = UnixStream::connect(socket).unwrap();
        // No read in these tests may hang the suite.
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s
    }

    pub fn greeting(s: &mut UnixStream) {
        let mut g = [0u8; 18];
        s.read_exact(&mut g).unwrap();
        assert_eq!(&g[..8], b"NBDMAGIC");
        assert_eq!(&g[8..16], b"IHAVEOPT");
    }

    fn option(s: &mut UnixStream, opt: u32, data: &[u8]) {
        let mut m = b"IHAVEOPT".to_vec();
        m.extend(opt.to_be_bytes());
        m.extend((data.len() as u32).to_be_bytes());
        m.extend(data);
        s.write_all(&m).unwrap();
    }

    /// One option reply: (type, data).
    fn option_reply(s: &mut UnixStream) -> (u32, Vec<u8>) {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        let kind = u32::from_be_bytes(h[12..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        let mut data = vec![0; len as usize];
        s.read_exact(&mut data).unwrap();
        (kind, data)
    }

    /// Handshake with structured replies and base:allocation; the size.
    pub fn open(socket: &Path) -> (UnixStream, u64) {
        let mut s = connect(socket);
        greeting(&mut s);
        s.write_all(&3u32.to_be_bytes()).unwrap();
        option(&mut s, 8, &[]);
        assert_eq!(option_reply(&mut s).0, 1);
        let mut meta = 0u32.to_be_bytes().to_vec();
        meta.extend(1u32.to_be_bytes());
        meta.extend(15u32.to_be_bytes());
        meta.extend(b"base:allocation");
        option(&mut s, 10, &meta);
        assert_eq!(option_reply(&mut s).0, 4);
        assert_eq!(option_reply(&mut s).0, 1);
        option(&mut s, 7, &[0, 0, 0, 0, 0, 0]);
        let mut size = None;
        loop {
            let (kind, data) = option_reply(&mut s);
            if kind == 1 {
                break;
            }
            assert_eq!(kind, 3, "an info reply");
            if data[..2] == [0, 0] {
                size = Some(u64::from_be_bytes(data[2..10].try_into().unwrap()));
            }
        }
        (s, size.expect("NBD_INFO_EXPORT"))
    }

    pub fn request(s: &mut UnixStream, kind: u16, cookie: u64, offset: u64, len: u32) {
        let mut m = REQUEST.to_be_bytes().to_vec();
        m.extend(0u16.to_be_bytes());
        m.extend(kind.to_be_bytes());
        m.extend(cookie.to_be_bytes());
        m.extend(offset.to_be_bytes());
        m.extend(len.to_be_bytes());
        s.write_all(&m).unwrap();
    }

    /// One structured reply chunk: (cookie, type, error value or 0, payload).
    pub fn reply(s: &mut UnixStream) -> (u64, u16, u32, Vec<u8>) {
        let mut h = [0u8; 20];
        s.read_exact(&mut h).unwrap();
        assert_eq!(u32::from_be_bytes(h[..4].try_into().unwrap()), STRUCTURED);
        let kind = u16::from_be_bytes([h[6], h[7]]);
        let cookie = u64::from_be_bytes(h[8..16].try_into().unwrap());
        let len = u32::from_be_bytes(h[16..20].try_into().unwrap());
        assert!(len < (33 << 20), "reply length {len}");
        let mut data = vec![0; len as usize];
        s.read_exact(&mut data).unwrap();
        let error = if kind & 0x8000 != 0 {
            u32::from_be_bytes(data[..4].try_into().unwrap())
        } else {
            0
        };
        (cookie, kind, error, data)
    }

    /// The server closed the connection: reading ends (after any bytes
    /// still on their way) instead of timing out. A server that closes
    /// with some of our bytes unread resets the connection instead.
    pub fn closed(s: &mut UnixStream) -> bool {
        let mut sink = Vec::new();
        match s.read_to_end(&mut sink) {
            Ok(_) => true,
            Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
        }
    }
}

#[test]
fn bad_peers_get_an_error_or_a_closed_connection() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(&["create", "-q", "-f", "qcow2", "img.qcow2", "4M"], d);
    let served = Served::start(d, "img.qcow2", &[]);
    let sock = served.socket.clone();

    // A good connection stays open while the others misbehave.
    let (mut good, size) = peer::open(&sock);
    assert_eq!(size, 4 << 20);

    // Garbage instead of client flags, then an HTTP request.
    let mut s = peer::connect(&sock);
    peer::greeting(&mut s);
    s.write_all(b"GET / HTTP/1.1\r\n\r\n").unwrap();
    assert!(peer::closed(&mut s));
    // Hanging up at once, and mid-option.
    drop(peer::connect(&sock));
    let mut s = peer::connect(&sock);
    peer::greeting(&mut s);
    s.write_all(&[0, 0, 0, 1, b'I', b'H', b'A']).unwrap();
    drop(s);
    // An option claiming 4 GiB of data.
    let mut s = peer::connect(&sock);
    peer::greeting(&mut s);
    let mut m = 1u32.to_be_bytes().to_vec();
    m.extend(b"IHAVEOPT");
    m.extend(7u32.to_be_bytes());
    m.extend(u32::MAX.to_be_bytes());
    s.write_all(&m).unwrap();
    assert!(peer::closed(&mut s));

    // Requests past the end, too long, or unknown: errors, and the
    // connection goes on.
    let (mut s, _) = peer::open(&sock);
    peer::request(&mut s, 0, 1, size - 512, 1024); // read past the end
    peer::request(&mut s, 0, 2, 0, 64 << 20); // read over the maximum
    peer::request(&mut s, 6, 3, size, 512); // write zeroes past the end
    peer::request(&mut s, 99, 4, 0, 0); // no such command
    peer::request(&mut s, 7, 5, u64::MAX - 10, 100); // block status, wrapping
    let mut errors: Vec<(u64, u32)> = (0..5)
        .map(|_| {
            let (cookie, kind, error, _) = peer::reply(&mut s);
            assert_eq!(kind, 0x8001, "an error chunk for request {cookie}");
            (cookie, error)
        })
        .collect();
    errors.sort();
    assert_eq!(errors, [(1, 22), (2, 22), (3, 28), (4, 22), (5, 22)]);
    // A write of 1 GiB: refused, and the connection closed (its data is
    // not read only to be thrown away).
    peer::request(&mut s, 1, 6, 0, 1 << 30);
    let (cookie, _, error, _) = peer::reply(&mut s);
    assert_eq!((cookie, error), (6, 22));
    assert!(peer::closed(&mut s));

    // A garbage request header closes the connection.
    let (mut s, _) = peer::open(&sock);
    s.write_all(&[0x55; 28]).unwrap();
    assert!(peer::closed(&mut s));

    // A write whose data stops half way, then a hang-up: never applied.
    let (mut s, _) = peer::open(&sock);
    peer::request(&mut s, 1, 7, 3 << 20, 65536);
    s.write_all(&[0xee; 30000]).unwrap();
    drop(s);

    // Many requests in flight on the good connection, each answered:
    // writes first, then reads of what they wrote and a block status.
    for i in 0..32u64 {
        peer::request(&mut good, 1, 100 + i, i * 65536, 65536);
        good.write_all(&vec![i as u8 + 1; 65536]).unwrap();
    }
    let mut written: Vec<u64> = (0..32)
        .map(|_| {
            let (cookie, kind, error, _) = peer::reply(&mut good);
            assert_eq!((kind, error), (0, 0), "write {cookie}");
            cookie
        })
        .collect();
    written.sort();
    assert_eq!(written, (100..132).collect::<Vec<u64>>());
    for i in 0..32u64 {
        peer::request(&mut good, 0, 200 + i, i * 65536, 65536);
    }
    peer::request(&mut good, 7, 300, 0, size as u32);
    let mut seen = std::collections::BTreeMap::new();
    while seen.len() < 33 {
        let (cookie, kind, error, data) = peer::reply(&mut good);
        assert_eq!(error, 0, "request {cookie}");
        seen.insert(cookie, (kind, data));
    }
    for i in 0..32u64 {
        let (kind, data) = &seen[&(200 + i)];
        assert_eq!(*kind, 1, "read data chunk");
        assert_eq!(u64::from_be_bytes(data[..8].try_into().unwrap()), i * 65536);
        assert!(data[8..].iter().all(|&x| x == i as u8 + 1), "read {i}");
    }
    let (kind, status) = &seen[&300];
    assert_eq!(*kind, 5, "block status chunk");
    // First extent: data (flags 0), at least the 2 MiB written.
    assert_eq!(u32::from_be_bytes(status[8..12].try_into().unwrap()), 0);
    assert!(u32::from_be_bytes(status[4..8].try_into().unwrap()) >= 2 << 20);
    // A clean disconnect.
    peer::request(&mut good, 2, 400, 0, 0);
    assert!(peer::closed(&mut good));

    let log = served.stop(libc::SIGINT);
    assert!(log.contains("request without the request magic"), "{log}");
    assert_clean("img.qcow2", d);
    let args = [
        "-f",
        "qcow2",
        "-c",
        "read -P 32 1984k 64k",
        "-c",
        "read -P 0 2M 2M",
        "img.qcow2",
    ];
    qemu_io_ok(&args, d);
}

#[test]
fn tcp_on_a_port_the_system_picks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(&["create", "-q", "-f", "qcow2", "img.qcow2", "3M"], d);
    let (served, port) = Served::start_tcp(d, "img.qcow2");
    let uri = format!("nbd://127.0.0.1:{port}");
    qemu_io_ok(&["-f", "raw", "-c", "write -P 0x61 1M 4k", &uri], d);
    let out = run("qemu-img", &["info", "-f", "raw", "--output=json", &uri], d);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["virtual-size"], 3 << 20);
    served.stop(libc::SIGTERM);
    assert_clean("img.qcow2", d);
    qemu_io_ok(&["-f", "qcow2", "-c", "read -P 0x61 1M 4k", "img.qcow2"], d);
}

#[test]
fn read_only_exports_refuse_writes() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    qcsim(&["create", "-q", "-f", "qcow2", "img.qcow2", "1M"], d);
    qemu_io_ok(&["-f", "qcow2", "-c", "write -P 0x42 0 4k", "img.qcow2"], d);
    let served = Served::start(d, "img.qcow2", &["--read-only"]);
    let uri = served.uri();
    qemu_io_ok(&["-f", "raw", "-r", "-c", "read -P 0x42 0 4k", &uri], d);
    // QEMU's client sees the read-only flag and refuses to open for writing.
    let out = testkit::exec("qemu-io", &["-f", "raw", "-c", "write 0 4k", &uri], d);
    let all = text(&out);
    assert!(!all.contains("wrote"), "a write went through: {all}");
    // A raw peer that writes anyway gets EPERM.
    let (mut s, _) = peer::open(&served.socket);
    peer::request(&mut s, 1, 1, 0, 512);
    s.write_all(&[0u8; 512]).unwrap();
    let (cookie, _, error, _) = peer::reply(&mut s);
    assert_eq!((cookie, error), (1, 1));
    drop(s);
    served.stop(libc::SIGTERM);
    assert_clean("img.qcow2", d);
    qemu_io_ok(&["-f", "qcow2", "-c", "read -P 0x42 0 4k", "img.qcow2"], d);
}
