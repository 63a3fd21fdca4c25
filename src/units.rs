//! Durations and shares as people read them: three significant digits in the unit that
//! keeps the number between 1 and 1000, so that a 300 ns parse and a 30 s wait sit in the
//! same column without a screen of zeros.

/// Formats `seconds` as e.g. `312 ns`, `4.21 µs`, `12.3 ms`, `1.05 s`.
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
    let (value, unit) = if seconds < 1e-6 {
        (seconds * 1e9, "ns")
    } else if seconds < 1e-3 {
        (seconds * 1e6, "µs")
    } else if seconds < 1.0 {
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
        assert_eq!(duration(999.6e-9), "1000 ns");
        assert_eq!(duration(9.996e-6), "10.0 µs");
        assert_eq!(duration(3600.0), "3600 s");
        assert_eq!(duration(f64::INFINITY), "∞");
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
