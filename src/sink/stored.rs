//! How a sink's entry reads in the backend's [`crate::domain::SinkStore`]: its URL, then
//! its settings, space-separated (a URL holds no unescaped space): `URL` or `URL paused`.
//! A sink given by `--sink` has its URL on the command line; its entry, kept only while it
//! has a setting to keep, is `--sink paused`. One string per namespace, so that both
//! backends keep settings with no change to their store; a tickd that predates a setting
//! reads such an entry as a URL that does not parse and leaves that sink alone, as it does
//! for any URL it cannot use.

/// Where a `--sink` entry's URL would be.
const FLAG_SINK: &str = "--sink";
const PAUSED: &str = "paused";

/// A sink's entry in the store, read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StoredLine {
    /// The URL kept, credentials and all; None for a `--sink` sink's settings.
    pub(crate) url: Option<String>,
    /// Paused (PauseSink): no push leaves until resumed.
    pub(crate) paused: bool,
}

impl StoredLine {
    /// Reads an entry; what it does not know is an error naming it.
    pub(crate) fn parse(line: &str) -> Result<StoredLine, String> {
        let mut words = line.split(' ').filter(|word| !word.is_empty());
        let url = match words.next() {
            Some(FLAG_SINK) => None,
            Some(url) => Some(url.to_owned()),
            None => return Err("an empty entry".into()),
        };
        let mut paused = false;
        for setting in words {
            match setting {
                PAUSED if !paused => paused = true,
                // Not echoed whole: an entry holds credentials.
                _ => return Err("a setting this tickd does not know".into()),
            }
        }
        Ok(StoredLine { url, paused })
    }

    /// The entry to keep; None for a `--sink` sink with nothing to keep.
    pub(crate) fn line(&self) -> Option<String> {
        let mut line = match &self.url {
            Some(url) => url.clone(),
            None if !self.paused => return None,
            None => FLAG_SINK.to_owned(),
        };
        if self.paused {
            line.push(' ');
            line.push_str(PAUSED);
        }
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_reads_back_as_it_was_kept() {
        for (url, paused) in [
            (Some("http://u:p@127.0.0.1/x#protobuf,h2c"), false),
            (Some("grpc://127.0.0.1:9"), true),
            (None, true),
        ] {
            let kept = StoredLine {
                url: url.map(str::to_owned),
                paused,
            };
            let line = kept.line().expect("an entry");
            assert_eq!(StoredLine::parse(&line), Ok(kept), "{line}");
        }
        let nothing = StoredLine {
            url: None,
            paused: false,
        };
        assert_eq!(
            nothing.line(),
            None,
            "a --sink sink with no setting keeps none"
        );
    }

    #[test]
    fn an_entry_a_tickd_does_not_know_is_refused_without_echoing_it() {
        for line in ["", "http://u:secret@h/ fast", "http://h/ paused paused"] {
            let error = StoredLine::parse(line).expect_err("refused");
            assert!(!error.contains("secret"), "{error}");
        }
    }
}
