//! Byte sizes on the command line: `256MiB`, `2GiB`, `64MB` or a plain number of bytes,
//! parsed by `bytesize` (binary and decimal units both, as Kubernetes writes them:
//! `256Mi` is accepted too).

use std::fmt;
use std::str::FromStr;

/// A number of bytes as given on the command line; displayed in binary units.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct ByteCount(pub u64);

impl ByteCount {
    pub fn bytes(self) -> u64 {
        self.0
    }
}

impl FromStr for ByteCount {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let trimmed = text.trim();
        // Kubernetes quantities (`256Mi`, `1Gi`) name the same binary units without the `B`.
        let spelled = match trimmed.strip_suffix('i') {
            Some(_) => format!("{trimmed}B"),
            None => trimmed.to_owned(),
        };
        bytesize::ByteSize::from_str(&spelled)
            .map(|size| ByteCount(size.as_u64()))
            .map_err(|error| {
                format!("invalid size {text:?}: {error}; give bytes like 268435456, 256MiB or 2GiB")
            })
    }
}

impl fmt::Display for ByteCount {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "{}",
            bytesize::ByteSize::b(self.0).display().iec()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn binary_decimal_kubernetes_and_plain_sizes_parse() {
        let parse = |text: &str| text.parse::<ByteCount>().map(ByteCount::bytes);
        assert_eq!(parse("256MiB"), Ok(256 << 20));
        assert_eq!(parse("2GiB"), Ok(2 << 30));
        assert_eq!(parse("256Mi"), Ok(256 << 20));
        assert_eq!(parse("64MB"), Ok(64_000_000));
        assert_eq!(parse("1048576"), Ok(1 << 20));
        assert_eq!(parse("0"), Ok(0));
        let error = parse("lots").unwrap_err();
        assert!(error.contains("256MiB"), "{error}");
        assert_eq!(ByteCount(256 << 20).to_string(), "256.0 MiB");
    }
}
