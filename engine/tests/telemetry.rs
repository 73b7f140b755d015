//! What a job shows outside itself (`lockgate::telemetry`): its
//! checkpoint and recovery spans, seen by a test `tracing` subscriber;
//! its metrics, rendered by the Prometheus exporter an application would
//! install; its health through failed checkpoints, a restart and its end.
//!
//! One process for every test here: the subscriber and the recorder are
//! global (a job's threads are not the test's), so each test names its
//! own job and looks at that job's spans and series only.

mod common;

use common::{wait_for, Counter, Hooked, StorageHooks};
use lockgate::telemetry::{JobState, SECONDS_BUCKETS};
use lockgate::*;
use lockgate::{
    barrier::AbortReason,
    storage::{MemoryStorage, StorageError, TaskStateKey},
    testing::{FailurePlan, FailurePoint},
};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

/// Drops what it gets.
struct U64Sink;

impl Sink<u64> for U64Sink {
    fn write(&mut self, input: &mut Vec<u64>) -> Result<(), BoxError> {
        input.clear();
        Ok(())
    }
}

impl Checkpointed for U64Sink {}

/// A span as the capture saw it: name, level, fields (as text).
#[derive(Clone, Debug)]
struct SpanData {
    name: &'static str,
    level: Level,
    fields: BTreeMap<String, String>,
}

/// An event: level, fields (`message` among them) and the span it is in.
#[derive(Clone, Debug)]
struct EventData {
    level: Level,
    fields: BTreeMap<String, String>,
    span: Option<SpanData>,
}

static CLOSED: Mutex<Vec<SpanData>> = Mutex::new(Vec::new());
static EVENTS: Mutex<Vec<EventData>> = Mutex::new(Vec::new());

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

/// Keeps every closed span and every event.
struct Capture;

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        attrs.record(&mut Fields(&mut fields));
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanData {
                name: attrs.metadata().name(),
                level: *attrs.metadata().level(),
                fields,
            });
        }
    }

    fn on_record(&self, id: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(id) {
            if let Some(d) = span.extensions_mut().get_mut::<SpanData>() {
                values.record(&mut Fields(&mut d.fields));
            }
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        event.record(&mut Fields(&mut fields));
        let span = ctx
            .event_span(event)
            .and_then(|s| s.extensions().get::<SpanData>().cloned());
        EVENTS.lock().unwrap().push(EventData {
            level: *event.metadata().level(),
            fields,
            span,
        });
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        if let Some(span) = ctx.span(&id) {
            if let Some(d) = span.extensions().get::<SpanData>() {
                CLOSED.lock().unwrap().push(d.clone());
            }
        }
    }
}

/// Installs the capture and the Prometheus recorder, once.
fn setup() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            tracing::subscriber::set_global_default(tracing_subscriber::registry().with(Capture))
                .expect("the first subscriber");
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS_BUCKETS)
                .unwrap()
                .install_recorder()
                .expect("the first recorder")
        })
        .clone()
}

fn closed_spans(name: &str, job: &str) -> Vec<SpanData> {
    CLOSED
        .lock()
        .unwrap()
        .iter()
        .filter(|s| s.name == name && s.fields.get("job").map(String::as_str) == Some(job))
        .cloned()
        .collect()
}

fn events_in(span: &str, job: &str) -> Vec<EventData> {
    EVENTS
        .lock()
        .unwrap()
        .iter()
        .filter(|e| {
            e.span.as_ref().is_some_and(|s| {
                s.name == span && s.fields.get("job").map(String::as_str) == Some(job)
            })
        })
        .cloned()
        .collect()
}

