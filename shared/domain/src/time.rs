//! Instants for people: epoch milliseconds as UTC calendar times.

/// Epoch milliseconds shown as `YYYY-MM-DD HH:MM:SS`, in UTC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UtcTime(pub i64);

impl std::fmt::Display for UtcTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secs = self.0.div_euclid(1000);
        let days = secs.div_euclid(86_400);
        let of_day = secs.rem_euclid(86_400);
        let (year, month, day) = civil_from_days(days);
        write!(
            f,
            "{year:04}-{month:02}-{day:02} {:02}:{:02}:{:02}",
            of_day / 3600,
            (of_day % 3600) / 60,
            of_day % 60
        )
    }
}

/// Converts days since 1970-01-01 to a proleptic Gregorian (year, month, day), counting in
/// 400-year eras of 146,097 days whose years start on March 1st (so leap days fall last).
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let shifted = days + 719_468; // days from 0000-03-01 to 1970-01-01
    let era = shifted.div_euclid(146_097);
    let day_of_era = shifted.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_from_march = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_from_march + 2) / 5 + 1;
    let month = if month_from_march < 10 {
        month_from_march + 3
    } else {
        month_from_march - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month as u32, day as u32)
}
