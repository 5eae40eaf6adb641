//! Structured JSON logs, one object per line on stdout, which Lambda's JSON log format keeps
//! as is. The level comes from `RUST_LOG` (the template sets `info`).

/// Installs the JSON subscriber; a second call (tests) changes nothing.
pub fn init() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .json()
        .with_env_filter(filter)
        // Lambda adds its own request id and timestamps; keep lines flat and greppable.
        .flatten_event(true)
        .with_current_span(false)
        .with_span_list(false)
        .with_ansi(false)
        .with_writer(std::io::stdout)
        .try_init();
}
