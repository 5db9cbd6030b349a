//! `tickctl watch`: observes a namespace, printing every expiration as it fires, without
//! taking part in delivery or acknowledging (an observer sees copies; consumers are unaffected);
//! across tickd restarts, unless `--no-reconnect`.

use std::process::ExitCode;

use clap::Args;

use crate::failure::Failure;
use crate::session::Session;
use crate::streaming::{print_expiration, ExpirationStream, StreamArgs};
use tickd::proto::{subscribe_request, SubscribeRequest};

/// Observe a namespace: print every expiration as it fires, without acknowledging.
#[derive(Debug, Args)]
pub(crate) struct Watch {
    #[command(flatten)]
    stream: StreamArgs,
}

impl Watch {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        let request = SubscribeRequest {
            namespace: session.namespace().to_owned(),
            mode: subscribe_request::Mode::Observer as i32,
            ..Default::default()
        };
        let mut expirations =
            ExpirationStream::open(session, request, &self.stream, "watching").await?;
        while let Some(expiration) = expirations.next().await? {
            print_expiration(session, &expiration);
        }
        Ok(ExitCode::SUCCESS)
    }
}
