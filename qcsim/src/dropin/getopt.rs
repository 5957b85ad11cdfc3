//! The command-line scan qemu-img and qemu-io use (glibc's `getopt_long`
//! with argument permutation): short options, several sharing one dash,
//! with their values attached or in the next word; `--long` and
//! `--long=value`; operands anywhere, all options first-class until `--`.
//! The drop-in tools need this rather than clap because their command lines
//! come from scripts written for QEMU's tools.

/// One option: its short letter, or its long name for long-only options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opt {
    pub name: String,
    pub value: Option<String>,
}

/// A long option: its name, whether it takes a value, and the short letter
/// it stands for (`None`: reported under its long name).
pub struct Long {
    pub name: &'static str,
    pub value: bool,
    pub short: Option<char>,
}

pub const fn long(name: &'static str, value: bool, short: Option<char>) -> Long {
    Long { name, value, short }
}

/// The scanned command line.
#[derive(Debug, Default)]
pub struct Parsed {
    pub opts: Vec<Opt>,
    pub operands: Vec<String>,
}

impl Parsed {
    pub fn has(&self, name: &str) -> bool {
        self.opts.iter().any(|o| o.name == name)
    }

    /// The last value given for `name`.
    pub fn value(&self, name: &str) -> Option<&str> {
        self.opts
            .iter()
            .rev()
            .find(|o| o.name == name)
            .and_then(|o| o.value.as_deref())
    }

    /// Every value given for `name`, in order.
    pub fn values(&self, name: &str) -> Vec<&str> {
        self.opts
            .iter()
            .filter(|o| o.name == name)
            .filter_map(|o| o.value.as_deref())
            .collect()
    }
}

/// What getopt says about a bad option (without the program prefix).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GetoptError {
    #[error("invalid option -- '{0}'")]
    Invalid(char),
    #[error("unrecognized option '--{0}'")]
    UnknownLong(String),
    #[error("option requires an argument -- '{0}'")]
    NeedsValue(char),
    #[error("option '--{0}' requires an argument")]
    LongNeedsValue(String),
    #[error("option '--{0}' doesn't allow an argument")]
    LongNoValue(String),
}

/// Scan `args` (without the program name) against the short option string
/// (`c:` takes a value) and the long options.
pub fn getopt(args: &[String], short: &str, longs: &[Long]) -> Result<Parsed, GetoptError> {
    let takes_value = |c: char| -> Option<bool> {
        let at = short.find(c)?;
        Some(short[at + c.len_utf8()..].starts_with(':'))
    };
    let mut parsed = Parsed::default();
    let mut i = 0;
    while i < args.len() {
        let a = &args[i];
        i += 1;
        if a == "--" {
            parsed.operands.extend(args[i..].iter().cloned());
            break;
        }
        if let Some(body) = a.strip_prefix("--") {
            let (name, inline) = match body.split_once('=') {
                Some((n, v)) => (n, Some(v.to_owned())),
                None => (body, None),
            };
            // Unambiguous prefixes are accepted, as getopt_long does.
            let exact = longs.iter().find(|l| l.name == name);
            let matches: Vec<&Long> = longs.iter().filter(|l| l.name.starts_with(name)).collect();
            let l = match (exact, matches.as_slice()) {
                (Some(l), _) => l,
                (None, [l]) => *l,
                _ => return Err(GetoptError::UnknownLong(name.to_owned())),
            };
            let value = if l.value {
                match inline {
                    Some(v) => Some(v),
                    None => {
                        let v = args
                            .get(i)
                            .cloned()
                            .ok_or_else(|| GetoptError::LongNeedsValue(l.name.to_owned()))?;
                        i += 1;
                        Some(v)
                    }
                }
            } else {
                if inline.is_some() {
                    return Err(GetoptError::LongNoValue(l.name.to_owned()));
                }
                None
            };
            let name = l.short.map_or_else(|| l.name.to_owned(), |c| c.to_string());
            parsed.opts.push(Opt { name, value });
            continue;
        }
        let Some(body) = a.strip_prefix('-').filter(|b| !b.is_empty()) else {
            parsed.operands.push(a.clone());
            continue;
        };
        for (at, c) in body.char_indices() {
            match takes_value(c) {
                None => return Err(GetoptError::Invalid(c)),
                Some(false) => parsed.opts.push(Opt {
                    name: c.to_string(),
                    value: None,
                }),
                Some(true) => {
                    let rest = &body[at + c.len_utf8()..];
                    let value = if !rest.is_empty() {
                        rest.to_owned()
                    } else {
                        let v = args.get(i).cloned().ok_or(GetoptError::NeedsValue(c))?;
                        i += 1;
                        v
                    };
                    parsed.opts.push(Opt {
                        name: c.to_string(),
                        value: Some(value),
                    });
                    break;
                }
            }
        }
    }
    Ok(parsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_owned).collect()
    }

    #[test]
    fn options_permute_and_take_values_as_getopt_does() {
        let longs = [
            long("cache", true, Some('t')),
            long("image-opts", false, None),
        ];
        let p = getopt(
            &args("img -rU -cread --cache=none -f qcow2 --image-opts -c x -- -z"),
            "c:f:rt:U",
            &longs,
        )
        .unwrap();
        assert_eq!(p.operands, ["img", "-z"]);
        assert!(p.has("r") && p.has("U") && p.has("image-opts"));
        assert_eq!(p.values("c"), ["read", "x"]);
        assert_eq!(p.value("t"), Some("none"));
        assert_eq!(p.value("f"), Some("qcow2"));
        assert_eq!(
            getopt(&args("--cach writeback"), "t:", &longs)
                .unwrap()
                .value("t"),
            Some("writeback")
        );
    }

    #[test]
    fn bad_options_are_named_as_getopt_names_them() {
        let longs = [long("cache", true, Some('t'))];
        let e = |s: &str| getopt(&args(s), "c:r", &longs).unwrap_err().to_string();
        assert_eq!(e("-x"), "invalid option -- 'x'");
        assert_eq!(e("-c"), "option requires an argument -- 'c'");
        assert_eq!(e("--bogus"), "unrecognized option '--bogus'");
        assert_eq!(e("--cache"), "option '--cache' requires an argument");
    }
}
