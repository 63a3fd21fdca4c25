//! Durations and shares as people read them: three significant digits in the unit that
//! keeps the number between 1 and 1000, so that a 300 ns parse and a 30 s wait sit in the
//! same column without a screen of zeros.

/// Formats `seconds` as e.g. `312 ns`, `4.21 µs`, `12.3 ms`, `1.05 s`: the one rule for
/// times everywhere people read them (the report, its findings, compare's notes, the
/// live page's `fmtDur` mirrors it): ns below 1 µs, µs below 1 ms, ms below 1 s. A value
/// that rounds to 1000 of a unit is written in the next (`1.00 ms`, not `1000 µs`).
pub fn duration(seconds: f64) -> String {
    if !seconds.is_finite() {
        return if seconds > 0.0 {
            "∞".into()
        } else {
            "-".into()
        };
    }
    if seconds == 0.0 {
        return "0 ns".into();
    }
    // Rounded as printed (three digits from 100 up: 999.5 prints 1000), so that the
    // next unit takes what would print as 1000.
    let below = |limit: f64| seconds.abs() < limit * 0.9995;
    let (value, unit) = if below(1e-6) {
        (seconds * 1e9, "ns")
    } else if below(1e-3) {
        (seconds * 1e6, "µs")
    } else if below(1.0) {
        (seconds * 1e3, "ms")
    } else {
        (seconds, "s")
    };
    format!("{} {unit}", three_digits(value))
}

/// `value` with three significant digits (no exponent, no trailing noise): 1.23, 12.3, 123.
/// Values of 1000 and more keep all their integer digits.
pub fn three_digits(value: f64) -> String {
    let a = value.abs();
    // Round first, so that 9.996 prints as "10.0", not "10.00".
    let decimals = if a >= 99.95 {
        0
    } else if a >= 9.995 {
        1
    } else {
        2
    };
    format!("{value:.decimals$}")
}

/// A share (a fraction, 0.91) as a percentage for the headline: whole percents from 1 %,
/// one decimal below, two significant digits below 0.1 %: `91 %`, `0.4 %`, `0.042 %`.
pub fn share(fraction: f64) -> String {
    let pct = fraction * 100.0;
    if !pct.is_finite() {
        return "- %".into();
    }
    let a = pct.abs();
    if a == 0.0 {
        "0 %".into()
    } else if a >= 0.95 {
        format!("{pct:.0} %")
    } else if a >= 0.095 {
        format!("{pct:.1} %")
    } else {
        let decimals = (-a.log10().floor()) as usize + 1;
        format!("{pct:.decimals$} %")
    }
}

/// A figure in its unit as the findings' evidence gives it (`seconds`, `ratio`, `count`,
/// `per_second`, else a plain number): `4.21 µs`, `85 %`, `12`, `3818/s`. A threshold is
/// printed the same way, so that `85 % (≥ 85 %)` compares like with like.
pub fn figure(value: f64, unit: &str) -> String {
    match unit {
        "seconds" => duration(value),
        "ratio" => share(value),
        "count" => format!("{value:.0}"),
        "per_second" => format!("{}/s", three_digits(value)),
        _ => three_digits(value),
    }
}

/// A signed relative change (0.201 → `+20.1 %`), one decimal, for compare tables.
pub fn change(fraction: f64) -> String {
    let pct = fraction * 100.0;
    if !pct.is_finite() {
        return if pct > 0.0 {
            "+∞ %".into()
        } else {
            "-".into()
        };
    }
    format!("{pct:+.1} %")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_pick_a_readable_unit() {
        assert_eq!(duration(312e-9), "312 ns");
        assert_eq!(duration(4.214e-6), "4.21 µs");
        assert_eq!(duration(12.34e-3), "12.3 ms");
        assert_eq!(duration(1.054), "1.05 s");
        assert_eq!(duration(0.0), "0 ns");
        assert_eq!(duration(999.6e-9), "1.00 µs");
        assert_eq!(duration(9.996e-6), "10.0 µs");
        assert_eq!(duration(3600.0), "3600 s");
        assert_eq!(duration(f64::INFINITY), "∞");
    }

    /// The unit rule: µs below 1 ms, ms from 1 ms, whatever the figure (a CPU time per
    /// request printed `2727.3 µs` before).
    #[test]
    fn times_are_in_microseconds_below_a_millisecond_and_milliseconds_above() {
        assert_eq!(duration(2727.3e-6), "2.73 ms");
        assert_eq!(duration(999.4e-6), "999 µs");
        assert_eq!(duration(999.6e-6), "1.00 ms", "not 1000 µs");
        assert_eq!(duration(1e-3), "1.00 ms");
        assert_eq!(duration(45.04e-6), "45.0 µs");
        assert_eq!(duration(0.9996), "1.00 s");
        assert_eq!(duration(-2.5e-3), "-2.50 ms");
        for s in [1e-7, 3e-6, 5e-5, 7e-4, 2e-3, 0.3, 4.0] {
            let text = duration(s);
            let (number, unit) = text.split_once(' ').unwrap();
            let number: f64 = number.parse().unwrap();
            assert!((1.0..1000.0).contains(&number), "{text}");
            let scale = match unit {
                "ns" => 1e-9,
                "µs" => 1e-6,
                "ms" => 1e-3,
                _ => 1.0,
            };
            assert!((number * scale - s).abs() <= s * 0.005, "{text} for {s}");
        }
    }

    #[test]
    fn shares_keep_small_phases_visible() {
        assert_eq!(share(0.91), "91 %");
        assert_eq!(share(0.02), "2 %");
        assert_eq!(share(0.004), "0.4 %");
        assert_eq!(share(0.00042), "0.042 %");
        assert_eq!(share(0.0), "0 %");
    }

    #[test]
    fn changes_are_signed() {
        assert_eq!(change(0.2014), "+20.1 %");
        assert_eq!(change(-0.05), "-5.0 %");
        assert_eq!(change(0.0), "+0.0 %");
    }
}
