//! The pace on tokio's paused clock: each second is exact, so the counts are too.

use super::*;

/// How many pushes `pace` lets leave in `over`, asked for as fast as they are let.
async fn admitted_over(pace: &Pace, over: Duration) -> u32 {
    let until = Instant::now() + over;
    let mut admitted = 0;
    loop {
        tokio::select! {
            biased;
            () = tokio::time::sleep_until(until) => return admitted,
            () = pace.ready() => admitted += 1,
        }
    }
}

fn rate(text: &str) -> SinkRate {
    text.parse().expect(text)
}

#[test]
fn a_rate_reads_as_pushes_per_second_with_a_burst() {
    assert_eq!(
        rate("50/s"),
        SinkRate {
            per_second: 50.0,
            burst: 5
        }
    );
    assert_eq!(rate("0.5/s").burst, 1);
    assert_eq!(rate("50/s,burst=20").burst, 20);
    assert_eq!(
        rate(&rate("7.5/s,burst=3").to_string()),
        rate("7.5/s,burst=3")
    );
    for refused in [
        "50",
        "50/m",
        "0/s",
        "-1/s",
        "x/s",
        "50/s,burst=0",
        "50/s,b=1",
        "2000000/s",
    ] {
        let why = refused.parse::<SinkRate>().expect_err(refused);
        assert!(why.contains("50/s,burst=10"), "{refused}: {why}");
    }
}

#[tokio::test(start_paused = true)]
async fn a_rate_holds_after_its_burst() {
    let pace = Pace::new(Some(rate("50/s,burst=10")));
    let admitted = admitted_over(&pace, Duration::from_secs(20)).await;
    // The burst at once, then one every 20 ms (the last may fall on the edge).
    assert!((1_009..=1_010).contains(&admitted), "{admitted}");
}

#[tokio::test(start_paused = true)]
async fn no_rate_and_no_slow_down_is_no_limit() {
    let pace = Pace::new(None);
    let start = Instant::now();
    for _ in 0..10_000 {
        pace.ready().await;
    }
    assert_eq!(Instant::now(), start, "no push waited");
    assert_eq!(pace.slowed(), None);
}

#[tokio::test(start_paused = true)]
async fn a_slow_down_holds_every_push_then_halves_the_rate_then_recovers() {
    let pace = Pace::new(Some(rate("40/s,burst=1")));
    pace.slow_down(Some(Duration::from_secs(2)));
    // Answers of pushes sent before the hold: one halving, not one each.
    for _ in 0..50 {
        pace.slow_down(Some(Duration::from_secs(2)));
    }
    assert_eq!(pace.slowed(), Some(20.0));
    assert_eq!(
        admitted_over(&pace, Duration::from_secs(2)).await,
        0,
        "held"
    );
    let first_second = admitted_over(&pace, Duration::from_secs(1)).await;
    assert!((19..=21).contains(&first_second), "{first_second}");
    // 20 × 1.25^n reaches 40 in four quiet seconds: lifted.
    let _ = admitted_over(&pace, Duration::from_secs(4)).await;
    assert_eq!(pace.slowed(), None);
    let after = admitted_over(&pace, Duration::from_secs(1)).await;
    assert!((39..=41).contains(&after), "{after}");
}

#[tokio::test(start_paused = true)]
async fn a_storm_halves_once_per_hold_down_to_one_a_second() {
    let pace = Pace::new(Some(rate("64/s")));
    let mut seen = Vec::new();
    for _ in 0..8 {
        pace.slow_down(None);
        seen.push(pace.slowed().expect("slowed"));
        // The hold ends; the next push meets the storm again.
        pace.ready().await;
    }
    assert_eq!(seen, [32.0, 16.0, 8.0, 4.0, 2.0, 1.0, 1.0, 1.0]);
}

#[tokio::test(start_paused = true)]
async fn without_a_rate_a_slow_down_halves_what_was_sent_and_recovers_to_it() {
    let pace = Pace::new(None);
    // 100 pushes over the last second.
    for _ in 0..100 {
        pace.ready().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    pace.slow_down(None);
    let slowed = pace.slowed().expect("slowed");
    assert!((45.0..=55.0).contains(&slowed), "{slowed}");
    let slowed_pushes = admitted_over(&pace, Duration::from_secs(2)).await;
    assert!(
        slowed_pushes < 100,
        "{slowed_pushes} pushes in the hold and the second after"
    );
    // Quiet seconds: 50 × 1.25^4 is past 100.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(pace.slowed(), None, "lifted once back at what was sent");
}

#[tokio::test(start_paused = true)]
async fn a_rate_changed_while_pushing_applies_at_once() {
    let pace = Pace::new(Some(rate("10/s,burst=1")));
    let slow = admitted_over(&pace, Duration::from_secs(2)).await;
    pace.set_rate(Some(rate("100/s,burst=1")));
    let fast = admitted_over(&pace, Duration::from_secs(2)).await;
    pace.set_rate(None);
    let start = Instant::now();
    for _ in 0..1_000 {
        pace.ready().await;
    }
    assert_eq!(Instant::now(), start, "lifted: no push waits");
    assert!((20..=21).contains(&slow), "{slow}");
    assert!((199..=201).contains(&fast), "{fast}");
}
