//! Plain-text tables and UTC timestamps for people.
//!
//! Tables are left-aligned columns separated by two spaces, with an upper-case header, so they
//! stay readable in a terminal and easy to `grep`/`awk`.

use std::fmt::Write as _;
use trainyard_domain::time::UtcTime;

/// Renders rows under a header, padding every column but the last to its widest cell (colour
/// codes in a cell take no width).
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let columns = header.len();
    let mut widths: Vec<usize> = header.iter().map(|h| visible_width(h)).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(visible_width(cell));
        }
    }
    let mut out = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().take(columns).enumerate() {
            if i + 1 == columns {
                line.push_str(cell);
            } else {
                let pad = widths[i].saturating_sub(visible_width(cell));
                let _ = write!(line, "{cell}{}  ", " ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The characters of `cell` a terminal shows: ANSI escape sequences (`ESC [ … letter`) take
/// no room.
fn visible_width(cell: &str) -> usize {
    let mut width = 0;
    let mut chars = cell.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            width += 1;
        }
    }
    width
}

/// Whether to colour what goes to stdout: a terminal, and `NO_COLOR` unset or empty
/// (<https://no-color.org>).
pub fn colour_stdout() -> bool {
    use std::io::IsTerminal as _;
    std::io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// A job status, coloured when `colour` holds: green for success and running, red for failure,
/// yellow while waiting, cyan on the way to running.
pub fn status(status: &str, colour: bool) -> String {
    let code = match status {
        "SUCCEEDED" | "RUNNING" => "32",
        "FAILED" => "31",
        "SUBMITTED" | "PENDING" | "RUNNABLE" => "33",
        "SCHEDULED" | "STARTING" => "36",
        _ => return status.to_owned(),
    };
    if colour {
        format!("\x1b[{code}m{status}\x1b[0m")
    } else {
        status.to_owned()
    }
}

/// Formats epoch milliseconds as `YYYY-MM-DD HH:MM:SS` in UTC; `-` when absent.
pub fn timestamp(epoch_ms: Option<i64>) -> String {
    epoch_ms.map_or_else(|| "-".into(), |ms| UtcTime(ms).to_string())
}

/// A span of milliseconds for people: `42s`, `4m05s`, `3h07m`, `2d04h` (negative spans, from
/// clocks that disagree, read `0s`).
pub fn duration(ms: i64) -> String {
    let secs = ms.max(0) / 1000;
    match secs {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m{:02}s", s / 60, s % 60),
        s if s < 86_400 => format!("{}h{:02}m", s / 3600, (s % 3600) / 60),
        s => format!("{}d{:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_utc_calendar_times() {
        let cases = [
            ("the epoch", Some(0), "1970-01-01 00:00:00"),
            (
                "the reference's sample createdAt",
                Some(1_722_507_600_000),
                "2024-08-01 10:20:00",
            ),
            ("a leap day", Some(951_782_400_000), "2000-02-29 00:00:00"),
            ("before the epoch", Some(-1_000), "1969-12-31 23:59:59"),
            (
                "new year's eve",
                Some(1_704_067_199_999),
                "2023-12-31 23:59:59",
            ),
            ("absent", None, "-"),
        ];
        for (name, ms, expected) in cases {
            assert_eq!(timestamp(ms), expected, "{name}");
        }
    }

    #[test]
    fn coloured_statuses_line_up_with_plain_ones_and_colour_only_when_asked() {
        let rows = vec![
            vec![status("RUNNING", true), "a".to_owned()],
            vec![status("SUCCEEDED", false), "b".to_owned()],
        ];
        let out = render(&["STATUS", "X"], &rows);
        let columns: Vec<usize> = out
            .lines()
            .map(|l| visible_width(l.rsplit_once("  ").map_or(l, |(left, _)| left)))
            .collect();
        assert_eq!(columns, [9, 9, 9], "{out}");
        assert!(status("FAILED", true).starts_with("\x1b[31m"));
        assert_eq!(status("FAILED", false), "FAILED");
        assert_eq!(status("UNKNOWN", true), "UNKNOWN");
    }

    #[test]
    fn durations_read_in_the_two_largest_units() {
        let cases = [
            (0, "0s"),
            (-5_000, "0s"),
            (59_999, "59s"),
            (60_000, "1m00s"),
            (245_000, "4m05s"),
            (3_600_000, "1h00m"),
            (11_220_000, "3h07m"),
            (187_200_000, "2d04h"),
        ];
        for (ms, expected) in cases {
            assert_eq!(duration(ms), expected, "{ms} ms");
        }
    }

    #[test]
    fn columns_are_padded_to_the_widest_cell_and_lines_not_padded_at_the_end() {
        let rows = vec![
            vec!["a-long-name".to_owned(), "1".to_owned(), "x".to_owned()],
            vec!["b".to_owned(), "1000".to_owned(), String::new()],
        ];
        let text = render(&["NAME", "N", "NOTE"], &rows);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines,
            vec![
                "NAME         N     NOTE",
                "a-long-name  1     x",
                "b            1000",
            ]
        );
    }
}
