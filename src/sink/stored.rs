//! How a sink's entry reads in the backend's [`crate::domain::SinkStore`]: its URL, then
//! its settings, space-separated (a URL holds no unescaped space): `URL`, `URL paused`,
//! `URL rate=50/s,burst=5 secret=whsec_... paused`. The entry holds the secrets SetSink
//! gave as it holds the URL's credentials: the store is its owner's only.
//! A sink given by `--sink` has its URL on the command line; its entry, kept only while it
//! has a setting to keep, is `--sink paused`. One string per namespace, so that both
//! backends keep settings with no change to their store; a tickd that predates a setting
//! reads such an entry as a URL that does not parse and leaves that sink alone, as it does
//! for any URL it cannot use.

/// Where a `--sink` entry's URL would be.
const FLAG_SINK: &str = "--sink";
const PAUSED: &str = "paused";
const RATE: &str = "rate=";
const SECRET: &str = "secret=";

use super::pace::SinkRate;

/// A sink's entry in the store, read.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StoredLine {
    /// The URL kept, credentials and all; None for a `--sink` sink's settings.
    pub(crate) url: Option<String>,
    /// Paused (PauseSink): no push leaves until resumed.
    pub(crate) paused: bool,
    /// The rate set with SetSink (a `--sink` sink's is its flag's, never kept here).
    pub(crate) rate: Option<SinkRate>,
    /// The signing secrets SetSink gave, `whsec_<base64>` each (checked as they are used).
    pub(crate) secrets: Vec<String>,
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
        let (mut paused, mut rate, mut secrets) = (false, None, Vec::new());
        for setting in words {
            match setting {
                PAUSED if !paused => paused = true,
                setting if setting.starts_with(RATE) && rate.is_none() && url.is_some() => {
                    rate = Some(setting[RATE.len()..].parse()?);
                }
                setting if setting.starts_with(SECRET) && url.is_some() => {
                    secrets.push(setting[SECRET.len()..].to_owned());
                }
                // Not echoed whole: an entry holds credentials.
                _ => return Err("a setting this tickd does not know".into()),
            }
        }
        Ok(StoredLine {
            url,
            paused,
            rate,
            secrets,
        })
    }

    /// The entry to keep; None for a `--sink` sink with nothing to keep.
    pub(crate) fn line(&self) -> Option<String> {
        let mut line = match &self.url {
            Some(url) => url.clone(),
            None if !self.paused => return None,
            None => FLAG_SINK.to_owned(),
        };
        if let (Some(rate), Some(_)) = (self.rate, &self.url) {
            line.push(' ');
            line.push_str(RATE);
            line.push_str(&rate.to_string());
        }
        if self.url.is_some() {
            for secret in &self.secrets {
                line.push(' ');
                line.push_str(SECRET);
                line.push_str(secret);
            }
        }
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
        let rate = "7.5/s,burst=3".parse().ok();
        let two = vec!["whsec_AAAA".to_owned(), "whsec_BBBB".to_owned()];
        for (url, paused, rate, secrets) in [
            (
                Some("http://u:p@127.0.0.1/x#protobuf,h2c"),
                false,
                None,
                vec![],
            ),
            (Some("grpc://127.0.0.1:9"), true, None, vec![]),
            (Some("http://127.0.0.1/r"), true, rate, two.clone()),
            (Some("http://127.0.0.1/r"), false, rate, vec![]),
            (Some("http://127.0.0.1/s"), false, None, two.clone()),
            (None, true, None, vec![]),
        ] {
            let kept = StoredLine {
                url: url.map(str::to_owned),
                paused,
                rate,
                secrets,
            };
            let line = kept.line().expect("an entry");
            assert_eq!(StoredLine::parse(&line), Ok(kept), "{line}");
        }
        let nothing = StoredLine {
            url: None,
            paused: false,
            rate: None,
            secrets: Vec::new(),
        };
        assert_eq!(
            nothing.line(),
            None,
            "a --sink sink with no setting keeps none"
        );
    }

    #[test]
    fn an_entry_a_tickd_does_not_know_is_refused_without_echoing_it() {
        for line in [
            "",
            "http://u:secret@h/ fast",
            "http://h/ paused paused",
            "http://h/ rate=1/s rate=2/s",
            "http://h/ rate=fast",
            "--sink rate=1/s",
            "--sink secret=whsec_AAAA",
        ] {
            let error = StoredLine::parse(line).expect_err("refused");
            assert!(!error.contains("secret"), "{error}");
        }
    }
}
