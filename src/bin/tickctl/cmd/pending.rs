//! `tickctl pending`: counts and lists pending timers, page by page up to `--limit`, and with
//! `--dead` the dead expirations of a namespace; a table and a summary line, or one JSON object.

use std::process::ExitCode;

use clap::Args;

use crate::failure::Failure;
use crate::output;
use crate::session::Session;
use tickd::proto::{PendingRequest, PendingResponse, Timer};

/// Count and list pending timers (and dead expirations of a namespace).
#[derive(Debug, Args)]
pub(crate) struct Pending {
    /// List at most this many timers (0: only count them).
    #[arg(long, default_value_t = 100)]
    limit: usize,
    /// Timers asked for per call.
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    page_size: u32,
    /// Also list the namespace's dead expirations (needs --namespace).
    #[arg(long)]
    dead: bool,
}

/// What the pages add up to: the counts and dead expirations of the first page (dead ones are
/// asked for only there), and the timers of all pages.
struct Listing {
    first_page: PendingResponse,
    timers: Vec<Timer>,
    /// Where a next call would go on, when `--limit` stopped the listing early.
    next_page_token: String,
}

impl Pending {
    pub(crate) async fn run(self, session: &Session) -> Result<ExitCode, Failure> {
        // The API counts dead expirations per namespace asked; the empty one (every
        // namespace) has no list of them.
        if self.dead && session.namespace().is_empty() {
            return Err(Failure::Usage("--dead needs a --namespace".into()));
        }
        let listing = self.list_pages(session).await?;
        if session.wants_json() {
            self.print_json(&listing);
        } else {
            self.print_text(&listing);
        }
        Ok(ExitCode::SUCCESS)
    }

    /// Asks for pages until `--limit` timers are listed or the server has no more.
    async fn list_pages(&self, session: &Session) -> Result<Listing, Failure> {
        let mut timers_api = session.timers_api();
        let mut timers = Vec::new();
        let mut page_token = String::new();
        let mut first_page: Option<PendingResponse> = None;
        loop {
            let wanted = self.limit.saturating_sub(timers.len());
            let request = session.request(PendingRequest {
                namespace: session.namespace().to_owned(),
                page_size: (wanted as u64).min(u64::from(self.page_size)) as u32,
                page_token: page_token.clone(),
                include_dead: self.dead && first_page.is_none(),
            });
            let mut page = session.unary(timers_api.pending(request)).await?;
            timers.append(&mut page.timers);
            page_token = std::mem::take(&mut page.next_page_token);
            if first_page.is_none() {
                first_page = Some(page);
            }
            if page_token.is_empty() || timers.len() >= self.limit {
                break;
            }
        }
        timers.truncate(self.limit);
        Ok(Listing {
            first_page: first_page.unwrap_or_default(),
            timers,
            next_page_token: page_token,
        })
    }

    /// The pages as one PendingResponse, as grpcurl would print a single page: every timer
    /// listed, `nextPageToken` only when `--limit` left some out, dead expirations only with
    /// `--dead`.
    fn print_json(&self, listing: &Listing) {
        output::print_message(&PendingResponse {
            timers: listing.timers.clone(),
            next_page_token: listing.next_page_token.clone(),
            ..listing.first_page.clone()
        });
    }

    fn print_text(&self, listing: &Listing) {
        let first_page = &listing.first_page;
        if !listing.timers.is_empty() {
            let rows: Vec<_> = listing.timers.iter().map(output::timer_row).collect();
            output::print_line(output::table(&output::TIMER_HEADER, &rows));
        }
        let mut summary = format!("{} pending", first_page.count);
        if (listing.timers.len() as u64) < first_page.count && self.limit > 0 {
            summary.push_str(&format!(" (listed {}; see --limit)", listing.timers.len()));
        }
        if first_page.dead_count > 0 {
            summary.push_str(&format!(", {} dead", first_page.dead_count));
        }
        output::print_line(summary);
        if self.dead && !first_page.dead_expirations.is_empty() {
            let rows: Vec<_> = first_page
                .dead_expirations
                .iter()
                .map(output::dead_expiration_row)
                .collect();
            output::print_line(output::table(&output::DEAD_EXPIRATION_HEADER, &rows));
        }
    }
}