/// The value of the series `name{labels}` in `text` (labels in the
/// exporter's order, as written: `job_name="x",task="y"`).
fn series(text: &str, name: &str, labels: &str) -> Option<f64> {
    let prefix = format!("{name}{{{labels}}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map(|v| v.trim().parse().unwrap())
}

/// A source of `n` records, then idle until released, then done; a sink
/// task after a rebalance.
fn held_job(name: &str, config: JobConfig, n: u64, release: &Arc<AtomicBool>) -> JobBuilder {
    let job = JobBuilder::new(name, config);
    let r = release.clone();
    job.source("numbers", 1, move |_| {
        Counter::part(0, 1, n).held(r.clone())
    })
    .rebalance()
    .task("sink", 1)
    .sink("sink", |_| U64Sink);
    job
}

#[test]
fn each_checkpoint_is_a_span_with_its_parts_and_the_metrics_match_the_job() {
    let prom = setup();
    let job = "tele-spans";
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    let release = Arc::new(AtomicBool::new(false));
    let handle = held_job(job, config, 1000, &release).start().unwrap();
    for _ in 0..3 {
        handle.trigger_checkpoint().unwrap();
    }
    release.store(true, Ordering::Release);
    let m = handle.wait().unwrap();
    let completed = m.checkpoint_counts.completed;
    assert!(completed >= 4, "3 on demand and the final one: {completed}");

    let spans = closed_spans("checkpoint", job);
    assert_eq!(spans.len() as u64, completed, "{spans:#?}");
    for s in &spans {
        assert_eq!(s.level, Level::DEBUG);
        assert_eq!(s.fields["status"], "completed");
        assert_eq!(s.fields["mode"], "exactly-once");
        assert_eq!(s.fields["kind"], "checkpoint");
        assert!(s.fields["duration_ms"].parse::<f64>().unwrap() > 0.0);
        assert!(s.fields["checkpointed_bytes"].parse::<u64>().unwrap() > 0);
    }
    let ids: Vec<u64> = spans
        .iter()
        .map(|s| s.fields["id"].parse().unwrap())
        .collect();
    let last = m.last_completed_checkpoint.as_ref().unwrap();
    assert!(ids.contains(&last.id.get()), "{ids:?}");
    // A debug event per subtask part, in its checkpoint's span.
    let parts = events_in("checkpoint", job);
    let parts: Vec<&EventData> = parts
        .iter()
        .filter(|e| e.fields.get("message").map(String::as_str) == Some("subtask part"))
        .collect();
    assert_eq!(parts.len() as u64, 2 * completed, "{parts:#?}");
    assert!(parts.iter().all(|e| e.level == Level::DEBUG
        && e.fields.contains_key("sync_ms")
        && e.fields.contains_key("async_ms")));
    for task in ["numbers[0]", "sink[0]"] {
        assert!(parts.iter().any(|e| e.fields["task"] == task), "{task}");
    }

    // The metrics, rendered as Prometheus would scrape them, after the
    // job's last sample.
    let text = prom.render();
    let j = format!("job_name=\"{job}\"");
    assert_eq!(
        series(&text, "lockgate_checkpoints_completed_total", &j),
        Some(completed as f64),
        "{text}"
    );
    assert_eq!(
        series(&text, "lockgate_checkpoint_duration_seconds_count", &j),
        Some(completed as f64)
    );
    assert_eq!(
        series(
            &text,
            "lockgate_records_in_total",
            &format!("{j},task=\"sink\",subtask=\"0\"")
        ),
        Some(1000.0)
    );
    assert_eq!(
        series(
            &text,
            "lockgate_records_in_total",
            &format!("{j},task=\"numbers\",subtask=\"0\"")
        ),
        Some(1000.0)
    );
    assert_eq!(
        series(
            &text,
            "lockgate_checkpoints_aborted_total",
            &format!("{j},reason=\"timeout\"")
        ),
        Some(0.0)
    );
    assert_eq!(
        series(&text, "lockgate_checkpoints_in_progress", &j),
        Some(0.0)
    );
    assert_eq!(
        series(&text, "lockgate_job_state", &j),
        Some(f64::from(JobState::Finished.code()))
    );
    assert_eq!(series(&text, "lockgate_job_healthy", &j), Some(0.0));
    assert!(
        series(
            &text,
            "lockgate_checkpoint_sync_duration_seconds_count",
            &format!("{j},task=\"sink\",subtask=\"0\"")
        ) == Some(completed as f64),
        "{text}"
    );
    // Never a checkpoint id in a label.
    assert!(!text.contains("id=\""), "{text}");
}

#[test]
fn an_injected_failure_is_a_recovery_span_from_the_failure_to_the_first_record() {
    let prom = setup();
    let job = "tele-recovery";
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.restart = RestartStrategy {
        max_attempts: 1,
        delay: Duration::from_millis(20),
    };
    let builder = JobBuilder::new(job, config);
    // 10 records a millisecond: checkpoints complete before the failure
    // at record 2,000 of the source.
    builder
        .source("numbers", 1, |_| Counter::paced(0, 1, 4000, 10, 1_000_000))
        .rebalance()
        .task("sink", 1)
        .sink("sink", |_| U64Sink);
    let plan = FailurePlan::none().with(0, FailurePoint::AfterRecords(2000));
    let m = builder.with_failures(plan).start().unwrap().wait().unwrap();
    assert_eq!(m.restarts, 1);
    let restored = m.failures[0]
        .restored_from
        .expect("a checkpoint before the failure");

    let spans = closed_spans("recovery", job);
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let s = &spans[0];
    assert_eq!(s.level, Level::INFO);
    assert_eq!(s.fields["restart"], "1");
    assert_eq!(s.fields["checkpoint"], restored.get().to_string());
    assert_eq!(s.fields["first_record"], "true");
    assert!(
        s.fields["cause"].starts_with("numbers[0] failed: injected failure"),
        "{s:?}"
    );
    // The source's position (8 bytes) at least.
    assert!(s.fields["state_bytes"].parse::<u64>().unwrap() >= 8);
    let took: f64 = s.fields["duration_ms"].parse().unwrap();
    assert!(took >= 20.0, "the restart delay is part of it: {took}");

    let text = prom.render();
    let j = format!("job_name=\"{job}\"");
    assert_eq!(series(&text, "lockgate_restarts_total", &j), Some(1.0));
    assert_eq!(
        series(&text, "lockgate_recovery_duration_seconds_count", &j),
        Some(1.0)
    );
    let last = series(&text, "lockgate_last_recovery_duration_seconds", &j).unwrap();
    assert!(
        (last * 1e3 - took).abs() < 1.0,
        "{last} s against {took} ms"
    );
    assert_eq!(
        series(
            &text,
            "lockgate_checkpoints_aborted_total",
            &format!("{j},reason=\"task_failure\"")
        ),
        Some(
            m.checkpoint_counts
                .aborted_by_reason
                .get(&AbortReason::TaskFailure)
                .copied()
                .unwrap_or(0) as f64
        )
    );
}

/// Part writes fail while the flag is set.
struct Flaky(Arc<AtomicBool>);

impl StorageHooks for Flaky {
    fn before_write(&self, id: CheckpointId, key: &TaskStateKey) -> Result<(), StorageError> {
        if self.0.load(Ordering::Acquire) {
            return Err(StorageError::Io {
                op: "writing",
                path: format!("chk-{id}/{key:?}").into(),
                source: std::io::Error::other("the test's storage fails"),
            });
        }
        Ok(())
    }
}

#[test]
fn health_is_lost_at_the_tolerated_failed_checkpoints_and_back_after_a_completed_one() {
    let prom = setup();
    let job = "tele-health";
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.tolerable_failures = 2;
    let release = Arc::new(AtomicBool::new(false));
    let fail = Arc::new(AtomicBool::new(false));
    let storage = Hooked {
        inner: MemoryStorage::new(),
        hooks: Flaky(fail.clone()),
    };
    let handle = held_job(job, config, 100, &release)
        .with_storage(Box::new(storage))
        .start()
        .unwrap();
    assert!(wait_for(10, || handle.health().ok), "{:?}", handle.health());
    assert_eq!(handle.health().reason, "running");
    handle.trigger_checkpoint().unwrap();

    // The storage fails between two moments: two checkpoints fail.
    fail.store(true, Ordering::Release);
    assert_eq!(handle.trigger_checkpoint(), Err(AbortReason::StorageError));
    assert!(
        handle.health().ok,
        "1 failed, 2 tolerated: {:?}",
        handle.health()
    );
    assert_eq!(handle.trigger_checkpoint(), Err(AbortReason::StorageError));
    let h = handle.health();
    assert!(!h.ok);
    assert_eq!(h.state, JobState::Running);
    assert_eq!(
        h.reason,
        "2 checkpoints failed in a row (tolerated: 2), the last: storage_error"
    );
    let probe = handle.health_probe();
    assert_eq!(probe.health(), h);
    let j = format!("job_name=\"{job}\"");
    let text = prom.render();
    assert_eq!(
        series(&text, "lockgate_checkpoint_consecutive_failures", &j),
        Some(2.0)
    );
    assert_eq!(
        series(
            &text,
            "lockgate_checkpoints_aborted_total",
            &format!("{j},reason=\"storage_error\"")
        ),
        Some(2.0)
    );
    // Each failed checkpoint is a warning in its span.
    let warned: Vec<EventData> = events_in("checkpoint", job)
        .into_iter()
        .filter(|e| e.level == Level::WARN)
        .collect();
    assert_eq!(warned.len(), 2, "{warned:#?}");
    assert!(warned
        .iter()
        .all(|e| e.fields["message"].contains("aborted: storage_error")
            && e.span.as_ref().unwrap().fields["status"] == "storage_error"));

    fail.store(false, Ordering::Release);
    handle.trigger_checkpoint().unwrap();
    assert!(handle.health().ok, "{:?}", handle.health());
    assert!(wait_for(5, || series(
        &prom.render(),
        "lockgate_job_healthy",
        &j
    ) == Some(1.0)));

    release.store(true, Ordering::Release);
    handle.wait().unwrap();
    let h = probe.health();
    assert_eq!((h.ok, h.state), (false, JobState::Finished));
    assert_eq!(h.reason, "the job finished");
}

#[test]
fn health_says_restarting_while_the_job_restarts() {
    setup();
    let job = "tele-restarting";
    let mut config = JobConfig::default();
    config.checkpoint.mode = CheckpointMode::ExactlyOnce;
    config.checkpoint.interval = Some(Duration::from_millis(5));
    config.restart = RestartStrategy {
        max_attempts: 1,
        delay: Duration::from_millis(300),
    };
    let release = Arc::new(AtomicBool::new(false));
    let plan = FailurePlan::none().with(0, FailurePoint::AfterRecords(50));
    let handle = held_job(job, config, 100, &release)
        .with_failures(plan)
        .start()
        .unwrap();
    assert!(
        wait_for(10, || handle.health().state == JobState::Restarting),
        "{:?}",
        handle.health()
    );
    let h = handle.health();
    assert!(!h.ok);
    assert!(
        h.reason
            .starts_with("restarting after numbers[0] failed: injected failure"),
        "{}",
        h.reason
    );
    assert!(wait_for(10, || handle.health().ok), "{:?}", handle.health());
    assert_eq!(handle.metrics().restarts, 1);
    release.store(true, Ordering::Release);
    let probe = handle.health_probe();
    handle.wait().unwrap();
    assert_eq!(probe.health().state, JobState::Finished);
}
